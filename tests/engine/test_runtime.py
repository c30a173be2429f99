"""Execution-provider selection, lazy sessions, shared weights and EP-context caches."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from captioner.engine import int8_kernel, providers
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.providers import Attempt, Candidate, Host, plan_candidates
from captioner.engine.runtime import Runtime, default_threads
from captioner.errors import ProviderError

LINUX = Host("linux", "x86_64")
WIN_ARM = Host("win32", "arm64")
WIN_X64 = Host("win32", "x86_64")
CPU_ONLY = ["CPUExecutionProvider"]


def _probe(devices=("qnn-device",), available=CPU_ONLY):
    return lambda: (tuple(devices), "2.7.0", "" if devices else "onnxruntime-qnn is not installed", available)


def _labels(plan):
    return [(p.label, isinstance(p, Candidate)) for p in plan]


def test_auto_on_linux_never_picks_the_htp_emulator() -> None:
    plan = plan_candidates("auto", LINUX, _probe())
    assert _labels(plan) == [("QNN-HTP", False), ("QNN-GPU", False), ("DirectML", False), ("CPU", True)]
    assert "emulator" in plan[0].reason


def test_forced_qnn_on_linux_uses_the_emulator_with_an_emulated_soc() -> None:
    plan = plan_candidates("qnn", LINUX, _probe())
    assert isinstance(plan[0], Candidate) and plan[0].label == "QNN-HTP"
    assert plan[0].strict and plan[0].uses_ep_context
    assert plan[0].options["backend_type"] == "htp" and plan[0].options["htp_arch"] == "73"
    assert isinstance(plan[-1], Candidate) and plan[-1].label == "CPU"


def test_snapdragon_order_npu_then_gpu_then_cpu() -> None:
    plan = plan_candidates("auto", WIN_ARM, _probe())
    assert _labels(plan) == [("QNN-HTP", True), ("QNN-GPU", True), ("DirectML", False), ("CPU", True)]
    assert "soc_model" not in plan[0].options  # real devices detect their SoC
    assert plan[1].options == {"backend_type": "gpu"}


def test_windows_x64_uses_directml() -> None:
    plan = plan_candidates("auto", WIN_X64, _probe(devices=(), available=["DmlExecutionProvider", *CPU_ONLY]))
    assert _labels(plan) == [("QNN-HTP", False), ("QNN-GPU", False), ("DirectML", True), ("CPU", True)]
    assert plan[0].reason == "onnxruntime-qnn is not installed"


def test_forced_cpu_and_gpu() -> None:
    assert _labels(plan_candidates("cpu", WIN_ARM, _probe())) == [("CPU", True)]
    plan = plan_candidates("gpu", LINUX, _probe())
    assert _labels(plan) == [("QNN-GPU", False), ("DirectML", False), ("CPU", True)]


def test_unknown_provider_is_a_clear_error(tiny_pack) -> None:
    with pytest.raises(ProviderError, match="auto, qnn, gpu, cpu"):
        Runtime(tiny_pack, "npu")


def test_forced_unavailable_provider_falls_back_with_reasons(tiny_pack) -> None:
    rt = Runtime(tiny_pack, "gpu")
    info = rt.info()
    assert info.chosen == "CPU" and info.requested == "gpu"
    assert [a.label for a in info.fallbacks] == ["QNN-GPU", "DirectML"]
    assert all(a.reason for a in info.fallbacks)
    assert "requested gpu" in info.summary() and "QNN-GPU:" in info.summary()


def test_threads_are_bounded() -> None:
    assert 1 <= default_threads() <= 4


def test_sessions_are_lazy_and_share_one_ortvalue_per_weight(tiny_pack, tmp_path) -> None:
    rt = Runtime(tiny_pack, "cpu", cache_dir=tmp_path)
    model = OnnxAcousticModel(tiny_pack, rt)
    assert rt.loaded() == []
    model.encode(np.zeros(48000, np.float32))
    assert rt.loaded() == [tiny_pack.encoder_file(3)]
    model.preload(3)
    loaded = {p.name for p in rt.loaded()}
    assert not any("30s" in name for name in loaded)  # the 30 s bucket stays unloaded
    files = {tiny_pack.decoder_file(3, *chunk).name for chunk in tiny_pack.decoder_chunks(3)}
    verifier = tiny_pack.verifier(3)[0].name  # the revising live rounds' draft checks
    assert len(files) == 4 and loaded == {"encoder_3s.onnx", *files, verifier}  # 8 chunks, 4 graphs
    info = rt.info()
    assert set(info.placement) == loaded
    assert all(set(p) == {"CPUExecutionProvider"} for p in info.placement.values())
    assert all(ms > 0 for ms in info.session_ms.values())
    # one OrtValue per distinct weight, however many graphs use it
    values = rt.weights._values
    embed = next(n for n in values if "embed_tokens" in n)
    first = values[embed][1]
    rt.session(tiny_pack.decoder_file(3, 10, 5))
    assert values[embed][1] is first
    model.close()
    assert rt.loaded() == []


def test_prepare_opens_every_cpu_session_before_any_round(tiny_pack, tmp_path) -> None:
    """On the CPU, ``prepare()`` opens the session of every graph of every bucket now (the CLI paced as
    a live source before its first round, the app on a thread), so no round waits for one
    (whisper-base: 200-520 ms per decoder chunk graph); rounds after it open none. With
    ``open_sessions=False`` it opens none: the rounds do."""
    rt = Runtime(tiny_pack, "cpu", cache_dir=tmp_path)
    assert not rt.compile_pending()  # seconds of opening: the app opens the capture first and catches up
    model = OnnxAcousticModel(tiny_pack, rt)
    rt.prepare(open_sessions=False)  # a file transcribed as fast as it can be: rounds open what they use
    assert rt.loaded() == []
    rt.prepare(progress=lambda done, total: pytest.fail("nothing is compiled on the CPU"))
    expected = {graph for graph, _frames in rt.npu_units()}
    assert set(rt.loaded()) == expected and len(rt.loaded()) == len(expected)
    assert {tiny_pack.encoder_file(b) for b in tiny_pack.buckets} <= expected
    assert any("s220" in graph.name for graph in expected) and any(g.name.endswith("_v.onnx") for g in expected)
    opened = list(rt._sessions.values())
    sp = tiny_pack.special
    prompt = [sp.sot, sp.languages["en"], sp.transcribe, sp.notimestamps]
    for native in (False, True):  # a live round's 3 s bucket, a closing round's 30 s window
        enc = model.encode(np.zeros(16000 * 2, np.float32), native_30s=native)
        start, size = model.chunk_plan(enc.bucket, False)[0]
        model.decoder(enc).run(start, size, prompt[0], np.array(prompt[1:size] + [-1] * (size - len(prompt)), np.int64))
    assert list(rt._sessions.values()) == opened  # the same sessions, none opened by a round
    model.close()
    rt.prepare()  # closed: prepares afresh
    assert len(rt.loaded()) == len(expected)
    rt.close()


def test_prepare_stops_when_the_runtime_is_closed_meanwhile(tiny_pack, monkeypatch) -> None:
    """The app prepares on a thread of its own: a runtime closed while it runs (the app quitting, a
    provider failing over) is not filled again with the rest of the sessions."""
    rt = Runtime(tiny_pack, "cpu")
    opened = []
    real = rt.session

    def session(graph, frames=None):
        opened.append(graph)
        sess = real(graph, frames)
        if len(opened) == 2:
            rt.close()
        return sess

    monkeypatch.setattr(rt, "session", session)
    rt.prepare()
    assert len(opened) == 2 and rt.loaded() == []


def test_a_failing_provider_falls_back_to_the_next(tiny_pack, monkeypatch) -> None:
    """A provider whose session creation fails is recorded with the ORT reason; CPU takes over."""
    # ORT refuses this one: the CPU EP added explicitly while CPU fallback is disabled
    broken = Candidate("DirectML", "CPUExecutionProvider", strict=True)
    monkeypatch.setattr("captioner.engine.runtime.plan_candidates",
                        lambda requested: [broken, Candidate("CPU", "CPUExecutionProvider")])
    rt = Runtime(tiny_pack, "auto")
    rt.session(tiny_pack.encoder_file(3))
    info = rt.info()
    assert info.chosen == "CPU"
    assert [a.label for a in info.fallbacks] == ["DirectML"]
    assert "encoder_3s.onnx" in info.fallbacks[0].reason
    assert info.placement["encoder_3s.onnx"] == {"CPUExecutionProvider": info.placement["encoder_3s.onnx"]
                                                  ["CPUExecutionProvider"]}


def test_unreadable_graph_and_unrunnable_graph_errors(tiny_pack, tmp_path) -> None:
    """A graph onnx cannot parse is a ModelError; one that not even the CPU can run a ProviderError."""
    import onnx
    from onnx import TensorProto, helper

    from captioner.errors import ModelError

    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a graph")
    rt = Runtime(tiny_pack, "cpu")
    with pytest.raises(ModelError, match=r"broken\.onnx is not a readable ONNX graph"):
        rt.session(bad)
    graph = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"], domain="example.nowhere")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("example.nowhere", 1)])
    onnx.save(model, tmp_path / "alien.onnx")
    with pytest.raises(ProviderError, match=r"CPU cannot run alien\.onnx"):
        rt.session(tmp_path / "alien.onnx")


_RSS_SCRIPT = textwrap.dedent("""
    import json, sys, numpy as np, psutil
    from captioner.models.pack import Pack
    from captioner.engine.runtime import Runtime
    from captioner.engine.onnx_model import OnnxAcousticModel
    proc = psutil.Process()
    pack = Pack.load(sys.argv[1])
    rss0 = proc.memory_info().rss
    model = OnnxAcousticModel(pack, Runtime(pack, "cpu"))
    model.preload(3)
    enc = model.encode(np.zeros(48000, np.float32))
    run = model.decoder(enc)
    sp = pack.special
    seq = [sp.sot, sp.languages["en"], sp.transcribe, sp.notimestamps]
    for start, size in model.chunk_plan(3, False):
        forced = np.array([seq[q] if q < len(seq) else -1 for q in range(start + 1, start + size)], np.int64)
        out = run.run(start, size, seq[start], forced)
        seq += [int(t) for t in out.tokens[len(seq) - 1 - start:]]
    rss1 = proc.memory_info().rss
    print(json.dumps({"rss_mb": (rss1 - rss0) / 1e6, "weights_mb": model.runtime.weights.nbytes / 1e6,
                      "sessions": len(model.runtime.loaded()), "onnx_imported": "onnx" in sys.modules,
                      "session_ms": dict(model.runtime.info().session_ms)}))
