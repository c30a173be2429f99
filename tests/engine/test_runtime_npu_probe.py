"""The weight-shared NPU context is trial-loaded once in a child process before the runtime uses it
(captioner/engine/npu_probe.py): a crash there is contained and recorded, the verdict is cached per
pack + plugin, and the runtime goes on with one context per graph where it does not load.

The emulator tests use a 1-layer, d_model 32 random pack and the 3 s bucket only (5 graphs), so each
compile takes a second or two; the x86-64 HTP emulator kills the child loading the shared context
(SIGSEGV in libQnnHtp.so, benchmarks/qnn_weight_sharing_repro.py).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import wave
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from captioner.engine import npu_probe
from captioner.engine.npu_probe import Verdict

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech" / "1089-134691-0000.wav"  # 2.1 s
KEY = {"pack": "abc", "provider": "QNN-HTP", "options": {"backend_type": "htp"}, "ort": "1.32.0", "plugin": "2.7.0",
       "platform": "linux", "shared": [3]}


# -- the verdict file, the comparison and the child's exit status (no NPU needed) ------------------
def test_a_verdict_is_read_back_only_for_its_own_key_and_probe_version(tmp_path) -> None:
    path = tmp_path / "probe.json"
    assert npu_probe.read_verdict(path, KEY) is None  # none yet
    npu_probe.write_verdict(path, KEY, Verdict(False, "the trial load crashed (SIGSEGV)", None, 0.4))
    assert npu_probe.read_verdict(path, KEY) == Verdict(False, "the trial load crashed (SIGSEGV)", None, 0.4)
    assert npu_probe.read_verdict(path, {**KEY, "plugin": "2.8.0"}) is None  # another plugin: stale
    assert npu_probe.read_verdict(path, {**KEY, "pack": "def"}) is None  # another pack
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "probe": npu_probe.PROBE_VERSION + 1}))
    assert npu_probe.read_verdict(path, KEY) is None  # written by another version of the probe
    for corrupt in ("{not json", "[]", json.dumps({**data, "verdict": {"loads": "yes", "reason": ""}}),
                    json.dumps({"probe": npu_probe.PROBE_VERSION, "key": KEY})):
        path.write_text(corrupt)
        assert npu_probe.read_verdict(path, KEY) is None, corrupt
    assert not list(tmp_path.glob("*.tmp"))


def test_outputs_must_match_the_cpus_within_the_stated_tolerance() -> None:
    ref = {"cross_k": np.array([[5.0, -2.0]], np.float32), "cross_v": np.array([0.5, 0.1], np.float32)}
    fp16_like = {"cross_k": ref["cross_k"] + 0.1, "cross_v": ref["cross_v"] - 0.01}  # 2 % of 5
    error, why = npu_probe.compare(fp16_like, ref)
    assert why == "" and error == pytest.approx(0.02, rel=1e-3)
    error, why = npu_probe.compare({**fp16_like, "cross_v": np.zeros(2, np.float32) + 0.9}, ref)
    assert error == pytest.approx(0.8, rel=1e-3) and "differ from the CPU's" in why  # scale at least 1
    assert "not finite" in npu_probe.compare({**fp16_like, "cross_k": ref["cross_k"] * np.nan}, ref)[1]
    assert "(1, 2)" in npu_probe.compare({"cross_k": ref["cross_k"][0], "cross_v": ref["cross_v"]}, ref)[1]


def _fake_child(monkeypatch, code: str) -> list[Path]:
    """Make the trial load start ``python -c code REQUEST`` instead of the app (the generating child
    stays the real one); the trial loads started."""
    started: list[Path] = []
    real = npu_probe.child_command

    def command(request: Path) -> list[str]:
        if json.loads(request.read_text())["task"] == "generate":
            return real(request)
        started.append(request)
        return [sys.executable, "-c", code, str(request)]

    monkeypatch.setattr(npu_probe, "child_command", command)
    return started


def test_a_crashing_a_failing_and_a_hanging_child_are_verdicts_not_the_apps_end(tmp_path, monkeypatch) -> None:
    feeds = {"mel": np.zeros((1, 2, 3), np.float32)}
    args = (tmp_path / "probe", [tmp_path / "a_ctx.onnx"], tmp_path / "a_ctx.onnx", feeds, {"backend_type": "htp"})
    if hasattr(signal, "SIGSEGV") and sys.platform != "win32":
        _fake_child(monkeypatch, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
        assert npu_probe.trial_load(*args)[:2] == (None, "the trial load crashed (SIGSEGV)")
    _fake_child(monkeypatch, "import sys; print('QNN said no', file=sys.stderr); sys.exit(3)")
    assert npu_probe.trial_load(*args)[:2] == (None, "the trial load failed (exit 3): QNN said no")
    _fake_child(monkeypatch, "import time; time.sleep(60)")
    outputs, why, seconds = npu_probe.trial_load(*args, timeout=1.0)
    assert outputs is None and why == "the trial load did not finish in 1 s" and seconds < 30


def test_the_child_is_the_app_itself_when_frozen_and_its_entry_point_hands_over_first(tmp_path, monkeypatch) -> None:
    request = tmp_path / "request.json"
    assert npu_probe.child_command(request) == [sys.executable, "-m", "captioner", npu_probe.CHILD_FLAG, str(request)]
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # PyInstaller: sys.executable is the app
    monkeypatch.setattr(sys, "executable", str(tmp_path / "captioner.exe"))
    assert npu_probe.child_command(request) == [str(tmp_path / "captioner.exe"), npu_probe.CHILD_FLAG, str(request)]
    monkeypatch.undo()
    # the entry point (captioner.__main__.main, which installer/entry.py runs) dispatches the flag
    # before any logging or argument parsing: a context that does not exist is an error result, exit 1
    from captioner.__main__ import main

    result = tmp_path / "result.json"
    request.write_text(json.dumps({"contexts": [str(tmp_path / "missing_ctx.onnx")], "run": str(tmp_path / "missing_ctx.onnx"),
                                   "options": {"backend_type": "htp"}, "inputs": str(tmp_path / "in.npz"),
                                   "outputs": str(tmp_path / "out.npz"), "result": str(result)}))
    assert main([npu_probe.CHILD_FLAG, str(request)]) == 1
    report = json.loads(result.read_text())
    assert report["ok"] is False and report["error"]


# -- on the HTP emulator ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def npu_pack(tmp_path_factory):
    pytest.importorskip("onnxruntime_qnn")
    from checkpoints import make_checkpoint

    from captioner.engine.providers import Host
    from captioner.models.build import BuildOptions, build_pack

    if not Host.current().qnn_emulated:
        pytest.skip("the emulator's behaviour (a device may load the shared context)")
    root = tmp_path_factory.mktemp("npu-probe")
    ckpt = make_checkpoint(root / "ckpt", d_model=32, layers=1, heads=2, ffn=64, seed=3, alignment_heads=[(0, 1)])
    return build_pack(ckpt, root / "pack", BuildOptions(vocab="fp32", layers="fp32"))


def _counting(monkeypatch) -> list[str]:
    """The tasks of the real children started (``generate``, ``load``)."""
    started: list[str] = []
    real = npu_probe.child_command

    def command(request: Path) -> list[str]:
        started.append(json.loads(request.read_text())["task"])
        return real(request)

    monkeypatch.setattr(npu_probe, "child_command", command)
    return started


def _tokens(runtime, pack) -> list[int]:
    """Greedy tokens of the 2.1 s clip's first two decoder chunks (the 3 s bucket)."""
    from captioner.engine.onnx_model import OnnxAcousticModel

    with wave.open(str(SPEECH)) as w:
        audio = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0
    audio = audio[: len(audio) // 320 * 320]
    model = OnnxAcousticModel(pack, runtime)
    enc = model.encode(audio)
    assert enc.bucket == 3
    run = model.decoder(enc)
    sp = pack.special
    seq = [sp.sot, sp.languages["en"], sp.transcribe, sp.notimestamps]
    for start, size in model.chunk_plan(3, False)[:2]:
        forced = np.array([seq[p] if p < len(seq) else -1 for p in range(start + 1, start + size)], np.int64)
        out = run.run(start, size, seq[start], forced)
        seq += [int(t) for t in out.tokens[len(seq) - start - 1:]]
    return seq


@pytest.mark.qnn
def test_the_emulator_crashes_the_trial_load_in_the_child_and_the_runtime_runs_one_context_per_graph(
        npu_pack, tmp_path, monkeypatch, caplog) -> None:
    from captioner.engine.runtime import Runtime

    started = _counting(monkeypatch)
    rt = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,), shared_context=True)
    units = rt.npu_units()
    shared_dir = rt._context_dir(rt._current)
    progress: list[tuple[int, int]] = []
    with caplog.at_level(logging.INFO, logger="captioner.engine.runtime"):
        rt.prepare(progress=lambda done, total: progress.append((done, total)))
    assert started == ["generate", "load"]  # the shared set made and trial-loaded in children; this process goes on
    (line,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "shared NPU context" in line.getMessage() and "the trial load crashed (SIGSEGV)" in line.getMessage()
    verdict = npu_probe.read_verdict(shared_dir / "probe.json", rt._context_key(rt._current) | {"shared": [3]})
    assert verdict is not None and verdict.loads is False and verdict.reason.startswith("the trial load crashed")
    assert [p.name for p in shared_dir.iterdir()] == ["probe.json"]  # the contexts that cannot load are gone
    # the shared pass, then the per-graph pass, each counted as the user sees it
    n = len(units)
    assert progress == [(i, n) for i in range(1, n + 1)] * 2
    assert rt.shared_context is False
    per_graph = rt._context_dir(rt._current)
    assert per_graph != shared_dir and len(list(per_graph.glob("*_ctx.onnx"))) == n == len(list(per_graph.glob("*.bin")))
    cpu = Runtime(npu_pack, "cpu")
    assert _tokens(rt, npu_pack) == _tokens(cpu, npu_pack)
    info = rt.info()
    assert info.chosen == "QNN-HTP" and info.fallbacks == ()
    assert all(set(p) == {"QNNExecutionProvider"} for p in info.placement.values())
    assert not [r for r in caplog.records if "while captioning" in r.getMessage()]
    rt.close()
    cpu.close()

    # a second start: the verdict is cached, no child, nothing compiled
    caplog.clear()
    again = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,), shared_context=True)
    progress.clear()
    with caplog.at_level(logging.WARNING, logger="captioner.engine.runtime"):
        again.prepare(progress=lambda done, total: progress.append((done, total)))
    assert started == ["generate", "load"] and progress == [] and again.shared_context is False
    assert not caplog.records  # the one clear line was for the first start
    assert again.info().chosen == "QNN-HTP"
    again.close()


