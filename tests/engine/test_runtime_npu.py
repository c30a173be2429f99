"""NPU contexts compiled ahead of time (issue 24): :meth:`Runtime.prepare` compiles every graph the
pack's rounds can need on QNN HTP (the x86-64 emulator here) before the first round, with progress,
caches them per pack + plugin version, and a warm start compiles nothing. The shared layout (one
session group, one ``.bin`` with HTP weight sharing) is generated here too; QNN's x86-64 backend cannot
load it (the trial load in a child process crashes: tests/engine/test_runtime_npu_probe.py), so the
runtime goes on with one context per graph.

A 1-layer, d_model 32 random pack keeps the emulator's compiles under a second per graph.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from checkpoints import make_checkpoint

from captioner.commands._engine import npu_when
from captioner.engine.providers import Host
from captioner.engine.runtime import Runtime
from captioner.models.build import BuildOptions, build_pack

pytest.importorskip("onnxruntime_qnn")
pytestmark = [pytest.mark.qnn]


@pytest.fixture(scope="module")
def npu_pack(tmp_path_factory):
    if not Host.current().qnn_emulated and not Host.current().snapdragon_windows:
        pytest.skip("no QNN HTP backend on this platform")
    root = tmp_path_factory.mktemp("npu")
    ckpt = make_checkpoint(root / "ckpt", d_model=32, layers=1, heads=2, ffn=64, seed=3, alignment_heads=[(0, 1)])
    return build_pack(ckpt, root / "pack", BuildOptions(vocab="fp32", layers="fp32"))


def _encode(rt: Runtime, pack) -> list[np.ndarray]:
    mel = np.random.default_rng(5).standard_normal((1, pack.dims.n_mels, 300)).astype(np.float32)
    return rt.run(pack.encoder_file(3), ["cross_k", "cross_v"], {"mel": mel, "n_frames": np.array([100], np.int64)})


def test_prepare_compiles_every_npu_graph_ahead_and_a_warm_start_compiles_none(npu_pack, tmp_path, caplog) -> None:
    rt = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3, 10))
    units = rt.npu_units()
    # each bucket: its encoder, its chunk graphs and its cache's verifier with its frames fixed
    assert units[0] == (npu_pack.encoder_file(3), None) and (npu_pack.encoder_file(10), None) in units
    assert {f for _, f in units} == {None, 150, 500}
    assert (npu_pack.verifier(10)[0], 500) in units and (npu_pack.verifier(3)[0], 150) in units
    assert len(units) == len(set(units))
    calls: list[tuple[int, int]] = []
    assert rt.compile_pending()  # a first start: the app readies the engine before the capture opens
    with caplog.at_level(logging.WARNING, logger="captioner.engine.runtime"):
        rt.prepare(progress=lambda done, total: calls.append((done, total)))
        assert not rt.compile_pending()
        first = _encode(rt, npu_pack)
        for graph, frames in units:  # every prepared graph opens from the cache
            rt.session(graph, frames)
    assert calls == [(i, len(units)) for i in range(1, len(units) + 1)]
    assert not [r for r in caplog.records if "while captioning" in r.getMessage()]  # nothing compiled late
    info = rt.info()
    assert info.chosen == "QNN-HTP" and all(set(p) == {"QNNExecutionProvider"} for p in info.placement.values())
    (marker,) = tmp_path.glob("ep-context/*/prepared.json")
    prepared = json.loads(marker.read_text())
    assert len(prepared["contexts"]) == len(units) and prepared["shared"] is False
    assert len(list(marker.parent.glob("*_ctx.onnx"))) == len(units) == len(list(marker.parent.glob("*.bin")))
    rt.close()
    warm = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3, 10))
    assert not warm.compile_pending()  # a warm start: nothing to compile, the capture opens at once
    calls.clear()
    warm.prepare(progress=lambda done, total: calls.append((done, total)))
    assert calls == []  # the cache had it all
    for a, b in zip(_encode(warm, npu_pack), first, strict=True):
        np.testing.assert_array_equal(a, b)
    warm.close()


class _Quit(BaseException):
    """What the app's worker raises from the progress callback when asked to stop."""


