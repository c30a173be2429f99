"""Every graph of a tiny pack on the QNN HTP backend (the x86-64 emulator on Linux), CPU fallback disabled.

With ``session.disable_cpu_ep_fallback=1`` a session only comes up when every node is placed on QNN,
so creating it is the placement check. The emulator cannot detect a SoC: without ``soc_model`` graph
finalisation fails (QNN_COMMON_ERROR_MEM_ALLOC) for Gelu and Gather, so the Snapdragon X Elite is
named (SoC 60, HTP v73), as ``engine/providers.py`` does. The HTP computes float graphs in fp16.
Tolerance against the CPU provider: 1e-2 absolute on logits and K/V (fp16 has ~3 significant
digits; observed ≤ 1.3e-3), 1e-4 on the attention probabilities (observed ≤ 6e-6); under teacher
forcing ≥ 80 % identical argmax tokens (a random tiny model has near-ties among 50 257 logits that
fp16 rounding may flip; ``token_logit``, the value of the maximum, must still agree within 1e-2).

The emulator compiles slowly (~2.5 s per decoder chunk of the 2-layer ``tiny_pack``) and runs the
51865-token vocabulary projection slowly (~1 s per decoder step), so the all-graphs check uses a
1-layer, d_model 32 pack (0.4 s per graph), and the output comparisons run a few graphs of
``tiny_pack`` (2 layers, so layer chaining and the alignment heads of the last layer are covered).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from checkpoints import make_checkpoint

from captioner.models.build import BuildOptions, build_pack
from models.helpers import PackRunner, random_mel

ort = pytest.importorskip("onnxruntime")
onnxruntime_qnn = pytest.importorskip("onnxruntime_qnn")

pytestmark = [pytest.mark.qnn, pytest.mark.slow]

QNN_EP = "QNNExecutionProvider"
# Snapdragon X Elite (SoC 60, HTP v73): the emulator needs a SoC to finalise graphs.
PROVIDER_OPTIONS = {"backend_type": "htp", "soc_model": "60", "htp_arch": "73"}
ATOL_VALUES = 1e-2
ATOL_ATTENTION = 1e-4


def qnn_devices():
    if not any(d.ep_name == QNN_EP for d in ort.get_ep_devices()):
        ort.register_execution_provider_library(QNN_EP, onnxruntime_qnn.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == QNN_EP]
    assert devices, "onnxruntime-qnn is installed but registers no QNN device"
    return devices


def qnn_session_options(**config: str) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    for key, value in config.items():
        so.add_session_config_entry(key, value)
    so.add_provider_for_devices(qnn_devices(), PROVIDER_OPTIONS)
    return so


@pytest.fixture(scope="module")
def small_pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("qnn")
    ckpt = make_checkpoint(root / "ckpt", d_model=32, layers=1, heads=2, ffn=64, seed=3,
                           alignment_heads=[(0, 1)])
    return build_pack(ckpt, root / "pack", BuildOptions(vocab="fp32", layers="fp32"))  # the NPU's packs: fp32


@pytest.fixture(scope="module")
def qnn_pack(tiny_fp32_pack):
    return tiny_fp32_pack


@pytest.fixture(scope="module")
def qnn_runner(qnn_pack) -> PackRunner:
    return PackRunner(qnn_pack, lambda: (qnn_session_options(), None))


def test_every_graph_runs_on_htp_without_cpu_fallback(small_pack):
    graphs = small_pack.graph_files()
    # 7 encoders; 4 chunk graphs (k4 batched prompt, k6, k5 batched, k5) shared by the short buckets
    # and 4 for the larger cache of the 10, 20 and 30 s buckets, and a verifier for each cache
    assert len(graphs) == 17
    for bucket in small_pack.buckets:  # each chunk graph as the runtime compiles it: frames fixed per bucket
        verifier, beam = small_pack.verifier(bucket), small_pack.beam(bucket)
        for path in [small_pack.encoder_file(bucket),
                     *dict.fromkeys(small_pack.decoder_file(bucket, *c) for c in small_pack.decoder_chunks(bucket)),
                     *([verifier[0]] if verifier else []), *([beam[0]] if beam else [])]:
            so = qnn_session_options()
            if path.name.startswith("decoder_"):
                so.add_free_dimension_override_by_name("frames", 50 * bucket)
            if beam and path == beam[0]:  # the NPU's beam step: every cache row (hypotheses × positions)
                so.add_free_dimension_override_by_name("beam_cache", beam[1] * small_pack.cache_slots[bucket])
            session = ort.InferenceSession(str(path), so)  # fails if a node needs the CPU
            assert [i.name for i in session.get_inputs()][:1] in (["mel"], ["token"])
            del session


def _compare(qnn_pack, qnn_runner, bucket: int, n: int, chunks: list[tuple[int, int]], prefix: tuple[int, ...] = ()):
    cpu = PackRunner(qnn_pack)
    mel = random_mel(qnn_pack.dims.n_mels, n, bucket, seed=bucket)
    enc_cpu = cpu.encode(mel, n, bucket)
    enc_qnn = qnn_runner.encode(mel, n, bucket)
    for name in ("cross_k", "cross_v"):
        diff = np.abs(getattr(enc_qnn, name)[..., :n] - getattr(enc_cpu, name)[..., :n]).max()
        assert diff <= ATOL_VALUES, (name, diff)
    sp = qnn_pack.special
    prompt = [sp.sot, sp.languages["en"], sp.transcribe, sp.notimestamps, *prefix]
    seq, out_cpu = cpu.greedy(enc_cpu, prompt, chunks)
    # teacher forcing: the HTP decoder consumes the CPU's tokens, so every step is comparable
    _, out_qnn = qnn_runner.greedy(enc_cpu, prompt, chunks, forced_override=dict(enumerate(seq)))
    agree = np.mean(np.concatenate([a["tokens"] == b["tokens"] for a, b in zip(out_qnn, out_cpu, strict=True)]))
    assert agree >= 0.8, agree  # a random model has near-ties that fp16 may flip; the max logit may not move
    for a, b in zip(out_qnn, out_cpu, strict=True):
        for name in ("token_logit", "eot_logit", "logsumexp", "nospeech_logit", "lang_logits", "new_k", "new_v"):
            assert np.abs(a[name] - b[name]).max() <= ATOL_VALUES, name
        for name in ("attn_last", "attn_align"):
            assert np.abs(a[name] - b[name]).max() <= ATOL_ATTENTION, name


def test_htp_outputs_match_cpu_short_bucket(qnn_pack, qnn_runner):
    _compare(qnn_pack, qnn_runner, 3, 131, [(0, 4), (4, 6), (10, 5)])


def test_htp_outputs_match_cpu_prefixed_schedule(qnn_pack, qnn_runner):
    _compare(qnn_pack, qnn_runner, 5, 250, [(0, 5), (5, 5)], prefix=(1000, 2000))


def test_ep_context_files_can_be_generated_and_run(qnn_pack, tmp_path):
    mel = random_mel(qnn_pack.dims.n_mels, 100, 3, seed=1)
    feeds = {"mel": mel, "n_frames": np.array([100], np.int64)}
    source = qnn_pack.encoder_file(3)
    ctx = tmp_path / "encoder_3s_ctx.onnx"
    first = ort.InferenceSession(str(source), qnn_session_options(**{
        "ep.context_enable": "1", "ep.context_file_path": str(ctx)}))
    expected = first.run(None, feeds)
    assert ctx.is_file()
    binaries = list(tmp_path.glob("*.bin"))
    assert binaries, "no QNN context binary written next to the EP-context model"
    import onnx

    nodes = onnx.load(str(ctx), load_external_data=False).graph.node
    assert [n.op_type for n in nodes] == ["EPContext"]
    reloaded = ort.InferenceSession(str(ctx), qnn_session_options())
    for a, b in zip(reloaded.run(None, feeds), expected, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_ep_context_for_a_decoder_chunk(qnn_pack, tmp_path):
    path: Path = qnn_pack.decoder_file(3, 10, 5)
    ctx = tmp_path / "decoder_ctx.onnx"
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        ort.InferenceSession(str(path), qnn_session_options())  # symbolic frames: the HTP takes static shapes only
    so = qnn_session_options(**{"ep.context_enable": "1", "ep.context_file_path": str(ctx)})
    so.add_free_dimension_override_by_name("frames", 150)
    ort.InferenceSession(str(path), so)
    assert ctx.is_file() and list(tmp_path.glob("*.bin"))
    compiled = onnx.load(str(ctx), load_external_data=False).graph
    assert [d.dim_value for d in compiled.input[-1].type.tensor_type.shape.dim] == [4, 16, 150]  # cross_v_1


def test_htp_matches_cpu_on_the_longest_graphs(qnn_pack, qnn_runner):
    """The 30 s encoder and the last long chunk (220, 5), fed the CPU's full 220-slot cache."""
    cpu = PackRunner(qnn_pack)
    n = 1400
    mel = random_mel(qnn_pack.dims.n_mels, n, 30, seed=30)
    enc = cpu.encode(mel, n, 30)
    enc_qnn = qnn_runner.encode(mel, n, 30)
    assert np.abs(enc_qnn.cross_k[..., :n] - enc.cross_k[..., :n]).max() <= ATOL_VALUES
    assert np.abs(enc_qnn.cross_v[..., :n] - enc.cross_v[..., :n]).max() <= ATOL_VALUES
    sp = qnn_pack.special
    chunks = cpu.plan(30, "default", positions=qnn_pack.max_positions)
    seq, outputs = cpu.greedy(enc, [sp.sot, sp.languages["en"], sp.transcribe, sp.notimestamps], chunks)
    self_k = np.concatenate([o["new_k"] for o in outputs[:-1]], 3)
    self_v = np.concatenate([o["new_v"] for o in outputs[:-1]], 3)
    assert self_k.shape[3] == qnn_pack.cache_slots[30] == 220
    forced = seq[221:225]  # positions 221…224, consumed by steps 1…4
    last_qnn = qnn_runner.chunk(enc, 220, 5, seq[220], forced, self_k, self_v)
    last_cpu = cpu.chunk(enc, 220, 5, seq[220], forced, self_k, self_v)
    for name in ("token_logit", "eot_logit", "logsumexp", "nospeech_logit", "lang_logits", "new_k", "new_v"):
        assert np.abs(last_qnn[name] - last_cpu[name]).max() <= ATOL_VALUES, name
    for name in ("attn_last", "attn_align"):
        assert np.abs(last_qnn[name] - last_cpu[name]).max() <= ATOL_ATTENTION, name