""")


@pytest.fixture(scope="module")
def wide_pack(tmp_path_factory) -> Path:
    """A pack whose weights are large enough to count copies: d_model 384 (an 80 MB vocabulary
    embedding), one layer, the 3 s bucket only."""
    from checkpoints import make_checkpoint

    from captioner.models.build import BuildOptions, build_pack

    root = tmp_path_factory.mktemp("wide")
    ckpt = make_checkpoint(root / "ckpt", d_model=384, layers=1, heads=6, ffn=768)
    build_pack(ckpt, root / "pack", BuildOptions(buckets=(3,)))
    return root / "pack"


@pytest.mark.slow
def test_a_loaded_pack_holds_one_copy_of_the_weights(wide_pack) -> None:
    """All six graphs of a bucket loaded and run: RSS grows by about one weight file, not six.

    Measured in a fresh interpreter from just before the first session to after a full round."""
    out = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(wide_pack)], capture_output=True, text=True,
                         timeout=300, check=True)
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    print("memory:", stats)
    assert stats["sessions"] == 6
    assert stats["onnx_imported"] is False  # the manifest lists each graph's weights (11 MB saved)
    assert stats["weights_mb"] > 70
    # one copy plus ORT's own overhead; a copy per session would be ~6 × the 80 MB embedding
    assert stats["rss_mb"] < 2 * stats["weights_mb"], stats


@pytest.mark.qnn
def test_qnn_emulator_runs_the_pack_and_caches_contexts(tiny_fp32_pack, tmp_path) -> None:
    """Forced QNN on the HTP emulator: every node on QNN, EP contexts cached, same tokens as CPU."""
    pytest.importorskip("onnxruntime_qnn")
    if not Host.current().qnn_emulated and not Host.current().snapdragon_windows:
        pytest.skip("no QNN HTP backend on this platform")
    rt = Runtime(tiny_fp32_pack, "qnn", cache_dir=tmp_path)
    assert rt.provider == "QNN-HTP"
    qnn = OnnxAcousticModel(tiny_fp32_pack, rt)
    cpu = OnnxAcousticModel(tiny_fp32_pack, Runtime(tiny_fp32_pack, "cpu"))
    audio = (0.1 * np.random.default_rng(0).standard_normal(48000)).astype(np.float32)
    sp = tiny_fp32_pack.special
    prompt = [sp.sot, sp.languages["en"], sp.transcribe, sp.notimestamps]
    results = []
    for model in (qnn, cpu):
        enc = model.encode(audio)
        run = model.decoder(enc)
        seq = list(prompt)
        for start, size in model.chunk_plan(3, False)[:2]:
            forced = np.array([seq[p] if p < len(seq) else -1 for p in range(start + 1, start + size)], np.int64)
            out = run.run(start, size, seq[start], forced)
            seq += [int(t) for t in out.tokens[len(seq) - start - 1:]]
        results.append(seq)
    assert results[0] == results[1]
    info = rt.info()
    assert info.chosen == "QNN-HTP" and info.fallbacks == ()
    assert all(set(p) == {"QNNExecutionProvider"} for p in info.placement.values())
    contexts = list(tmp_path.glob("ep-context/*/*_ctx.onnx"))
    assert {c.name for c in contexts} == {"encoder_3s_ctx.onnx", "decoder_s25_k4_j4_f300_ctx.onnx",
                                          "decoder_s25_k6_f300_ctx.onnx"}  # the 3-6 s buckets' frames fixed
    compiled_ms = info.session_ms["encoder_3s.onnx"]
    qnn.close()
    again = Runtime(tiny_fp32_pack, "qnn", cache_dir=tmp_path)
    again.session(tiny_fp32_pack.encoder_file(3))
    print("QNN encoder session: compiled {:.0f} ms, from cache {:.0f} ms".format(compiled_ms, again.info().session_ms["encoder_3s.onnx"]))
    assert again.info().placement["encoder_3s.onnx"] == {"QNNExecutionProvider": 1}  # one EPContext node
    again.close()
    # a damaged cache entry (context binary gone) is recompiled, not a fallback to CPU
    for binary in tmp_path.glob("ep-context/*/encoder_3s_ctx*.bin"):
        binary.unlink()
    healed = Runtime(tiny_fp32_pack, "qnn", cache_dir=tmp_path)
    healed.session(tiny_fp32_pack.encoder_file(3))
    assert healed.info().chosen == "QNN-HTP" and healed.info().fallbacks == ()
    assert list(tmp_path.glob("ep-context/*/encoder_3s_ctx*.bin"))
    healed.close()
    cpu.close()


def test_buckets_share_the_npus_decoder_graphs_and_the_padding_changes_no_output(tiny_fp32_pack) -> None:
    """A static-shape provider runs the chunk graphs of buckets up to twice as short at the longest
    one's frame count (fewer graphs to compile for the NPU); the runner pads the cross-attention K/V
    with masked frames, which changes nothing: the same tokens and logits as the bucket's own frames."""
    pack = tiny_fp32_pack
    rt = Runtime(pack, "cpu")
    assert {b: rt.static_decoder_frames(b) for b in pack.buckets} == {
        3: 300, 4: 300, 5: 300, 6: 300, 10: 500, 20: 1500, 30: 1500}
    assert [rt.decoder_frames(b) for b in pack.buckets] == [50 * b for b in pack.buckets]  # the CPU: its own
    per_bucket = {(pack.encoder_file(b), None) for b in pack.buckets} | {
        (pack.decoder_file(b, s, k), 50 * b) for b in pack.buckets for s, k in pack.decoder_chunks(b)} | {
        (pack.verifier(b)[0], 50 * b) for b in pack.buckets if pack.verifier(b)} | {
        (pack.beam(b)[0], 50 * b) for b in pack.buckets if pack.beam(b)}
    units = rt.npu_units()
    assert {f for _, f in units} == {None, 300, 500, 1500}
    print(f"NPU graphs: {len(units)} with shared frame counts, {len(per_bucket)} with one per bucket")
    assert len(units) == 22 and len(per_bucket) == 42
    assert Runtime(pack, "cpu", npu_buckets=(3, 10)).static_decoder_frames(4) == 50 * 4  # no prepared bucket serves it

    model = OnnxAcousticModel(pack, rt)
    audio = (0.1 * np.random.default_rng(1).standard_normal(16000 * 4)).astype(np.float32)
    enc = model.encode(audio)
    assert enc.bucket == 4 and enc.total_frames == 200
    sp = pack.special
    prompt = [sp.sot, sp.languages["en"], sp.transcribe, sp.notimestamps]
    outputs = []
    for frames in (200, 300):
        rt.decoder_frames = lambda bucket, frames=frames: frames  # type: ignore[method-assign]
        run = model.decoder(enc)
        seq, outs = list(prompt), []
        for start, size in model.chunk_plan(enc.bucket, False)[:3]:
            forced = np.array([seq[p] if p < len(seq) else -1 for p in range(start + 1, start + size)], np.int64)
            out = run.run(start, size, seq[start], forced)
            seq += [int(t) for t in out.tokens[len(seq) - start - 1:]]
            outs.append(out)
        outputs.append((seq, outs))
    (seq_own, own), (seq_padded, padded) = outputs
    assert seq_own == seq_padded
    for a, b in zip(own, padded, strict=True):
        assert a.attn_last.shape == b.attn_last.shape  # the real frames only
        for name in ("token_logit", "eot_logit", "logsumexp", "attn_last", "attn_align"):
            np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-5, atol=1e-5)
    model.close()