def test_a_compile_stopped_between_two_graphs_keeps_them_and_the_provider(npu_pack, tmp_path) -> None:
    """Quitting during a first NPU start ends the compile after the graph being compiled (the worker's
    progress callback raises): no fallback to the CPU, the graphs compiled so far stay cached and the
    next start compiles only the rest."""
    rt = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,))
    units = rt.npu_units()

    def quit_after_two(done: int, total: int) -> None:
        if done == 2:
            raise _Quit

    with pytest.raises(_Quit):
        rt.prepare(progress=quit_after_two)
    assert rt.provider == "QNN-HTP" and rt.info().fallbacks == () and rt.compile_pending()
    assert len(list(tmp_path.glob("ep-context/*/*_ctx.onnx"))) == 2
    rt.close()
    again = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,))
    calls: list[tuple[int, int]] = []
    again.prepare(progress=lambda done, total: calls.append((done, total)))
    assert calls == [(i, len(units) - 2) for i in range(1, len(units) - 1)]  # only the rest
    assert not again.compile_pending() and len(list(tmp_path.glob("ep-context/*/*_ctx.onnx"))) == len(units)
    again.close()


def test_a_process_killed_mid_compile_leaves_no_context_that_counts_as_compiled(npu_pack, tmp_path,
                                                                               monkeypatch) -> None:
    """A graph is compiled under a temporary name and renamed when whole: a process that dies between
    the two (a kill, the app leaving a stuck engine) leaves no ``*_ctx.onnx`` for it, so the next start
    compiles it again instead of failing to load it in a round; the renamed context loads."""
    import captioner.engine.runtime as runtime_module

    real_replace, calls = runtime_module.os.replace, []

    def dies_on_the_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise _Quit  # the process is gone before the rename
        real_replace(src, dst)

    monkeypatch.setattr(runtime_module.os, "replace", dies_on_the_second)
    rt = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,))
    units = rt.npu_units()
    with pytest.raises(_Quit):
        rt.prepare()
    rt.close()
    assert len(list(tmp_path.glob("ep-context/*/*_ctx.onnx"))) == 1 and list(tmp_path.glob("ep-context/*/*.part.onnx"))
    monkeypatch.setattr(runtime_module.os, "replace", real_replace)
    again = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,))
    assert again.compile_pending()
    done: list[int] = []
    again.prepare(progress=lambda n, total: done.append(total))
    assert done and done[-1] == len(units) - 1 and not again.compile_pending()
    assert not list(tmp_path.glob("ep-context/*/*.part.onnx"))
    assert len(list(tmp_path.glob("ep-context/*/*.bin"))) == len(units)
    out = _encode(again, npu_pack)
    assert again.info().chosen == "QNN-HTP" and again.info().fallbacks == () and np.isfinite(out[0]).all()
    again.close()


def test_two_engines_of_one_process_compiling_at_once_leave_one_whole_cache(npu_pack, tmp_path,
                                                                            monkeypatch) -> None:
    """An engine the app left compiling at a stop (its stop timeout) and the next session's engine
    prepare the same cache at once: one graph at a time is compiled in the process, so no temporary
    file is written by both, a graph one of them compiled is not compiled again by the other (each
    compiled the whole set before), and both end on the NPU with every context whole."""
    import threading

    import captioner.engine.runtime as runtime_module

    real, compiles = runtime_module.ort.ModelCompiler, []

    def counted(*args, **kwargs):
        compiles.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(runtime_module.ort, "ModelCompiler", counted)
    engines = [Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,)) for _ in range(2)]
    units = engines[0].npu_units()
    compiled: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def prepare(k: int) -> None:
        try:
            engines[k].prepare(progress=lambda done, total: compiled[k].append(total))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=prepare, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors
    assert len(compiles) == len(units)  # each graph once, by one of the two
    for rt in engines:
        assert rt.info().chosen == "QNN-HTP" and rt.info().fallbacks == ()
        assert np.isfinite(_encode(rt, npu_pack)[0]).all()
        rt.close()
    assert not list(tmp_path.glob("ep-context/*/*.part.onnx"))
    assert len(list(tmp_path.glob("ep-context/*/*_ctx.onnx"))) == len(units) == len(list(tmp_path.glob("ep-context/*/*.bin")))
    warm = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,))
    assert not warm.compile_pending()
    warm.close()


