"""``captioner doctor``: what this machine offers the engine, and what ``auto`` would choose and why.

Prints the ONNX Runtime build and its providers, the QNN plugin and its devices, the provider plan
for ``auto`` (and for ``--provider`` if given) with the reason for every skipped provider, the
installed packs (verified: sha256 of every file and the graph contracts), the provider the latest
recorded session runs on (the app records a provider that took over mid-session, after a failure),
the audio devices, the application's directories and the room left on their disks (a full disk said as
such: sessions, settings and models cannot be saved there). ``--check-qnn`` also compiles a small graph on the QNN HTP backend with CPU
fallback disabled (on Linux x86-64 that is the HTP emulator) and runs it against numpy.
Exit code 0 when the engine can run (a pack is installed and sound), 1 otherwise.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np
import onnxruntime as ort

from captioner import __version__
from captioner.commands import described
from captioner.commands.models import disk_mb
from captioner.core import PROVIDERS, Provider
from captioner.engine import int8_kernel
from captioner.engine.plugin_paths import UTF8_CODE_PAGE, ansi_code_page, plugin_folder
from captioner.engine.providers import QNN_EP, Attempt, Candidate, Host, plan_candidates, qnn_devices
from captioner.models.install import DEFAULT_MODEL, list_packs
from captioner.models.verify import pack_problems
from captioner.storage.disk import FULL_BYTES, free_bytes
from captioner.storage.paths import AppPaths

__all__ = ["check_qnn", "register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``doctor`` subcommand."""
    p = subparsers.add_parser("doctor", help="check providers, model packs, audio devices and paths",
                              description=described(__doc__))
    p.add_argument("--provider", choices=PROVIDERS, help="also show the plan for this provider setting")
    p.add_argument("--check-qnn", action="store_true", help="compile and run a test graph on the QNN HTP backend")
    p.add_argument("--no-verify", action="store_true", help="skip the sha256 check of the installed packs")
    p.set_defaults(func=_run)


def _print_plan(requested: Provider) -> None:
    plan = plan_candidates(requested)
    chosen = next(p for p in plan if isinstance(p, Candidate))
    print(f"  provider {requested!r} -> {chosen.label}")
    for item in plan:
        if isinstance(item, Attempt):
            print(f"    - {item.label}: skipped: {item.reason}")
        else:
            extra = f" {dict(item.options)}" if item.options else ""
            state = "chosen" if item is chosen else "fallback if it fails"
            print(f"    - {item.label}: {state} ({item.ep_name}{extra})")


def check_qnn() -> tuple[bool, str]:
    """Compile a MatMul+Relu graph on QNN HTP (no CPU fallback) and compare with numpy.

    Returns:
        (ok, one-line message).
    """
    from onnx import TensorProto, helper, numpy_helper

    devices, _version, reason = qnn_devices()
    if not devices:
        return False, reason
    plan = plan_candidates("qnn")
    cand = plan[0]
    if not isinstance(cand, Candidate) or cand.ep_name != QNN_EP:
        return False, getattr(cand, "reason", "QNN HTP is not available")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])], "check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 64])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    cand.configure(so)
    t0 = time.perf_counter()
    try:
        sess = ort.InferenceSession(model.SerializeToString(), sess_options=so)
        x = rng.standard_normal((1, 64)).astype(np.float32)
        z = sess.run(None, {"x": x})[0]
    except Exception as exc:  # ORT's own error types
        return False, f"QNN HTP failed: {str(exc).strip().splitlines()[0][:200]}"
    ms = (time.perf_counter() - t0) * 1000
    eps = sorted({s.ep_name for s in sess.get_provider_graph_assignment_info()})
    err = float(np.abs(z - np.maximum(x @ w, 0)).max())
    kind = "HTP emulator" if Host.current().qnn_emulated else "HTP"
    ok = eps == [QNN_EP] and err < 0.05
    return ok, f"QNN {kind}: nodes on {', '.join(eps)}, max error {err:.2e} (fp16 on HTP), {ms:.0f} ms"


def _print_last_session(paths: AppPaths) -> None:
    """The provider the latest recorded session ran on (or runs on, while the app captions)."""
    from captioner.errors import CaptionerError
    from captioner.transcript.store import SessionStore

    if not paths.sessions_db.is_file():
        return
    try:
        with SessionStore.open(paths.sessions_db) as store:
            last = store.list_sessions(limit=1)
    except CaptionerError as exc:
        print(f"Last session: cannot read the session store: {exc}")
        return
    if last:
        s = last[0]
        state = "running or interrupted" if s.ended_at is None else f"ended {s.ended_at}"
        print(f"Last session: #{s.id} started {s.started_at} ({state}): {s.model or '?'} on "
              f"{s.provider or '?'}, {s.word_count} words")


