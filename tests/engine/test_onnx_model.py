"""The real AcousticModel over the tiny pack, against transformers' Whisper on the same checkpoint."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from whisper_reference import hf_encode, hf_greedy, load_reference

from captioner.engine.features import log_mel
from captioner.engine.model import SAMPLES_PER_FRAME
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.runtime import Runtime


@pytest.fixture(scope="module")
def model(tiny_pack, tmp_path_factory) -> OnnxAcousticModel:
    m = OnnxAcousticModel(tiny_pack, Runtime(tiny_pack, "cpu", cache_dir=tmp_path_factory.mktemp("cache")))
    yield m
    m.close()


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    return load_reference(tiny_checkpoint)


def _audio(seconds: float, seed: int) -> np.ndarray:
    n = int(seconds * 16000) // SAMPLES_PER_FRAME * SAMPLES_PER_FRAME
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    return (0.2 * np.sin(2 * np.pi * 220 * t * (1 + t)) + 0.05 * rng.standard_normal(n)).astype(np.float32)


def _prompt(model: OnnxAcousticModel) -> list[int]:
    sp = model.pack.special
    return [sp.sot, sp.languages["en"], sp.transcribe, sp.notimestamps]


def _run_chain(model, enc, sequence: list[int], prefixed: bool = False, limit: int | None = None):
    """Run every chunk of the plan, forcing ``sequence`` where it has a token; returns outputs and the
    sequence extended with the model's choices."""
    seq = list(sequence)
    outputs = []
    run = model.decoder(enc)
    for start, size in model.chunk_plan(enc.bucket, prefixed)[:limit]:
        forced = np.array([seq[p] if p < len(seq) else -1 for p in range(start + 1, start + size)], np.int64)
        out = run.run(start, size, seq[start], forced)
        for s in range(size):
            if start + s + 1 >= len(seq):
                seq.append(int(out.tokens[s]))
        outputs.append(out)
    return outputs, seq


def test_chunk_plans_follow_the_pack(model) -> None:
    assert model.chunk_plan(3, False) == ((0, 4), (4, 6), (10, 5), (15, 5), (20, 5), (25, 5))
    assert model.chunk_plan(6, True) == ((0, 5), (5, 5), (10, 5), (15, 5), (20, 5), (25, 5))
    long = model.chunk_plan(30, False)
    assert model.chunk_plan(10, False) == long  # long inputs (speculative rounds) may hold more words
    assert long[:6] == model.chunk_plan(3, False)
    assert long[6] == (30, 5) and long[-1] == (220, 5)
    assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(long))


def test_bucket_choice(model) -> None:
    assert model.bucket_for(16000) == 3
    assert model.bucket_for(48000) == 3
    assert model.bucket_for(48320) == 4
    assert model.bucket_for(6 * 16000 + 320) == 10
    assert model.bucket_for(10 * 16000 + 320) == 20
    assert model.bucket_for(20 * 16000 + 320) == 30
    with pytest.raises(ValueError, match="exceed"):
        model.bucket_for(30 * 16000 + 320)
    with pytest.raises(ValueError, match="20 ms"):
        model.encode(np.zeros(1000, np.float32))


def test_greedy_round_equals_transformers(model, reference) -> None:
    """Greedy along the default schedule (30 positions) = transformers' greedy with ids ≥ EOT suppressed."""
    audio = _audio(4.2, 0)
    enc = model.encode(audio)
    assert (enc.bucket, enc.n_frames, enc.total_frames) == (5, 210, 250)
    outputs, seq = _run_chain(model, enc, _prompt(model))
    ref = hf_greedy(reference, log_mel(audio)[:, : 2 * enc.n_frames], _prompt(model), 30, model.pack.special.eot)
    assert seq[4:] == ref
    assert all(o.attn_last.shape == (len(o.tokens), 210) for o in outputs)


@pytest.mark.parametrize(("seconds", "prefixed"), [(2.5, False), (5.9, True)])
def test_teacher_forced_outputs_equal_transformers(model, reference, seconds: float, prefixed: bool) -> None:
    """With every position forced to random text tokens, each step's argmax, logits and last-layer
    cross-attention (mean over heads, cropped to real frames) match transformers at every position."""
    audio = _audio(seconds, 1)
    enc = model.encode(audio)
    rng = np.random.default_rng(2)
    eot = model.pack.special.eot
    seq = _prompt(model) + [int(t) for t in rng.integers(0, eot, 27)]
    outputs, _ = _run_chain(model, enc, seq, prefixed)
    plan = model.chunk_plan(enc.bucket, prefixed)
    # the first chunk batches the given prompt (and prefix) tokens and predicts only after the last
    predicted = np.concatenate([np.arange(size) >= model.pack.decoder_known(enc.bucket, start, size) - 1
                                for start, size in plan])
    assert (~predicted).sum() == (4 if prefixed else 3)
    tokens = np.concatenate([o.tokens for o in outputs])
    np.testing.assert_array_equal(tokens[~predicted], seq[1 : 1 + (~predicted).sum()])
    tokens = tokens[predicted]
    token_logit = np.concatenate([o.token_logit for o in outputs])[predicted]
    eot_logit = np.concatenate([o.eot_logit for o in outputs])[predicted]
    attn = np.concatenate([o.attn_last for o in outputs])

    hidden = hf_encode(reference, log_mel(audio)[:, : 2 * enc.n_frames])
    with torch.no_grad():
        out = reference.model.decoder(input_ids=torch.tensor([seq[:30]]), encoder_hidden_states=hidden,
                                      output_attentions=True)
        logits = reference.proj_out(out.last_hidden_state[0]).numpy()  # [30, V]
    ref_attn = out.cross_attentions[-1][0].mean(0).numpy()  # [30, frames]
    np.testing.assert_array_equal(tokens, logits[predicted, :eot].argmax(-1))
    np.testing.assert_allclose(token_logit, logits[predicted, :eot].max(-1), atol=2e-3)
    np.testing.assert_allclose(eot_logit, logits[predicted, eot], atol=2e-3)
    np.testing.assert_allclose(attn, ref_attn, atol=1e-4)