_CHILD = """
import json, sys
from pathlib import Path
import captioner.engine.runtime as runtime_module
from captioner.engine.runtime import Runtime
from captioner.models.pack import Pack
real, compiles = runtime_module.ort.ModelCompiler, []
def counted(*args, **kwargs):
    compiles.append(1)
    return real(*args, **kwargs)
runtime_module.ort.ModelCompiler = counted
rt = Runtime(Pack.load(Path(sys.argv[1])), "qnn", cache_dir=Path(sys.argv[2]), npu_buckets=(3,))
rt.prepare()
print(json.dumps({"compiles": len(compiles), "chosen": rt.info().chosen, "fallbacks": len(rt.info().fallbacks)}))
"""


def test_two_processes_compiling_one_cache_at_once_compile_each_graph_once(npu_pack, tmp_path) -> None:
    """The app and the CLI on a first NPU start prepare the same cache at once: a lock file beside
    the cache folder lets one process compile a graph at a time, the other skips what is compiled,
    and both run on the NPU (without it, each compiled every graph over the same temporary file)."""
    import subprocess
    import sys

    children = [subprocess.Popen([sys.executable, "-c", _CHILD, str(npu_pack.root), str(tmp_path)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    units = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,)).npu_units()
    assert sum(r["compiles"] for r in results) == len(units)  # each graph once, by one of the two
    assert all(r["chosen"] == "QNN-HTP" and r["fallbacks"] == 0 for r in results)
    assert not list(tmp_path.glob("ep-context/*/*.part.onnx"))
    assert len(list(tmp_path.glob("ep-context/*/*_ctx.onnx"))) == len(units) and list(tmp_path.glob("ep-context/*.lock"))


def test_a_graph_compiled_in_a_round_is_written_whole_and_loads_next_time(npu_pack, tmp_path, caplog,
                                                                         monkeypatch) -> None:
    """A graph outside the prepared set is compiled when a round first needs it; its context, too, is
    written under the temporary name and renamed: a process that dies before the rename leaves no
    ``*_ctx.onnx`` of it, the next one compiles it again, and the start after that loads it."""
    import captioner.engine.runtime as runtime_module

    real_replace = runtime_module.os.replace

    def dies(src, dst):
        raise _Quit  # the process is gone before the rename

    late = npu_pack.encoder_file(10)
    monkeypatch.setattr(runtime_module.os, "replace", dies)
    killed = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,))
    with pytest.raises(_Quit):
        killed.session(late)
    killed.close()
    assert list(tmp_path.glob(f"ep-context/*/{late.stem}_ctx.part.onnx"))
    assert not list(tmp_path.glob(f"ep-context/*/{late.stem}_ctx.onnx"))
    monkeypatch.setattr(runtime_module.os, "replace", real_replace)
    rt = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,))
    rt.prepare()
    assert (late, None) not in rt.npu_units()
    with caplog.at_level(logging.WARNING, logger="captioner.engine.runtime"):
        rt.session(late)
    assert [r for r in caplog.records if "while captioning" in r.getMessage()]  # compiled late, said so
    assert len(list(tmp_path.glob(f"ep-context/*/{late.stem}_ctx.onnx"))) == 1
    assert not list(tmp_path.glob("ep-context/*/*.part.onnx"))
    rt.close()
    caplog.clear()
    warm = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,))
    with caplog.at_level(logging.WARNING, logger="captioner.engine.runtime"):
        warm.session(late)
    assert not [r for r in caplog.records if "while captioning" in r.getMessage() or "unusable" in r.getMessage()]
    assert warm.info().chosen == "QNN-HTP" and warm.info().fallbacks == ()
    warm.close()


