"""The pack's weight-shared NPU context, generated and trial-loaded in child processes; the cached verdict.

Loading a weight-shared QNN context can kill the process inside Qualcomm's ``libQnnHtp.so``: the
x86-64 HTP emulator does (SIGSEGV, ``benchmarks/qnn_weight_sharing_repro.py``; ONNX Runtime's own
test loads such contexts only on ARM64 devices), and nothing in this process could recover from
that. So before the runtime loads one (docs/NPU.md, "One shared context for the pack"), a child
process loads it the way the runtime would (every graph of the set, ``ep.share_ep_contexts=1``) and
runs one graph; the parent compares its outputs with the CPU's (:data:`TOLERANCE`). A crash, any
error, a timeout (:data:`TIMEOUT_S`) or different outputs is a failed verdict, and the runtime
uses one context per graph. The verdict is written beside the shared context (``probe.json``, with
the cache key it is for: pack hash, provider options, ONNX Runtime and plugin versions, platform),
so the child runs once per pack and plugin; a corrupt verdict, or one for another key or probe
version, is ignored (the probe runs again). The shared set is also generated in a child
(``task: generate``): QNN holds every graph of the group in memory until the last is compiled (a
peak several times the per-graph compile's, docs/NPU.md), which then ends with the child, and a
crash while generating is contained the same way.

The child is this program started again with :data:`CHILD_FLAG` (:func:`child_command`): in the
frozen app ``sys.executable`` is the app itself (PyInstaller), whose entry point
(``captioner.__main__.main``) hands the flag to :func:`child_main` before anything else; elsewhere
``python -m captioner``. A plain subprocess rather than ``multiprocessing``: no re-import of the
parent's ``__main__`` (which, under a console-script launcher on Windows or in a frozen app, needs
``freeze_support`` and care), and the exit status tells a crash from an error. Request, progress
and result travel as files in the probe folder (the windowed app's child has no usable stdout).
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from captioner.storage.atomic import replace_file

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["CHILD_FLAG", "PROBE_VERSION", "TIMEOUT_S", "TOLERANCE", "Verdict", "child_command", "child_main",
           "compare", "read_verdict", "run_child", "trial_load", "write_verdict"]

logger = logging.getLogger(__name__)

CHILD_FLAG = "--npu-probe-child"
PROBE_VERSION = 1  # bumped when what the child checks changes: older verdicts are then ignored
# The largest difference allowed between the child's outputs and the CPU's, as a fraction of the
# CPU output's largest magnitude (at least 1). The HTP computes in fp16: real tiny.en's encoder
# differs by at most 0.099 of 5.12 (1.9 %) and 0.103 of 6.58 (tests/models/test_qnn_real_weights.py);
# a context that loads the wrong weights or none is off by the magnitude itself.
TOLERANCE = 0.05
# Loading every graph of the set and running one: seconds on a device, ~10 s for a small pack on the
# emulator; a hang is a failure.
TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the shared context loads here.

    Attributes:
        loads: the child loaded every graph and ran one with the CPU's outputs (within :data:`TOLERANCE`).
        reason: why not (one line), or "" when it loads.
        max_error: the largest relative difference from the CPU's outputs (None: nothing ran).
        seconds: the child's wall time (start, load, run).
    """

    loads: bool
    reason: str = ""
    max_error: float | None = None
    seconds: float | None = None


def read_verdict(path: Path, key: Mapping[str, Any]) -> Verdict | None:
    """The verdict stored at ``path`` for ``key``; None when there is none, or it is corrupt, for
    another key or for another probe version (then the probe runs again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.info("NPU probe verdict %s unreadable (%s); probing again", path, exc)
        return None
    try:
        if data["probe"] != PROBE_VERSION or data["key"] != json.loads(json.dumps(dict(key))):
            logger.info("NPU probe verdict %s is for another pack, plugin or probe; probing again", path)
            return None
        v = data["verdict"]
        if not isinstance(v["loads"], bool) or not isinstance(v["reason"], str):
            raise TypeError("loads/reason")
        return Verdict(v["loads"], v["reason"], None if v.get("max_error") is None else float(v["max_error"]),
                       None if v.get("seconds") is None else float(v["seconds"]))
    except (KeyError, TypeError, ValueError) as exc:
        logger.info("NPU probe verdict %s is malformed (%s); probing again", path, exc)
        return None


def write_verdict(path: Path, key: Mapping[str, Any], verdict: Verdict) -> None:
    """Store ``verdict`` for ``key`` at ``path`` (written whole, then renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"probe": PROBE_VERSION, "key": dict(key), "verdict": asdict(verdict)}, indent=1),
                   encoding="utf-8")
    replace_file(tmp, path)