@pytest.mark.qnn
def test_a_broken_qnn_backend_falls_back_to_cpu_with_the_reason(tiny_fp32_pack, monkeypatch) -> None:
    """A real QNN failure (the wheel has no QNN CPU backend library) is caught, recorded, and CPU runs
    (an fp32 pack: an int8 one is not even tried, see the next test)."""
    tiny_pack = tiny_fp32_pack
    devices, version, reason = providers.qnn_devices()
    if not devices:
        pytest.skip(reason)
    broken = Candidate("QNN-HTP", providers.QNN_EP, {"backend_type": "cpu"}, devices, version, strict=True)
    monkeypatch.setattr("captioner.engine.runtime.plan_candidates",
                        lambda requested: [broken, Attempt("QNN-GPU", False, "n/a"),
                                           Candidate("CPU", "CPUExecutionProvider")])
    rt = Runtime(tiny_pack, "qnn")
    rt.session(tiny_pack.encoder_file(3))
    info = rt.info()
    assert info.chosen == "CPU"
    assert [a.label for a in info.fallbacks] == ["QNN-HTP", "QNN-GPU"]
    rt.close()


def test_qnn_with_an_int8_pack_is_one_clear_reason_without_trying(tiny_pack, monkeypatch, caplog) -> None:
    """QNN has no int8 MatMul: a pack with int8 layers or an int8-ranked vocabulary is not tried there
    (no compile, no ONNX Runtime errors); the reason names the pack and the way to an NPU pack, and
    the summary is one line with that reason only."""
    devices = (object(),)
    monkeypatch.setattr("captioner.engine.runtime.plan_candidates", lambda requested: plan_candidates(
        requested, WIN_ARM, lambda: (devices, "2.7.0", "", CPU_ONLY)))
    assert tiny_pack.vocab == "int8" and tiny_pack.layers == "fp32"
    with caplog.at_level("INFO"):
        rt = Runtime(tiny_pack, "qnn")
    info = rt.info()
    assert info.chosen == "CPU" and [(a.label, a.failed) for a in info.fallbacks] == \
        [("QNN-HTP", False), ("QNN-GPU", False), ("DirectML", False)]
    reason = info.fallbacks[0].reason
    assert reason == info.fallbacks[1].reason  # the QNN GPU backend has no int8 MatMul either
    assert f"the pack {tiny_pack.root.name} has int8 vocabulary projection, which QNN cannot run" in reason
    assert "--layers fp32 --vocab fp32" in reason
    assert info.summary() == f"CPU (requested qnn; QNN-HTP: {reason})"
    assert not [r for r in caplog.records if r.levelname == "WARNING"]  # the caller says it, once
    rt.session(tiny_pack.encoder_file(3))
    assert set(rt.info().placement["encoder_3s.onnx"]) == {"CPUExecutionProvider"}
    rt.close()