def test_the_beam_step_runs_on_htp_with_every_cache_row_as_the_cpu_with_the_filled_ones(tmp_path_factory):
    """A pack built with ``--beam 5``: its beam step compiles whole for the HTP with the frames and
    the cache rows fixed (5 × 220, as ``Runtime.beam_cache_rows`` gives them), and with every row
    fed (the unfilled ones masked) it predicts what the CPU predicts from the filled rows alone."""
    root = tmp_path_factory.mktemp("qnn-beam")
    ckpt = make_checkpoint(root / "ckpt", d_model=32, layers=1, heads=2, ffn=64, seed=3, alignment_heads=[(0, 1)])
    pack = build_pack(ckpt, root / "pack", BuildOptions(vocab="fp32", layers="fp32", beam_size=5))
    path, width = pack.beam(10)
    slots, frames, filled = pack.cache_slots[10], 500, 7
    heads, hd = pack.dims.decoder_heads, pack.dims.head_dim
    rng = np.random.default_rng(11)
    cache_k = rng.standard_normal((slots, width, heads, hd)).astype(np.float32)
    cache_v = rng.standard_normal((slots, width, heads, hd)).astype(np.float32)
    mask = np.full((width, slots, width), -100.0, np.float32)
    for b in range(width):
        mask[b, :filled, b] = 0.0
    cross_k, cross_v = (rng.standard_normal((heads, hd, frames)).astype(np.float32) for _ in range(2))
    cross_mask = np.zeros(frames, np.float32)
    cross_mask[300:] = -100.0

    def feeds(rows: int) -> dict:
        return {"token": np.array([7], np.int64), "forced": np.array([8, 9, 10, 11], np.int64),
                "positions": np.full(width, filled, np.int64),
                "self_mask": np.ascontiguousarray(mask.reshape(width, -1)[:, :rows]),
                "cross_mask": cross_mask,
                "self_k_0": np.ascontiguousarray(cache_k.reshape(-1, heads, hd)[:rows]),
                "self_v_0": np.ascontiguousarray(cache_v.reshape(-1, heads, hd)[:rows]),
                "cross_k_0": cross_k, "cross_v_0": cross_v}

    so = qnn_session_options()
    so.add_free_dimension_override_by_name("frames", frames)
    so.add_free_dimension_override_by_name("beam_cache", width * slots)
    htp = ort.InferenceSession(str(path), so)  # fails if a node needs the CPU
    cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in cpu.get_outputs()]
    got = dict(zip(names, htp.run(names, feeds(width * slots)), strict=True))
    want = dict(zip(names, cpu.run(names, feeds(width * filled)), strict=True))
    np.testing.assert_allclose(got["top_logits"], want["top_logits"], atol=ATOL_VALUES)
    np.testing.assert_allclose(got["eot_logit"], want["eot_logit"], atol=ATOL_VALUES)
    np.testing.assert_allclose(got["new_k"], want["new_k"], atol=ATOL_VALUES)
    np.testing.assert_allclose(got["attn_align"], want["attn_align"], atol=ATOL_ATTENTION)
    assert (got["top_tokens"][:, 0] == want["top_tokens"][:, 0]).mean() >= 0.8  # fp16 near-ties (module docstring)
