"""A pack's CPU variant (``BuildOptions.cpu_variant``, manifest ``cpu_variant``): the NPU's packs are
fp32 (QNN has no int8 MatMul), and the CPU, chosen or fallen back to, runs int8 graphs of the same
pack over the same ``weights.bin`` (``Pack.cpu_file``, ``Runtime``), so it keeps the int8 speed-up.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from checkpoints import make_checkpoint

from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.providers import Host
from captioner.engine.runtime import Runtime
from captioner.errors import ModelError
from captioner.models import build
from captioner.models.build import BuildOptions, build_pack
from captioner.models.pack import Pack
from captioner.models.verify import pack_problems


@pytest.fixture(scope="module")
def packs(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pack]:
    """The tiny checkpoint three ways: fp32 with an int8 CPU variant, int8 alone, fp32 alone."""
    root = tmp_path_factory.mktemp("variant")
    return {
        "both": build_pack(tiny_checkpoint, root / "both", BuildOptions(vocab="fp32", layers="fp32", cpu_variant="int8")),
        "int8": build_pack(tiny_checkpoint, root / "int8", BuildOptions(vocab="int8", layers="int8", cpu_variant="none")),
        "fp32": build_pack(tiny_checkpoint, root / "fp32", BuildOptions(vocab="fp32", layers="fp32", cpu_variant="none")),
    }


def _encoder_feeds(pack: Pack) -> dict[str, np.ndarray]:
    mel = np.random.default_rng(0).standard_normal((1, pack.dims.n_mels, 300)).astype(np.float32)
    return {"mel": mel, "n_frames": np.array([120], np.int64)}


def test_a_cpu_variant_is_a_second_graph_set_over_the_same_weights(packs) -> None:
    both, int8, fp32 = packs["both"], packs["int8"], packs["fp32"]
    assert (both.vocab, both.layers, both.cpu_vocab, both.cpu_layers) == ("fp32", "fp32", "int8", "int8")
    assert int8.cpu_vocab is None and fp32.cpu_file(fp32.encoder_file(3)) == fp32.encoder_file(3)  # as before
    assert len(both.cpu_graph_files()) == len(both.graph_files()) == len(int8.graph_files())
    assert both.cpu_file(both.encoder_file(3)).name == "cpu_encoder_3s.onnx"
    assert all(f.name.startswith("cpu_") and f.is_file() for f in both.cpu_graph_files())
    # each weight stored once: the fp32 layer weights and the int8 ones, the rest shared
    sizes = {name: p.weights_file().stat().st_size for name, p in packs.items()}
    shared = set(both.manifest["weights_index"]) - {n for n in both.manifest["weights_index"] if "int8" in n or "weight_t" in n}
    assert set(int8.manifest["weights_index"]) | set(fp32.manifest["weights_index"]) == set(both.manifest["weights_index"])
    assert max(sizes["int8"], sizes["fp32"]) < sizes["both"] < sizes["int8"] + sizes["fp32"] and shared
    print("weights.bin: fp32 {fp32} B, int8 {int8} B, fp32 + int8 CPU variant {both} B".format(**sizes))
    assert Pack.load(both.root, verify=True).cpu_layers == "int8"  # every file listed with its sha256
    assert pack_problems(both.root) == []  # the variant's graphs keep the graph contract too


def test_the_cpu_runs_the_variant_and_gives_the_int8_packs_outputs(packs, tmp_path) -> None:
    both, int8 = packs["both"], packs["int8"]
    audio = (0.1 * np.random.default_rng(2).standard_normal(16000 * 3)).astype(np.float32)
    results = {}
    for name in ("both", "int8"):
        pack = packs[name]
        model = OnnxAcousticModel(pack, Runtime(pack, "cpu"))
        enc = model.encode(audio)
        run = model.decoder(enc)
        sp = pack.special
        seq = [sp.sot, sp.languages["en"], sp.transcribe, sp.notimestamps]
        logits = []
        for start, size in model.chunk_plan(3, False)[:3]:
            forced = np.array([seq[p] if p < len(seq) else -1 for p in range(start + 1, start + size)], np.int64)
            out = run.run(start, size, seq[start], forced)
            seq += [int(t) for t in out.tokens[len(seq) - start - 1:]]
            logits.append(out.token_logit)
        results[name] = (enc.payload[0], seq, logits, model.runtime.info().placement)  # type: ignore[index]
        model.close()
    (k_both, seq_both, logits_both, placed), (k_int8, seq_int8, logits_int8, _) = results["both"], results["int8"]
    np.testing.assert_array_equal(k_both, k_int8)  # the same graph and weights: bit for bit
    assert seq_both == seq_int8 and all(np.array_equal(a, b) for a, b in zip(logits_both, logits_int8, strict=True))
    assert placed and all(name.startswith("cpu_") for name in placed)  # every session from the variant
    assert int8.cpu_vocab is None and both.layers == "fp32"


@pytest.mark.qnn
def test_the_npu_runs_the_fp32_graphs_and_a_fallback_to_the_cpu_moves_to_the_variant(packs, tmp_path) -> None:
    pytest.importorskip("onnxruntime_qnn")
    if not Host.current().qnn_emulated and not Host.current().snapdragon_windows:
        pytest.skip("no QNN HTP backend on this platform")
    both, int8, fp32 = packs["both"], packs["int8"], packs["fp32"]
    feeds = _encoder_feeds(both)
    rt = Runtime(both, "qnn", cache_dir=tmp_path)
    graph = both.encoder_file(3)
    on_npu = rt.run(graph, ["cross_k"], feeds)[0]
    placement = rt.info().placement
    assert list(placement) == ["encoder_3s.onnx"] and set(placement["encoder_3s.onnx"]) == {"QNNExecutionProvider"}
    reference = Runtime(fp32, "cpu").run(fp32.encoder_file(3), ["cross_k"], feeds)[0]
    assert np.abs(on_npu - reference).max() <= 0.02 * np.abs(reference).max()  # fp32 graph, fp16 on the HTP
    rt.fail_over(rt._current, graph, RuntimeError("device lost"))  # as a run error would
    on_cpu = rt.run(graph, ["cross_k"], feeds)[0]
    assert rt.provider == "CPU" and "cpu_encoder_3s.onnx" in rt.info().placement
    np.testing.assert_array_equal(on_cpu, Runtime(int8, "cpu").run(int8.encoder_file(3), ["cross_k"], feeds)[0])
    rt.close()


def test_auto_gives_the_npus_packs_the_cpus_own_choice_as_a_variant(monkeypatch) -> None:
    auto = BuildOptions()
    monkeypatch.setattr(build, "_npu_host", lambda: False)
    assert auto.cpu_weights(384) is None and auto.cpu_weights(512) is None  # CPU packs are int8 already
    assert BuildOptions(vocab="fp32", layers="fp32", cpu_variant="int8").cpu_weights(384) == ("int8", "int8")
    assert BuildOptions(vocab="int8", layers="int8", cpu_variant="int8").cpu_weights(384) is None  # nothing to add
    monkeypatch.setattr(build, "_npu_host", lambda: True)  # Windows ARM64: the main graphs are the NPU's fp32
    assert (auto.vocab_projection, auto.layer_weights(512)) == ("fp32", "fp32")
    assert auto.cpu_weights(384) == ("int8", "fp32")  # tiny: int8 vocabulary ranking, fp32 layers (as on the CPU)
    assert auto.cpu_weights(512) == ("int8", "int8")  # base and up: int8 layers too
    assert BuildOptions(cpu_variant="none").cpu_weights(512) is None
    with pytest.raises(build.PackBuildError, match="cpu_variant"):
        BuildOptions(cpu_variant="yes").validate(448, 1500)


def test_a_variant_that_misses_a_graph_is_refused(packs, tmp_path) -> None:
    copy = tmp_path / "pack"
    shutil.copytree(packs["both"].root, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["cpu_variant"]["graphs"].pop("encoder_3s.onnx")
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="cpu_variant"):
        Pack.load(copy)
    broken = tmp_path / "broken"
    shutil.copytree(packs["both"].root, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    manifest["cpu_variant"]["graphs"]["encoder_3s.onnx"] = "cpu_encoder_4s.onnx"  # another bucket's encoder
    (broken / "manifest.json").write_text(json.dumps(manifest))
    assert any("cpu_encoder_4s.onnx" in p and "mel has shape" in p for p in pack_problems(broken, checksums=False))


def test_an_npu_host_build_of_a_wide_model_gets_int8_cpu_graphs(tmp_path, monkeypatch) -> None:
    """What ``models install`` writes on Windows ARM64 for base and up (d_model >= 512), built here
    with the host faked: fp32 main graphs for the NPU, int8 layers and vocabulary for the CPU."""
    monkeypatch.setattr(build, "_npu_host", lambda: True)
    ckpt = make_checkpoint(tmp_path / "ckpt", d_model=512, layers=1, heads=8, ffn=64, seed=4)
    pack = build_pack(ckpt, tmp_path / "pack", BuildOptions(buckets=(3,)))
    assert (pack.layers, pack.vocab, pack.cpu_layers, pack.cpu_vocab) == ("fp32", "fp32", "int8", "int8")
    assert any(n.endswith("weight_int8_t") for n in pack.manifest["weights_index"])