def test_doctor_reports_providers_packs_and_paths(tiny_pack, tmp_path, capsys) -> None:
    from captioner import cli
    from captioner.storage.paths import AppPaths

    paths = AppPaths.default(tmp_path)
    assert cli.run(["doctor", "--provider", "gpu"], paths) == 1  # no pack installed yet
    out = capsys.readouterr().out
    assert "none usable" in out and "captioner models install" in out
    paths.packs.mkdir(parents=True)
    (paths.packs / "tiny").symlink_to(tiny_pack.root, target_is_directory=True)
    assert cli.run(["doctor", "--provider", "gpu"], paths) == 0
    out = capsys.readouterr().out
    assert "provider 'auto' -> " in out and "provider 'gpu' -> CPU" in out
    assert "QNN-GPU: skipped:" in out and "CPU: chosen" in out
    assert "tiny: OK (80 mel, d_model 64" in out
    assert ("CPU int8 kernel: u8×s8 saturates here" in out) == int8_kernel.u8s8_saturates()
    assert str(paths.cache) in out and "Audio devices:" in out
    assert re.search(r"^  room    [0-9.]+ [GM]B free", out, re.M), out


def test_doctor_says_a_full_disk(small_disk, capsys) -> None:
    """The folders on a real file system with no room left: the last line says the disk is full and
    what cannot be saved (every other line of the report as before)."""
    from captioner import cli
    from captioner.storage.paths import AppPaths

    disk = small_disk.mount("256k")
    paths = AppPaths.default(disk / "home")
    small_disk.fill(disk)
    cli.run(["doctor", "--no-verify"], paths)
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last == "  room    0 KB free: the disk is full; sessions, settings and models cannot be saved", last