@pytest.mark.qnn
def test_the_real_child_loads_and_runs_contexts_that_can_load(npu_pack, tmp_path) -> None:
    """The success path of the real child, on what the emulator can load (one context per graph):
    its encoder outputs are the CPU's within the tolerance."""
    from captioner.engine.runtime import Runtime

    rt = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,), shared_context=False)
    rt.prepare()
    folder = rt._context_dir(rt._current)
    ctxs = [rt._context_path(g, rt._current, f) for g, f in rt.npu_units()]
    feeds = {"mel": np.random.default_rng(0).standard_normal((1, npu_pack.dims.n_mels, 300)).astype(np.float32),
             "n_frames": np.array([150], np.int64)}
    outputs, why, seconds = npu_probe.trial_load(folder / "probe", ctxs, ctxs[0], feeds, rt._current.options)
    assert why == "" and outputs is not None and set(outputs) == {"cross_k", "cross_v"}
    cpu = Runtime(npu_pack, "cpu")
    reference = dict(zip(["cross_k", "cross_v"], cpu.run(npu_pack.encoder_file(3), ["cross_k", "cross_v"], feeds),
                         strict=True))
    error, why = npu_probe.compare(outputs, reference)
    print(f"child: loaded {len(ctxs)} contexts and ran the encoder in {seconds:.1f} s; max error {error:.2e}")
    assert why == "" and error < npu_probe.TOLERANCE
    rt.close()
    cpu.close()