def test_a_shared_context_is_one_binary_and_where_it_cannot_load_one_per_graph_runs(npu_pack, tmp_path, caplog) -> None:
    rt = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,), shared_context=True)
    assert rt.compile_pending()
    units = rt.npu_units()
    folder = rt._context_dir(rt._current)
    rt._compile_set(rt._current, folder)  # the group alone, to look at it before the trial load
    bins = list(folder.glob("*.bin"))
    ctxs = sorted(folder.glob("*_ctx.onnx"))
    assert len(bins) == 1 and len(ctxs) == len(units) >= 5
    import onnx

    for ctx in ctxs:  # every compiled graph points into the one binary
        (node,) = onnx.load(str(ctx), load_external_data=False).graph.node
        attrs = {a.name: a for a in node.attribute}
        assert node.op_type == "EPContext" and attrs["ep_cache_context"].s.decode() == bins[0].name
    shared_bytes = bins[0].stat().st_size
    with caplog.at_level(logging.WARNING, logger="captioner.engine.runtime"):
        out = _encode(rt, npu_pack)
    info = rt.info()
    if Host.current().qnn_emulated:  # x86-64 QNN cannot load a weight-shared binary: one context per graph
        assert any("shared NPU context" in r.getMessage() and "trial load crashed" in r.getMessage()
                   for r in caplog.records)
        assert rt.shared_context is False
        per_graph = [b.stat().st_size for b in tmp_path.glob("ep-context/*/*.bin") if b.parent != folder]
        assert len(per_graph) == len(units)
        print(f"contexts of {len(units)} graphs: one shared {shared_bytes / 1e6:.1f} MB, "
              f"one per graph {sum(per_graph) / 1e6:.1f} MB")
        assert shared_bytes < sum(per_graph) / 2  # each chunk graph's vocabulary projection stored once
        again = Runtime(npu_pack, "qnn", cache_dir=tmp_path, npu_buckets=(3,), shared_context=True)
        assert not again.compile_pending()  # the verdict says one context per graph, and those are cached
        again.close()
    assert info.chosen == "QNN-HTP" and info.fallbacks == ()
    assert len(out) == 2 and np.isfinite(out[0]).all()
    rt.close()


def test_the_emulator_cannot_load_a_weight_shared_context_by_onnx_runtimes_own_recipe(tmp_path) -> None:
    """Why the default does not try the shared layout on the x86-64 emulator: ONNX Runtime's own recipe
    (benchmarks/qnn_weight_sharing_repro.py: two 64x64 MatMul models, one shared context) generates
    fine and dies loading (SIGSEGV in libQnnHtp.so), while the same models one context each load
    and run. If this starts failing, the emulator can load it: measure the shared layout and let the
    default probe it there too (Runtime's shared_context)."""
    if not Host.current().qnn_emulated:
        pytest.skip("the limit is the x86-64 emulator's")
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "qnn_weight_sharing_repro.py"

    def step(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)

    for layout in ("shared", "pergraph"):
        gen = step("gen", layout, str(tmp_path / layout))
        assert gen.returncode == 0, gen.stderr[-2000:]
    assert len(list((tmp_path / "shared").glob("*.bin"))) == 1 and len(list((tmp_path / "pergraph").glob("*.bin"))) == 2
    per_graph = step("load", str(tmp_path / "pergraph"))
    assert per_graph.returncode == 0 and "loaded and ran" in per_graph.stdout, per_graph.stderr[-2000:]
    shared = step("load", str(tmp_path / "shared"))
    assert shared.returncode != 0, ("the x86-64 HTP emulator loaded a weight-shared context: let the default "
                                    "shared_context of Runtime probe it there too")
    assert "loaded and ran" not in shared.stdout