@pytest.mark.parametrize(("page", "short", "said"), [
    (65001, None, "code page 65001 (UTF-8)"),
    (1252, "LUKASZ~1", "code page 1252; the NPU's compile cache is used as {alias}"),
    (1252, None, "code page 1252; the NPU's compile cache cannot be used: its path has letters that the QNN plugin "
                 "cannot read under code page 1252"),
])
def test_doctor_on_windows_says_the_code_page_the_npu_plugin_reads_paths_in(tmp_path, capsys, monkeypatch, page,
                                                                           short, said) -> None:
    """Windows' answers played (``GetACP``, ``GetShortPathNameW``; engine/plugin_paths.py): the last line
    says the code page, and under a user folder with letters outside it whether the NPU's compile
    cache can be used, and as what. The installed app runs in UTF-8 (its manifest); the Windows
    workflow checks that line of the installed ``captioner-cli doctor``."""
    from captioner import cli
    from captioner.engine import plugin_paths
    from captioner.storage.paths import AppPaths

    paths = AppPaths.default(tmp_path / "Łukasz")
    alias = tmp_path / (short or "none")
    monkeypatch.setattr(plugin_paths, "ansi_code_page", lambda: page)
    monkeypatch.setattr("captioner.commands.doctor.ansi_code_page", lambda: page)
    monkeypatch.setattr(plugin_paths, "short_path", lambda path: alias if short else None)
    cli.run(["doctor", "--no-verify"], paths)
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("  text    " + said.format(alias=alias)), last