_CPU_CHILD = """
import json, sys
import numpy as np
from captioner.engine.runtime import Runtime
from captioner.models.pack import Pack
req = json.load(open(sys.argv[1]))
pack = Pack.load({root!r})
with np.load(req["inputs"]) as npz:
    feeds = {{k: npz[k] for k in npz.files}}
names = ["cross_k", "cross_v"]
outs = Runtime(pack, "cpu").run(pack.encoder_file(3), names, feeds)
np.savez(req["outputs"], **dict(zip(names, outs)))
open(req["result"], "w").write(json.dumps({{"ok": True}}))
"""


class _LoadedContext:
    """What the runtime gets in place of a session of a shared ``*_ctx.onnx`` (the emulator would crash)."""

    def get_provider_graph_assignment_info(self):
        return [SimpleNamespace(ep_name="QNNExecutionProvider", get_nodes=lambda: [0])]


@pytest.mark.qnn
def test_where_the_child_loads_it_the_runtime_uses_the_shared_context_and_probes_once(
        npu_pack, tmp_path, monkeypatch, caplog) -> None:
    """A child that loads the set and gives the CPU's outputs (here: a fake that computes them on
    the CPU): the runtime opens every graph from the one shared binary; later starts do not probe
    again, unless the verdict is corrupt or stale; a load that fails in the app after all is recorded."""
    from captioner.engine.runtime import Runtime

    started = _fake_child(monkeypatch, _CPU_CHILD.format(root=str(npu_pack.root)))
    opened: list[Path] = []
    real_session = Runtime._session
    in_app_load_fails = False

    def session(self, path, so, cand, inits):
        if path.name.endswith("_ctx.onnx") and path.parent.name != "src":
            opened.append(path)
            if in_app_load_fails and (path.parent / "probe.json").exists():
                raise RuntimeError("QNN_COMMON_ERROR_NOT_SUPPORTED")
            if (path.parent / "probe.json").exists():  # the shared set: the emulator cannot load it here
                return _LoadedContext()
        return real_session(self, path, so, cand, inits)

    monkeypatch.setattr(Runtime, "_session", session)

    def start() -> tuple[Runtime, list[tuple[int, int]]]:
        rt = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,), shared_context=True)
        progress: list[tuple[int, int]] = []
        opened.clear()
        rt.prepare(progress=lambda done, total: progress.append((done, total)))
        return rt, progress

    rt, progress = start()
    units = rt.npu_units()
    folder = rt._context_dir(rt._current)
    verdict_path = folder / "probe.json"
    assert len(started) == 1 and rt.shared_context is True
    verdict = json.loads(verdict_path.read_text())["verdict"]
    assert verdict["loads"] is True and verdict["reason"] == "" and verdict["max_error"] < 1e-4
    assert progress == [(i, len(units)) for i in range(1, len(units) + 1)]
    # every graph opened (the set is loaded whole), each from the shared folder, all pointing to one .bin
    assert sorted(opened) == sorted(rt._context_path(g, rt._current, f) for g, f in units)
    assert len(list(folder.glob("*.bin"))) == 1
    assert [d for d in (tmp_path / "ep-context").iterdir() if d.is_dir()] == [folder]  # no per-graph contexts
    assert (tmp_path / "ep-context" / f"{folder.name}.lock").is_file()  # generated under the compile lock
    assert rt.info().chosen == "QNN-HTP"
    rt.close()

    rt, progress = start()  # the verdict is cached: no child, nothing compiled
    assert len(started) == 1 and progress == [] and rt.shared_context is True and len(opened) == len(units)
    rt.close()

    data = json.loads(verdict_path.read_text())
    for damaged in ("{", json.dumps({**data, "key": {**data["key"], "plugin": "2.6.0"}})):  # corrupt, stale
        verdict_path.write_text(damaged)
        rt, progress = start()
        assert progress == [] and rt.shared_context is True  # probed again; the contexts were complete
        again = json.loads(verdict_path.read_text())
        assert again["key"] == data["key"] and again["verdict"]["loads"] is True  # written anew
        rt.close()
    assert len(started) == 3

    in_app_load_fails = True  # loaded in the child, not in the app (never seen; if it happens, once)
    with caplog.at_level(logging.WARNING, logger="captioner.engine.runtime"):
        rt, progress = start()
    assert rt.shared_context is False and rt.info().chosen == "QNN-HTP" and rt.info().fallbacks == ()
    assert any("did not load in the app" in r.getMessage() for r in caplog.records)
    assert json.loads(verdict_path.read_text())["verdict"]["loads"] is False
    rt.close()
    rt, progress = start()  # the next start goes straight to one context per graph, from the cache
    assert len(started) == 3 and progress == [] and rt.shared_context is False
    rt.close()