def _run(args: argparse.Namespace, paths: AppPaths) -> int:
    host = Host.current()
    print(f"captioner {__version__} on Python {platform.python_version()}, {sys.platform} {host.machine}")
    print(f"onnxruntime {ort.__version__}: providers {', '.join(ort.get_available_providers())}")
    devices, version, reason = qnn_devices()
    if devices:
        kinds = ", ".join(str(d.device.type).rsplit(".", 1)[-1] for d in devices)
        print(f"onnxruntime-qnn {version}: {len(devices)} device(s) ({kinds})"
              + (" - the x86-64 HTP emulator" if host.qnn_emulated else ""))
    else:
        print(f"onnxruntime-qnn: {reason}")
    if int8_kernel.u8s8_saturates():
        print("CPU int8 kernel: u8×s8 saturates here (x86-64 without VNNI): int8 weights are fitted to it as they load")
    else:
        print("CPU int8 kernel: u8×s8 exact")
    print("Execution providers:")
    _print_plan("auto")
    if args.provider and args.provider != "auto":
        _print_plan(args.provider)
    if args.check_qnn:
        ok, message = check_qnn()
        print(f"  QNN check: {'OK' if ok else 'FAILED'}: {message}")

    print(f"Model packs ({paths.packs}):")
    sound = 0
    for item in list_packs(paths):
        p = item.pack
        problems = [str(item.error)] if p is None else pack_problems(item.path, checksums=not args.no_verify)
        if p is None or problems:
            print(f"  {item.name}: BROKEN: {problems[0]}" + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""))
            continue
        sound += 1
        print(f"  {item.name}: OK ({p.dims.n_mels} mel, d_model {p.dims.d_model}, "
              f"{'multilingual' if p.multilingual else 'English-only'}, {p.description}, "
              f"{disk_mb(item.path):.0f} MB on disk)")
        if any(p.verifier(b) is None for b in p.buckets):
            print(f"    built before every bucket had a verifier: live rounds at steps under 2 s take ~10 % more CPU; "
                  f"to get it, reinstall the pack (captioner models remove {item.name}, then models install)")
    if sound == 0:
        print(f"  none usable; install one: captioner models install {DEFAULT_MODEL}")

    _print_last_session(paths)

    print("Audio devices:")
    try:
        from captioner.audio import list_devices

        report = list_devices()
        for d in report.inputs:
            print(f"  mic{'*' if d.is_default else ' '} {d.name} [{d.host_api}, {d.channels} ch, {d.rate} Hz]")
        for d in report.system:
            print(f"  sys{'*' if d.is_default else ' '} {d.name} [{d.host_api}]")
        if not report.inputs and not report.system:
            print("  none found")
        for note in report.notes:
            print(f"  note: {note}")
    except Exception as exc:  # a broken audio stack must not stop the rest of the report
        print(f"  cannot list devices: {exc}")

    print("Paths:")
    for name in ("config", "data", "cache", "logs"):
        print(f"  {name:7s} {getattr(paths, name)}")
    print(f"  packs   {paths.packs}")
    print(f"  room    {_room(paths)}")
    page = ansi_code_page()
    if page is not None:  # Windows: the code page the QNN plugin reads paths in (engine/plugin_paths.py)
        print(f"  text    {_code_page_line(page, paths)}")
    return 0 if sound else 1


def _code_page_line(page: int, paths: AppPaths) -> str:
    """``code page 65001 (UTF-8)``, or which folder the QNN plugin cannot use under another one."""
    if page == UTF8_CODE_PAGE:
        return f"code page {page} (UTF-8)"
    folder, why = plugin_folder(paths.cache)  # the one rule of what the plugin can read
    if folder is None:
        return f"code page {page}; the NPU's compile cache cannot be used: {why}"
    return f"code page {page}" + (f"; the NPU's compile cache is used as {folder}" if folder != paths.cache else "")


def _room(paths: AppPaths) -> str:
    """The free space where sessions, models and settings are kept, the fullest of their disks:
    ``12.3 GB free``, with what a full or nearly full disk stops."""
    free = [f for f in (free_bytes(paths.data), free_bytes(paths.cache), free_bytes(paths.config)) if f is not None]
    if not free:
        return "unknown"
    least = min(free)
    said = f"{least / 1e9:.1f} GB free" if least >= 1e9 else f"{least // 2**20} MB free"
    if least < FULL_BYTES:
        return f"{least // 1024} KB free: the disk is full; sessions, settings and models cannot be saved"
    if least < 2**30:
        return f"{said}: little room; installing a model needs up to 1 GB"
    return said