@pytest.mark.qnn
def test_doctor_check_qnn(tmp_path, capsys) -> None:
    from captioner import cli
    from captioner.storage.paths import AppPaths

    pytest.importorskip("onnxruntime_qnn")
    cli.run(["doctor", "--check-qnn", "--no-verify"], AppPaths.default(tmp_path))
    out = capsys.readouterr().out
    assert "QNN check: OK: QNN HTP" in out and "nodes on QNNExecutionProvider" in out


def test_runtime_keeps_numpy_blas_on_one_thread(tiny_pack) -> None:
    """numpy's BLAS threads would spin after the log-mel product and slow the encoder (runtime docstring)."""
    from threadpoolctl import threadpool_info

    Runtime(tiny_pack, "cpu")
    blas = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert blas, "numpy's BLAS is not visible to threadpoolctl"
    assert all(pool["num_threads"] == 1 for pool in blas)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's (elsewhere a no-op)")
def test_release_free_heap_returns_freed_heap_pages_to_the_os() -> None:
    """Free blocks inside the heap stay resident until trimmed (the runtime docstring's 'Heap')."""
    import ctypes

    import psutil

    from captioner.engine.runtime import release_free_heap

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block = 64 * 1024  # below glibc's mmap threshold: served from the heap
    blocks = [libc.malloc(block) for _ in range(1600)]  # 100 MB
    for b in blocks:
        ctypes.memset(b, 1, block)  # make every page resident
    for b in blocks[:-1]:  # the last block stays, so free() cannot simply shrink the heap's top
        libc.free(b)
    process = psutil.Process()
    before = process.memory_info().rss
    assert release_free_heap()
    released = before - process.memory_info().rss
    libc.free(blocks[-1])
    assert released > 50 * 2**20, released


