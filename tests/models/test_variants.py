"""Build variants: 1×1-Conv lowering, fp16 weights, English-only, 128 mel bins, 100 languages,
fp16/bf16 checkpoints, and the alignment-head fallback."""

from __future__ import annotations

import numpy as np
import pytest
from checkpoints import make_checkpoint

from captioner import cli
from captioner.models.checkpoint import ALIGNMENT_FALLBACK
from captioner.models.pack import Pack
from captioner.storage.paths import AppPaths
from models.helpers import PackRunner, Reference, random_mel


def build(checkpoint, out, *extra: str) -> Pack:
    """The variant built by the CLI with fp32 layers: compared with transformers at float tolerance."""
    code = cli.run(["models", "build", "--checkpoint", str(checkpoint), "--out", str(out), "--layers", "fp32", *extra],
                   AppPaths.default(out.parent / "home"))
    assert code == 0
    return Pack.load(out, verify=True)


def prompt(pack: Pack) -> list[int]:
    sp = pack.special
    return [sp.sot, sp.languages["en"], sp.transcribe, sp.notimestamps] if pack.multilingual else [sp.sot, sp.notimestamps]


def test_conv_lowering_equals_matmul(tiny_checkpoint, tiny_pack, runner, tmp_path):
    conv = build(tiny_checkpoint, tmp_path / "conv", "--linear", "conv", "--buckets", "3", "30",
                 "--vocab", tiny_pack.vocab)
    assert conv.linear == "conv"
    conv_runner = PackRunner(conv)
    for bucket, n in ((3, 120), (30, 1111)):
        mel = random_mel(80, n, bucket, seed=bucket)
        a, b = runner.encode(mel, n, bucket), conv_runner.encode(mel, n, bucket)
        assert np.abs(a.cross_k - b.cross_k).max() <= 1e-5
        assert np.abs(a.cross_v - b.cross_v).max() <= 1e-5
        seq, out_a = runner.greedy(a, prompt(tiny_pack), runner.plan(bucket, "default"))
        seq_b, out_b = conv_runner.greedy(a, prompt(tiny_pack), conv_runner.plan(bucket, "default"))
        assert seq == seq_b
        for x, y in zip(out_a, out_b, strict=True):
            for name in ("token_logit", "eot_logit", "logsumexp", "nospeech_logit", "lang_logits", "attn_last",
                         "attn_align", "new_k", "new_v"):
                assert np.abs(x[name] - y[name]).max() <= 1e-5, name
    import onnx

    ops = {n.op_type for n in onnx.load(str(conv.decoder_file(3, 10, 5)), load_external_data=False).graph.node}
    assert "Conv" in ops and "MatMul" in ops  # linear layers as Conv; attention products stay MatMul


def test_fp16_pack_agrees_with_fp32(tiny_checkpoint, tiny_pack, runner, tmp_path):
    half = build(tiny_checkpoint, tmp_path / "fp16", "--precision", "fp16", "--buckets", "3", "6")
    assert half.precision == "fp16"
    assert half.weights_file().stat().st_size < 0.6 * tiny_pack.weights_file().stat().st_size
    half_runner = PackRunner(half)
    same = total = 0
    for bucket in (3, 6):
        for seed in range(3):
            n = 50 * bucket - 17 * seed
            mel = random_mel(80, n, bucket, seed=seed)
            enc32 = runner.encode(mel, n, bucket)
            enc16 = half_runner.encode(mel, n, bucket)
            assert np.abs(enc16.cross_k - enc32.cross_k).max() < 0.05
            seq32, _ = runner.greedy(enc32, prompt(tiny_pack), runner.plan(bucket, "default"))
            # teacher forcing on the fp32 tokens: each fp16 prediction is compared at the same context
            _, out16 = half_runner.greedy(enc16, prompt(half), half_runner.plan(bucket, "default"),
                                          forced_override=dict(enumerate(seq32)))
            pred16 = np.concatenate([o["tokens"] for o in out16])
            free = np.arange(len(prompt(tiny_pack)) - 1, len(pred16))  # predictions of free positions
            same += int(np.sum(pred16[free] == np.array(seq32[1:])[free]))
            total += len(free)
    print(f"fp16 agrees with fp32 on {same}/{total} greedy tokens")
    assert same / total >= 0.95, f"fp16 agrees on {same}/{total} greedy tokens"