def test_kv_cache_is_not_reallocated_per_chunk(model) -> None:
    """One fixed cache for the round: each chunk's K/V land in their slots in place and open the mask."""
    enc = model.encode(_audio(3.0, 3))
    run = model.decoder(enc)
    slots = model.pack.cache_slots[3]
    buffers = (run._k.ctypes.data, run._v.ctypes.data, run._self_mask.ctypes.data)
    seq = _prompt(model)
    for start, size in model.chunk_plan(3, False)[:3]:
        forced = np.array([seq[p] if p < len(seq) else -1 for p in range(start + 1, start + size)], np.int64)
        out = run.run(start, size, seq[min(start, len(seq) - 1)], forced)
        seq += [int(t) for t in out.tokens[max(0, len(seq) - 1 - start):]]
        assert run._k.shape[3] == slots and run._k.flags.c_contiguous
        assert (run._self_mask[: start + size] == 0).all() and (run._self_mask[start + size:] == -100).all()
        assert np.abs(run._k[:, :, :, start : start + size]).max() > 0
        assert not run._k[:, :, :, start + size :].any()
    assert (run._k.ctypes.data, run._v.ctypes.data, run._self_mask.ctypes.data) == buffers
    with pytest.raises(ValueError, match="consumed"):
        run.run(0, 4, seq[0], np.full(3, -1, np.int64))
    fresh = model.decoder(enc)
    with pytest.raises(ValueError, match="must be given"):  # the prompt chunk cannot guess its tokens
        fresh.run(0, 4, seq[0], np.array([seq[1], -1, -1], np.int64))


def test_rounds_reuse_the_kv_cache_and_start_it_empty(model, reference) -> None:
    """No KV allocation per round: the next round (any bucket with the same cache size) gets the same
    arrays, emptied, and decodes exactly what a never-used cache gives; other threads get their own."""
    import threading

    first = model.encode(_audio(5.5, 4))
    _run_chain(model, first, _prompt(model))  # fills slots of the 25-slot cache
    used = model.decoder(first)
    buffers = (used._k.ctypes.data, used._v.ctypes.data, used._self_mask.ctypes.data)
    assert not used._k.any() and not used._v.any() and (used._self_mask == -100).all()
    audio = _audio(4.2, 0)
    enc = model.encode(audio)  # another bucket (5 s), the same cache size
    _, seq = _run_chain(model, enc, _prompt(model))
    ref = hf_greedy(reference, log_mel(audio)[:, : 2 * enc.n_frames], _prompt(model), 30, model.pack.special.eot)
    assert seq[4:] == ref
    again = model.decoder(enc)
    assert (again._k.ctypes.data, again._v.ctypes.data, again._self_mask.ctypes.data) == buffers
    with pytest.raises(RuntimeError, match="superseded"):  # an older runner would write into its cache
        used.run(0, 4, seq[0], np.array(seq[1:4], np.int64))
    other: list[int] = []
    worker = threading.Thread(target=lambda: other.append(model.decoder(enc)._k.ctypes.data))
    worker.start()
    worker.join()
    assert other and other[0] != buffers[0]


def test_native_30s_encoding(model) -> None:
    audio = _audio(7.0, 4)
    enc = model.encode(audio, native_30s=True)
    assert (enc.bucket, enc.n_frames, enc.total_frames, enc.native_30s) == (30, 1500, 1500, True)
    _cross_k, _, mask = enc.payload
    assert not mask.any()
    outputs, _ = _run_chain(model, enc, _prompt(model), limit=2)
    assert outputs[0].attn_last.shape == (4, 1500)
    assert enc.mel_ms > 0 and enc.encoder_ms > 0


def test_the_heap_is_trimmed_before_the_longest_bucket_only(model, monkeypatch) -> None:
    """A 30 s run's buffers do not fit the holes short rounds leave (runtime docstring, 'Heap')."""
    from captioner.engine import onnx_model

    calls = []
    monkeypatch.setattr(onnx_model, "release_free_heap", lambda: calls.append(1) or True)
    model.encode(_audio(3.0, 5))
    model.encode(_audio(6.0, 5))
    assert calls == []
    model.encode(_audio(8.0, 5))  # a speculative round in the 10 s bucket: small buffers
    assert calls == []
    model.encode(_audio(12.0, 5))  # a speculative round longer than 10 s: the 20 s bucket
    assert calls == []
    model.encode(_audio(22.0, 5))  # longer than 20 s
    model.encode(_audio(2.0, 5), native_30s=True)  # a re-inference
    assert len(calls) == 2