def child_command(request: Path) -> list[str]:
    """The command line that runs :func:`child_main` on ``request`` in a new process: the frozen app
    itself (PyInstaller sets ``sys.frozen``; its entry point sees :data:`CHILD_FLAG` first), else
    this interpreter with ``-m captioner``."""
    if getattr(sys, "frozen", False):
        return [sys.executable, CHILD_FLAG, str(request)]
    return [sys.executable, "-m", "captioner", CHILD_FLAG, str(request)]


def trial_load(folder: Path, contexts: Sequence[Path], run: Path, feeds: Mapping[str, np.ndarray],
               options: Mapping[str, str], timeout: float = TIMEOUT_S) -> tuple[dict[str, np.ndarray] | None, str, float]:
    """Load ``contexts`` (every ``*_ctx.onnx`` of the shared set, in order) in a child process with QNN
    HTP ``options``, run ``run`` (one of them) on ``feeds``; ``folder`` holds the request and result.

    Returns:
        (outputs by name, "", seconds) when the child loaded and ran it; (None, why, seconds) when
        it crashed, failed, timed out or wrote no outputs.
    """
    folder.mkdir(parents=True, exist_ok=True)
    inputs, outputs = folder / "inputs.npz", folder / "outputs.npz"
    outputs.unlink(missing_ok=True)
    arrays: dict[str, Any] = {k: np.asarray(v) for k, v in feeds.items()}
    np.savez(inputs, **arrays)
    why, seconds = run_child(folder, {"task": "load", "contexts": [str(c) for c in contexts], "run": str(run),
                                      "options": dict(options), "inputs": str(inputs), "outputs": str(outputs)},
                             "the trial load", timeout)
    if why:
        return None, why, seconds
    try:
        with np.load(outputs) as npz:
            return {k: npz[k] for k in npz.files}, "", seconds
    except (OSError, ValueError) as exc:
        return None, f"the trial load's outputs are unreadable ({exc})", seconds


def run_child(folder: Path, request: dict[str, Any], what: str, timeout: float | None,
              progress: Callable[[int, int], None] | None = None) -> tuple[str, float]:
    """Run :func:`child_main` on ``request`` in a new process (:func:`child_command`), its files in
    ``folder``; ``progress(done, total)`` for each step the child reports (polled). ``what`` names the
    task in the reason. Returns ("", seconds) when it succeeded, else (why: crashed, failed with its
    error, did not finish in ``timeout`` s, could not start; seconds)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / f"{name}.{ext}" for name, ext in (("request", "json"), ("result", "json"),
                                                             ("progress", "txt"), ("stderr", "txt"))}
    for name in ("result", "progress"):
        paths[name].unlink(missing_ok=True)
    paths["request"].write_text(json.dumps({**request, "result": str(paths["result"]),
                                            "progress": str(paths["progress"])}), encoding="utf-8")
    t0 = time.perf_counter()
    seen = 0
    try:
        with paths["stderr"].open("wb") as err:  # a file, not a pipe: a chatty child never blocks on it
            proc = subprocess.Popen(child_command(paths["request"]), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err,
                                    creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0))
            try:
                while True:
                    try:
                        code = proc.wait(timeout=0.2)
                    except subprocess.TimeoutExpired:
                        code = None
                    if progress is not None:
                        seen = _report_progress(paths["progress"], seen, progress)
                    if code is not None:
                        break
                    if timeout is not None and time.perf_counter() - t0 > timeout:
                        proc.kill()
                        proc.wait()
                        return f"{what} did not finish in {timeout:.0f} s", time.perf_counter() - t0
            except BaseException:  # Ctrl+C, or the progress callback raised: the child goes too
                proc.kill()
                proc.wait()
                raise
    except OSError as exc:
        return f"{what} could not start ({exc})", time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    try:
        report = json.loads(paths["result"].read_text(encoding="utf-8"))
    except (OSError, ValueError):
        report = {}
    if code == 0 and report.get("ok"):
        return "", seconds
    try:
        lines = paths["stderr"].read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        lines = []
    tail = [line for line in lines if line.strip()][-1:]
    why = str(report.get("error") or (tail[0][:200] if tail else ""))
    return f"{what} {_exit_status(code)}" + (f": {why}" if why else ""), seconds


def _report_progress(path: Path, seen: int, progress: Callable[[int, int], None]) -> int:
    """Call ``progress`` for the lines ``done total`` of ``path`` after the first ``seen``; the count read."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")[:-1]  # whole lines only
    except OSError:
        return seen
    for line in lines[seen:]:
        parts = line.split()
        if len(parts) != 2:
            break
        try:
            progress(int(parts[0]), int(parts[1]))
        except ValueError:
            break
        seen += 1
    return seen