def test_english_only_128_mels_pack(tmp_path):
    ckpt = make_checkpoint(tmp_path / "tiny.en", multilingual=False, n_mels=128, seed=4, alignment_heads=None)
    pack = build(ckpt, tmp_path / "pack", "--buckets", "4")
    assert not pack.multilingual and pack.dims.n_vocab == 51864 and pack.dims.n_mels == 128
    assert pack.special.eot == 50256 and pack.special.sot == 50257 and pack.special.notimestamps == 50362
    assert pack.special.languages == {} and pack.special.transcribe is None
    assert pack.manifest["alignment_heads_source"] == ALIGNMENT_FALLBACK
    assert pack.alignment_heads == ((1, 0), (1, 1), (1, 2), (1, 3))
    reference = Reference(ckpt)
    run = PackRunner(pack)
    n = 163
    mel = random_mel(128, n, 4, seed=1)
    enc = run.encode(mel, n, 4)
    enc_ref = reference.encode(mel[:, :, : 2 * n])
    ref_k, _ = reference.cross_kv(enc_ref)
    assert np.abs(enc.cross_k[..., :n] - ref_k).max() <= 1e-4
    seq, outputs = run.greedy(enc, prompt(pack), run.plan(4, "default"))
    assert seq == reference.greedy(enc_ref, prompt(pack), positions=len(seq) - 1)
    _, attentions = reference.decode(enc_ref, seq[:-1])
    align = np.mean([attentions[layer][head] for layer, head in pack.alignment_heads], axis=0)
    got = np.concatenate([o["attn_align"] for o in outputs])[:, :n]
    assert np.abs(got - align).max() <= 1e-4
    # no language tokens, so no lang_logits; the older vocabulary's <|nocaptions|> is the no-speech token
    assert "lang_logits" not in outputs[0] and pack.special.nospeech == 50361
    logits, _ = reference.decode(enc_ref, seq[:1])  # the SOT row: the batched head's first row reports it
    assert abs(outputs[0]["nospeech_logit"][0] - logits[0, 50361]) <= 1e-4


def test_hundred_languages_and_half_precision_checkpoint(tmp_path):
    ckpt = make_checkpoint(tmp_path / "v3", n_languages=100, n_mels=128, dtype="float16", seed=5)
    pack = build(ckpt, tmp_path / "pack", "--buckets", "3")
    assert pack.dims.n_vocab == 51866 and len(pack.special.languages) == 100
    assert pack.special.languages["yue"] == 50358 and pack.special.translate == 50359
    assert pack.special.notimestamps == 50364
    reference = Reference(ckpt)
    reference.model.float()
    run = PackRunner(pack)
    mel = random_mel(128, 140, 3, seed=2)
    enc = run.encode(mel, 140, 3)
    ref_k, ref_v = reference.cross_kv(reference.encode(mel[:, :, :280]))
    assert np.abs(enc.cross_k[..., :140] - ref_k).max() <= 1e-4
    assert np.abs(enc.cross_v[..., :140] - ref_v).max() <= 1e-4
    sp = pack.special
    out = run.chunk(enc, 0, 4, sp.sot, [sp.languages["en"], sp.transcribe, sp.notimestamps],
                    run.empty_cache(3), run.empty_cache(3))
    logits, _ = reference.decode(reference.encode(mel[:, :, :280]), [sp.sot])
    assert out["lang_logits"].shape == (4, 100)  # yue's logit too, in the pack's language order
    assert np.abs(out["lang_logits"][0] - logits[0, list(sp.languages.values())]).max() <= 1e-4


@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_bf16_checkpoint_weights_are_read_exactly(tmp_path, dtype):
    import torch

    from captioner.models.safetensors_io import SafetensorsFile

    ckpt = make_checkpoint(tmp_path / "bf16", dtype=dtype, layers=1, seed=6, alignment_heads=None)
    tensors = SafetensorsFile(ckpt / "model.safetensors")
    reference = Reference(ckpt)
    state = reference.model.state_dict()
    for name in ("model.decoder.embed_tokens.weight", "model.encoder.conv1.weight"):
        expected = state[name].to(torch.float32).numpy()
        np.testing.assert_array_equal(tensors[name], expected)
    pack = build(ckpt, tmp_path / "pack", "--buckets", "3")
    assert pack.manifest["alignment_heads_source"] == ALIGNMENT_FALLBACK
    assert pack.alignment_heads == ((0, 0), (0, 1), (0, 2), (0, 3))  # 1 layer: that layer, all heads


def test_turbo_shaped_checkpoint_deep_encoder_shallow_decoder(tmp_path):
    """large-v3-turbo's shape: many encoder layers, few decoder layers, 128 mels, 100 languages."""
    ckpt = make_checkpoint(tmp_path / "turbo", layers=3, decoder_layers=1, n_mels=128, n_languages=100,
                           seed=8, alignment_heads=[(0, 1), (0, 3)])
    pack = build(ckpt, tmp_path / "pack", "--buckets", "5", "--linear", "conv")
    assert pack.dims.encoder_layers == 3 and pack.dims.decoder_layers == 1
    reference = Reference(ckpt)
    run = PackRunner(pack)
    n = 201
    mel = random_mel(128, n, 5, seed=3)
    enc = run.encode(mel, n, 5)
    enc_ref = reference.encode(mel[:, :, : 2 * n])
    ref_k, ref_v = reference.cross_kv(enc_ref)
    assert enc.cross_k.shape == (1, 1, 4, 16, 250)
    assert np.abs(enc.cross_k[..., :n] - ref_k).max() <= 1e-4
    assert np.abs(enc.cross_v[..., :n] - ref_v).max() <= 1e-4
    start = [*prompt(pack), 1000]  # the prefixed schedule carries at least one prefix token
    seq, _ = run.greedy(enc, start, run.plan(5, "prefixed"))
    assert seq == reference.greedy(enc_ref, start, positions=len(seq) - 1)