@pytest.mark.qnn
def test_two_engines_starting_at_once_trial_load_the_shared_context_once(npu_pack, tmp_path, monkeypatch) -> None:
    """Two engines preparing one pack at once (the app and the command line on a first start, or an
    engine left preparing at a stop and the next session's): the set is generated once and
    trial-loaded once, by whichever holds the cache folder's lock first, and the other takes its
    verdict. Two trial loads side by side shared the folder's one probe folder, which each deletes
    when done, so the later could lose its files and record that the context does not load."""
    import threading

    from captioner.engine.runtime import Runtime

    started = _fake_child(monkeypatch, "import time; time.sleep(1.0)" + _CPU_CHILD.format(root=str(npu_pack.root)))
    real_session = Runtime._session

    def session(self, path, so, cand, inits):
        if path.name.endswith("_ctx.onnx") and path.parent.name != "src" and (path.parent / "probe.json").exists():
            return _LoadedContext()  # the shared set: the emulator cannot load it here
        return real_session(self, path, so, cand, inits)

    monkeypatch.setattr(Runtime, "_session", session)
    engines = [Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,), shared_context=True) for _ in range(2)]
    failures: list[BaseException] = []

    def prepare(rt) -> None:
        try:
            rt.prepare()
        except BaseException as exc:  # reported below, not lost in the thread
            failures.append(exc)

    threads = [threading.Thread(target=prepare, args=(rt,)) for rt in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not failures and not any(t.is_alive() for t in threads)
    assert len(started) == 1  # one trial load; the other engine read its verdict
    assert all(rt.shared_context for rt in engines)
    folder = engines[0]._context_dir(engines[0]._current)
    assert json.loads((folder / "probe.json").read_text())["verdict"]["loads"] is True
    for rt in engines:
        rt.close()


@pytest.mark.qnn
def test_a_crash_while_generating_the_shared_context_is_contained_too(npu_pack, tmp_path, monkeypatch, caplog) -> None:
    """The shared set is generated in a child as well (its memory peak ends with it): a crash there
    is a failed verdict, and no trial load is started."""
    from captioner.engine.runtime import Runtime

    loads: list[str] = []

    def command(request: Path) -> list[str]:
        loads.append(json.loads(request.read_text())["task"])
        return [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]

    monkeypatch.setattr(npu_probe, "child_command", command)
    rt = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,), shared_context=True)
    shared_dir = rt._context_dir(rt._current)
    with caplog.at_level(logging.WARNING, logger="captioner.engine.runtime"):
        rt.prepare()
    assert loads == ["generate"] and rt.shared_context is False
    assert [r.getMessage() for r in caplog.records if "shared NPU context" in r.getMessage()] == [
        f"the shared NPU context of {npu_pack.root.name} does not load here (generating it crashed (SIGSEGV)); "
        "using one context per graph"]
    assert [p.name for p in shared_dir.iterdir()] == ["probe.json"]
    assert rt.info().chosen == "QNN-HTP" and rt._set_complete(rt._current, rt._context_dir(rt._current))
    rt.close()
