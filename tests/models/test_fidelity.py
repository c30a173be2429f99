"""The pack's graphs against transformers on the same tiny checkpoint (fp32, CPU provider).

Encoder: cross K/V of the real frames equal the reference run on exactly that length (≤ 1e-4), with
the standard attention operators and with ONNX Runtime's fused kernel (``--attention fused``).
Decoder: token_logit, eot_logit, logsumexp, the no-speech and language logits, attn_last and
attn_align equal the reference decoder on the same tokens (≤ 1e-4); the greedy decode through the full schedule, with and without a forced prefix,
reproduces transformers' greedy tokens (ids ≥ EOT suppressed) exactly, for every bucket.
Masking: padded frames get ≤ 1e-6 attention in total, and their contents change no output.
"""

from __future__ import annotations

import numpy as np
import pytest

from models.helpers import random_mel

TOL = 1e-4
BUCKETS = (3, 4, 5, 6, 10, 30)  # 10 s: blocked, with ragged last blocks


def lengths(bucket: int) -> list[int]:
    """Several real lengths in encoder frames: very short, odd, just below full, full."""
    full = 50 * bucket
    return sorted({7, full // 2 + 3, full - 1, full})


def prompt(pack, language: str = "en") -> list[int]:
    sp = pack.special
    return [sp.sot, sp.languages[language], sp.transcribe, sp.notimestamps]


@pytest.mark.parametrize("attention", ["standard", "fused"])
@pytest.mark.parametrize("bucket", BUCKETS)
def test_encoder_matches_transformers_on_exact_length(tiny_pack, runner, fused_runner, reference, bucket,
                                                      attention):
    """Both ways of writing the self-attention: MatMul, Softmax, MatMul with the padded keys masked
    (the default) and ONNX Runtime's kernel over the real frames' keys (``--attention fused``)."""
    assert tiny_pack.attention == "standard"
    runner = runner if attention == "standard" else fused_runner
    for i, n in enumerate(lengths(bucket)):
        mel = random_mel(tiny_pack.dims.n_mels, n, bucket, seed=100 * bucket + i)
        enc = runner.encode(mel, n, bucket)
        ref_k, ref_v = reference.cross_kv(reference.encode(mel[:, :, : 2 * n]))
        assert enc.cross_k.shape == (2, 1, 4, 16, 50 * bucket)
        assert np.abs(enc.cross_k[..., :n] - ref_k).max() <= TOL, (bucket, n)
        assert np.abs(enc.cross_v[..., :n] - ref_v).max() <= TOL, (bucket, n)
        assert np.abs(ref_k).max() > 0.1  # the comparison is not between near-zero tensors


@pytest.mark.parametrize("bucket", BUCKETS)
def test_decoder_chunks_match_transformers(tiny_pack, runner, reference, bucket):
    n = lengths(bucket)[1]
    mel = random_mel(tiny_pack.dims.n_mels, n, bucket, seed=bucket)
    enc = runner.encode(mel, n, bucket)
    enc_ref = reference.encode(mel[:, :, : 2 * n])
    # force a fixed, plausible text after the prompt so every chunk sees the same tokens as the reference
    rng = np.random.default_rng(bucket)
    text = [int(t) for t in rng.integers(256, tiny_pack.special.eot, size=40)]
    tokens = prompt(tiny_pack) + text
    chunks = runner.plan(bucket, "default")
    seq, outputs = runner.greedy(enc, tokens[:1], chunks, forced_override=dict(enumerate(tokens)))
    assert seq[: len(tokens)] == tokens[: len(seq)]
    positions = len(seq) - 1  # tokens consumed: positions 0…positions-1
    logits, attentions = reference.decode(enc_ref, seq[:positions])
    eot = tiny_pack.special.eot
    got = {name: np.concatenate([o[name] for o in outputs], axis=3 if name.startswith("new_") else 0)
           for name in outputs[0]}
    # rows that a chunk batches with the next one predict nothing (their next token is given)
    predicted = np.concatenate([np.arange(size) >= tiny_pack.decoder_known(bucket, start, size) - 1
                                for start, size in chunks])
    assert predicted.sum() == positions - 3  # the first chunk batches the 4 prompt tokens
    text_logits = logits[predicted, :eot]
    np.testing.assert_array_equal(got["tokens"][predicted], text_logits.argmax(axis=1))
    np.testing.assert_array_equal(got["tokens"][~predicted], seq[1:4])
    assert np.abs(got["token_logit"][predicted] - text_logits.max(axis=1)).max() <= TOL
    assert np.abs(got["eot_logit"][predicted] - logits[predicted, eot]).max() <= TOL
    # log-sum-exp, no-speech and language logits: every predicting row and the SOT row of the batched head
    # (where Whisper reads its no-speech probability and the language); the other batched rows carry zeros
    reported = predicted | np.concatenate([np.arange(size) == 0 for _, size in chunks])
    assert reported.sum() == positions - 2
    wide = logits.astype(np.float64)
    lse = wide.max(axis=1) + np.log(np.exp(wide - wide.max(axis=1, keepdims=True)).sum(axis=1))
    assert np.abs(got["logsumexp"][reported] - lse[reported]).max() <= TOL
    assert np.abs(got["nospeech_logit"][reported] - logits[reported, tiny_pack.special.nospeech]).max() <= TOL
    lang_ids = list(tiny_pack.special.languages.values())
    assert got["lang_logits"].shape == (positions, 99)
    assert np.abs(got["lang_logits"][reported] - logits[reported][:, lang_ids]).max() <= TOL
    for name in ("logsumexp", "nospeech_logit", "lang_logits"):
        assert not got[name][~reported].any(), name
    last = attentions[-1].mean(axis=0)  # [S, n]
    assert np.abs(got["attn_last"][:, :n] - last).max() <= TOL
    align = np.mean([attentions[layer][head] for layer, head in tiny_pack.alignment_heads], axis=0)
    assert np.abs(got["attn_align"][:, :n] - align).max() <= TOL
    ref_k, ref_v = reference.self_kv(enc_ref, seq[:positions])
    assert got["new_k"].shape == ref_k.shape == (2, 1, 4, positions, 16)
    assert np.abs(got["new_k"] - ref_k).max() <= TOL
    assert np.abs(got["new_v"] - ref_v).max() <= TOL


@pytest.mark.parametrize("bucket", BUCKETS)
@pytest.mark.parametrize("schedule", ["default", "prefixed"])
def test_greedy_schedule_equals_transformers_greedy(tiny_pack, runner, reference, bucket, schedule):
    for seed in range(2):
        n = lengths(bucket)[seed + 1]
        mel = random_mel(tiny_pack.dims.n_mels, n, bucket, seed=1000 * bucket + seed)
        enc = runner.encode(mel, n, bucket)
        enc_ref = reference.encode(mel[:, :, : 2 * n])
        start = prompt(tiny_pack)
        if schedule == "prefixed":
            start = start + [int(t) for t in np.random.default_rng(seed).integers(256, 5000, size=2)]
        chunks = runner.plan(bucket, schedule)
        seq, _ = runner.greedy(enc, start, chunks)
        expected = reference.greedy(enc_ref, start, positions=len(seq) - 1)
        assert len(seq) == 31
        assert seq == expected, (bucket, schedule, seed)


@pytest.mark.parametrize("bucket", [3, 6, 10])
@pytest.mark.parametrize("schedule", ["default", "prefixed"])
def test_chunks_of_three_equal_transformers_greedy(chunk3_pack, chunk3_runner, reference, bucket, schedule):
    """A ``--chunk 3`` pack ([4,6,3,…], 31 positions) decodes what transformers decodes."""
    n = lengths(bucket)[2]
    mel = random_mel(chunk3_pack.dims.n_mels, n, bucket, seed=2000 + bucket)
    enc = chunk3_runner.encode(mel, n, bucket)
    start = prompt(chunk3_pack) + ([311, 4207] if schedule == "prefixed" else [])
    seq, _ = chunk3_runner.greedy(enc, start, chunk3_runner.plan(bucket, schedule))
    assert len(seq) == 32
    assert seq == reference.greedy(reference.encode(mel[:, :, : 2 * n]), start, positions=31)


def test_long_bucket_continues_to_224_positions(tiny_pack, runner, reference):
    bucket, n = 30, 1234
    mel = random_mel(tiny_pack.dims.n_mels, n, bucket, seed=7)
    enc = runner.encode(mel, n, bucket)
    chunks = runner.plan(bucket, "default", positions=tiny_pack.max_positions)
    assert chunks[-1] == (220, 5)
    seq, _ = runner.greedy(enc, prompt(tiny_pack), chunks)
    assert len(seq) == 226
    assert seq == reference.greedy(reference.encode(mel[:, :, : 2 * n]), prompt(tiny_pack), positions=225)


@pytest.mark.parametrize("bucket", [3, 30])
def test_padding_gets_no_attention_and_changes_nothing(tiny_pack, runner, bucket):
    n = lengths(bucket)[1]
    mel = random_mel(tiny_pack.dims.n_mels, n, bucket, seed=5)
    enc = runner.encode(mel, n, bucket)
    seq, outputs = runner.greedy(enc, prompt(tiny_pack), runner.plan(bucket, "default"))
    for out in outputs:
        assert out["attn_last"][:, n:].sum(axis=1).max() <= 1e-6
        assert out["attn_align"][:, n:].sum(axis=1).max() <= 1e-6
        np.testing.assert_allclose(out["attn_last"].sum(axis=1), 1.0, atol=1e-5)

    # Garbage in the padded mel frames and in the padded cross K/V: real-frame outputs unchanged.
    noisy = mel.copy()
    noisy[:, :, 2 * n :] = np.random.default_rng(9).normal(0, 3, noisy[:, :, 2 * n :].shape)
    enc_noisy = runner.encode(noisy, n, bucket)
    assert np.abs(enc_noisy.cross_k[..., :n] - enc.cross_k[..., :n]).max() <= 1e-6
    rng = np.random.default_rng(10)
    for name in ("cross_k", "cross_v"):  # padded K/V of a realistic scale but unrelated to the clean ones
        real = getattr(enc, name)[..., :n]
        getattr(enc_noisy, name)[..., n:] = rng.normal(0, 2 * real.std(), getattr(enc_noisy, name)[..., n:].shape)
    seq_noisy, outputs_noisy = runner.greedy(enc_noisy, prompt(tiny_pack), runner.plan(bucket, "default"))
    assert seq_noisy == seq
    for a, b in zip(outputs, outputs_noisy, strict=True):
        for name in ("token_logit", "eot_logit", "logsumexp", "nospeech_logit", "lang_logits", "attn_last",
                     "attn_align", "new_k", "new_v"):
            assert np.abs(a[name] - b[name]).max() <= 1e-6, name