def test_the_compile_lock_waits_on_windows_while_another_process_holds_it(tmp_path, monkeypatch) -> None:
    """Windows' ``msvcrt.locking(LK_LOCK)`` tries ten times a second apart and raises EDEADLOCK while
    another process holds the bytes: the compile lock waits on (a compile takes minutes); any other
    failure is raised, not waited on for ever. A fake ``msvcrt`` with the real module's behaviour."""
    import errno
    import sys
    import types

    from captioner.engine import runtime as runtime_module

    calls: list[tuple[int, int]] = []
    outcomes: list[int | None] = [errno.EDEADLOCK, errno.EDEADLOCK, None, None]

    def locking(fd: int, mode: int, nbytes: int) -> None:
        calls.append((mode, nbytes))
        failure = outcomes.pop(0)
        if failure is not None:
            raise OSError(failure, "Resource deadlock avoided")

    fake = types.SimpleNamespace(LK_LOCK=1, LK_UNLCK=0, locking=locking)
    monkeypatch.setitem(sys.modules, "msvcrt", fake)
    monkeypatch.setattr(sys, "platform", "win32")
    folder = tmp_path / "ep-context" / "key"
    with runtime_module._compiling(folder):
        assert calls == [(1, 1)] * 3  # two refusals waited out, then held
    assert calls[-1] == (0, 1) and folder.is_dir() and (folder.parent / "key.lock").is_file()
    outcomes[:] = [errno.EBADF]
    with pytest.raises(OSError), runtime_module._compiling(folder):
        pass