def compare(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]) -> tuple[float, str]:
    """(largest relative difference, why the outputs are not the CPU's or "") for the child's
    ``outputs`` against the CPU's ``reference`` (relative to each output's largest magnitude, at least 1)."""
    worst = 0.0
    for name, ref in reference.items():
        got = outputs.get(name)
        if got is None or got.shape != ref.shape:
            return float("inf"), f"output {name} is {None if got is None else got.shape}, the CPU's {ref.shape}"
        if not np.isfinite(got).all():
            return float("inf"), f"output {name} is not finite"
        scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
        worst = max(worst, float(np.abs(got.astype(np.float64) - ref).max(initial=0.0)) / scale)
    if worst > TOLERANCE:
        return worst, f"its outputs differ from the CPU's by {worst:.3g} of their magnitude (allowed {TOLERANCE})"
    return worst, ""


def _exit_status(code: int) -> str:
    """``crashed (SIGSEGV)``, ``crashed (0xC0000005)`` or ``failed (exit 1)``."""
    if code < 0:
        try:
            return f"crashed ({signal.Signals(-code).name})"
        except ValueError:
            return f"crashed (signal {-code})"
    if code >= 0xC0000000:  # a Windows NTSTATUS: an access violation is 0xC0000005
        return f"crashed (0x{code:08X})"
    return f"failed (exit {code})"


def child_main(request_path: str) -> int:
    """In the child: run the request's task (``generate`` the shared set, or ``load`` it and run one
    graph), then write the result file. Exit 0 when it succeeded, 1 when it failed with an error (a
    crash writes nothing)."""
    request = json.loads(Path(request_path).read_text(encoding="utf-8"))
    result = Path(request["result"])
    try:
        if request.get("task") == "generate":
            _generate(request)
        else:
            _load_and_run(request)
    except Exception as exc:  # anything ORT or QNN raises is the verdict, not a crash
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        result.write_text(json.dumps({"ok": False, "error": text[:300]}), encoding="utf-8")
        return 1
    result.write_text(json.dumps({"ok": True}), encoding="utf-8")
    return 0


def _generate(request: Mapping[str, Any]) -> None:
    """Compile the pack's shared set into the request's folder (the parent's cache key), reporting
    each graph as a line ``done total`` in the progress file."""
    from captioner.engine.runtime import Runtime
    from captioner.models.pack import Pack

    progress = Path(request["progress"])

    def step(done: int, total: int) -> None:
        with progress.open("a", encoding="utf-8") as f:
            f.write(f"{done} {total}\n")

    rt = Runtime(Pack.load(request["pack"]), "qnn", cache_dir=Path(request["cache"]), threads=int(request["threads"]),
                 npu_buckets=request["buckets"], shared_context=True)
    try:
        rt._generate_shared_here(Path(request["folder"]), dict(request["options"]), step)
    finally:
        rt.close()


def _load_and_run(request: Mapping[str, Any]) -> None:
    """Open every context of the request on QNN HTP, as the runtime would, and run one; save its outputs."""
    import onnxruntime as ort

    from captioner.engine.providers import QNN_EP, Candidate, qnn_devices, session_options

    devices, version, why = qnn_devices()
    if not devices:
        raise RuntimeError(why)
    cand = Candidate("QNN-HTP", QNN_EP, dict(request["options"]), devices, version, strict=True, uses_ep_context=True)
    sessions = {}
    for ctx in request["contexts"]:  # the runtime opens the whole set at once, in this order
        so = session_options(cand, 1)
        so.add_session_config_entry("ep.share_ep_contexts", "1")
        sessions[ctx] = ort.InferenceSession(ctx, sess_options=so)
    sess = sessions[request["run"]]
    with np.load(request["inputs"]) as npz:
        feeds = {k: npz[k] for k in npz.files}
    names = [o.name for o in sess.get_outputs()]
    arrays: dict[str, Any] = dict(zip(names, sess.run(names, feeds), strict=True))
    np.savez(request["outputs"], **arrays)
    for ctx in reversed(list(sessions)):  # in reverse creation order, as shared EP contexts require
        del sessions[ctx]