@pytest.mark.parametrize("how", ["not_a_folder", "full_disk"])
def test_a_compile_cache_that_cannot_be_written_keeps_the_npu_compiled_in_memory(npu_pack, tmp_path, caplog,
                                                                                small_disk, how) -> None:
    """The NPU's compiled contexts cannot be cached (a full disk, a cache folder it cannot create):
    the NPU is sound, so the graphs are compiled in memory and run there, each opened by ``prepare``
    (none in a round), the reason said once; before, the runtime took the cache's failure for the
    NPU's and captioned on the CPU."""
    if how == "not_a_folder":  # a file where the cache folder should be
        (tmp_path / "cache").write_text("a file where the cache folder should be")
        cache = tmp_path / "cache" / "captioner"
    else:  # a real file system with no room left: ONNX Runtime's "Failed to write context cache file"
        cache = small_disk.mount("256k")
        small_disk.fill(cache)
    rt = Runtime(npu_pack, "qnn", cache_dir=cache, npu_buckets=(3,))
    with caplog.at_level(logging.WARNING, logger="captioner.engine.runtime"):
        calls: list[tuple[int, int]] = []
        rt.prepare(progress=lambda done, total: calls.append((done, total)))
        opened = set(rt.info().session_ms)
        n = len(rt.npu_units())
        assert calls[-n:] == [(i, n) for i in range(1, n + 1)]  # the in-memory compiles said as they go
        for graph, frames in rt.npu_units():
            rt.session(graph, frames)
        out = _encode(rt, npu_pack)
    info = rt.info()
    assert info.chosen == "QNN-HTP" and info.fallbacks == (), info
    assert all(set(p) == {"QNNExecutionProvider"} for p in info.placement.values())
    assert rt.cache_dir is None and rt.cache_problem and info.cache_problem == rt.cache_problem
    assert npu_when(rt) == "at every start: its cache cannot be written"  # what the progress lines say
    assert set(info.session_ms) == opened and len(opened) == len(rt.npu_units())  # all opened ahead
    said = [r.getMessage() for r in caplog.records]
    assert sum("compile cache" in m and "compiles in memory" in m for m in said) == 1, said
    assert not [m for m in said if "falling back" in m or "while captioning" in m], said
    assert out[0].shape[-1] == 150 and np.isfinite(out[0]).all()
    rt.close()


@pytest.mark.parametrize("volume", ["short_names", "no_short_names"])
def test_a_cache_folder_the_plugin_cannot_read_is_used_by_its_short_name(npu_pack, tmp_path, monkeypatch, caplog,
                                                                         volume) -> None:
    """A Windows user folder with letters outside the ANSI code page the QNN plugin reads paths in
    (``Łukasz`` under cp1252: onnxruntime-qnn converts with ``std::filesystem::path(std::string)``,
    engine/plugin_paths.py). Windows' answers are played (``GetACP`` 1252, ``GetShortPathNameW``: an
    ASCII alias, a link here, or the long name where the volume keeps no 8.3 names); the compile,
    the cache and the warm start are the real HTP emulator's. With an alias the contexts are kept in
    the folder through it and a second start compiles nothing; without one, the NPU compiles in
    memory, the reason said, never the CPU."""
    from captioner.engine import plugin_paths

    home = tmp_path / "Łukasz" / "AppData"
    alias = tmp_path / "LUKASZ~1"

    def short_path(path):
        if volume == "no_short_names":
            return path  # what GetShortPathNameW gives where 8.3 names are off
        if not alias.exists():
            alias.symlink_to(tmp_path / "Łukasz", target_is_directory=True)
        return alias / path.relative_to(tmp_path / "Łukasz")

    monkeypatch.setattr(plugin_paths, "ansi_code_page", lambda: 1252)
    monkeypatch.setattr(plugin_paths, "short_path", short_path)
    rt = Runtime(npu_pack, "qnn", cache_dir=home, npu_buckets=(3,))
    with caplog.at_level(logging.WARNING, logger="captioner.engine.runtime"):
        rt.prepare()
    info = rt.info()
    assert info.chosen == "QNN-HTP" and info.fallbacks == (), info
    if volume == "short_names":
        assert rt.cache_dir == alias / "AppData" and info.cache_problem == ""
        assert list((home / "ep-context").glob("*/*_ctx.onnx"))  # kept in the real folder
        rt.close()
        warm = Runtime(npu_pack, "qnn", cache_dir=home, npu_buckets=(3,))
        assert not warm.compile_pending()  # the next start loads them
        warm.close()
    else:
        assert rt.cache_dir is None and "code page 1252" in info.cache_problem
        assert sum("cannot be used" in r.getMessage() for r in caplog.records) == 1
        rt.close()
