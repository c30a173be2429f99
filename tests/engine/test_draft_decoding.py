"""Draft decoding (``engine/decoder.py``): a closing round, and a live round that revises an open
utterance's drafts, proposes the draft words to the pack's verifier graph of its cache. On the real tiny.en and real speech: the verifier's rows are the sequential chunks'
predictions, and decoding with any draft (right, wrong, shifted, truncated, garbage) gives exactly
the greedy decode's tokens, with fewer step-equivalents of decoder work when the draft is good.
"""

from __future__ import annotations

import numpy as np
import pytest
from speech_clips import CLIPS, DATA

from captioner.audio import load_audio_file
from captioner.core import SAMPLE_RATE as SR
from captioner.engine import OnnxAcousticModel
from captioner.engine.decoder import NativeValidator, decode_round


def _attention_tolerance(model: OnnxAcousticModel) -> float:
    """How far a verifier row's alignment attention may be from the sequential step's (probabilities
    over frames). fp32 layers: float rounding only. int8 layers: a row batched with others differs
    from the same row alone by float rounding, which can move one activation across an 8-bit step
    (seen: 0.003); the DTW over these rows cannot move a word for that, and the tokens stay equal."""
    return 1e-4 if model.pack.layers == "fp32" else 1e-2


_LOGPROB_TOLERANCE = 0.3  # log-sum-exp of a batched row against a sequential one: with the int8-ranked
# vocabulary projection it is the int8 estimate of the row (seen: up to 0.23 apart); a decode's average
# log-probability differs far less (_AVG_TOLERANCE)
_AVG_TOLERANCE = 0.05


class Counting:
    """The real model with a count of its decoder dispatches (verifier vs sequential chunks)."""

    def __init__(self, model: OnnxAcousticModel) -> None:
        self.model = model
        self.calls: list[tuple[str, int]] = []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def decoder(self, encoding):
        runner = self.model.decoder(encoding)
        calls = self.calls
        run, verify = runner.run, runner.verify

        def counted_run(start, size, token, forced):
            calls.append(("run", size))
            return run(start, size, token, forced)

        def counted_verify(start, token, proposal):
            calls.append(("verify", len(proposal) + 1))
            return verify(start, token, proposal)

        runner.run, runner.verify = counted_run, counted_verify
        return runner


@pytest.fixture(scope="module")
def model(tiny_en) -> OnnxAcousticModel:
    return tiny_en


@pytest.fixture(scope="module")
def closing(closing_inputs):
    return closing_inputs


def decode(model, encoding, input_s, draft=()):
    prompt = model.vocab.prompt("en", "transcribe")
    return decode_round(model, encoding, prompt, (), NativeValidator(input_s, model.vocab), 224, draft)


def test_every_cache_has_a_verifier(real_tiny_en_pack) -> None:
    path, size = real_tiny_en_pack.verifier(20)
    assert path.name == "decoder_s220_k5_j5_v.onnx" and size == 5 and real_tiny_en_pack.verifier(10)[0] == path
    path, size = real_tiny_en_pack.verifier(3)  # the live rounds' buckets: opening and reaching-back rounds
    assert path.name == "decoder_s25_k5_j5_v.onnx" and size == 5 and real_tiny_en_pack.verifier(6)[0] == path


def test_verifier_rows_are_the_sequential_predictions(model, closing) -> None:
    encoding, input_s = closing[1]
    greedy = decode(model, encoding, input_s)
    tokens = list(greedy.tokens)
    assert len(tokens) > 8
    prompt = list(model.vocab.prompt("en", "transcribe"))
    seq = prompt + tokens
    runner = model.decoder(encoding)
    plan = model.chunk_plan(encoding.bucket, prefixed=False)
    size = plan[0][1]
    forced = [seq[q] if q < len(prompt) else -1 for q in range(1, size)]
    head = runner.run(0, size, seq[0], np.array(forced, np.int64))
    assert [int(t) for t in head.tokens[len(prompt) - 1 :]] == seq[len(prompt) : size + 1]
    pos = size
    out = runner.verify(pos, seq[pos], np.array(seq[pos + 1 : pos + 5], np.int64))
    assert [int(t) for t in out.tokens] == seq[pos + 1 : pos + 6]
    # the same positions by the sequential chunk, after forgetting them
    runner.rewind(pos)
    seq_out = runner.run(pos, 6, seq[pos], np.full(5, -1, np.int64))
    assert [int(t) for t in seq_out.tokens[:5]] == seq[pos + 1 : pos + 6]
    assert np.abs(out.token_logit - seq_out.token_logit[:5]).max() < 1e-3
    assert np.abs(out.logsumexp - seq_out.logsumexp[:5]).max() < _LOGPROB_TOLERANCE
    assert np.abs(out.attn_align - seq_out.attn_align[:5]).max() < _attention_tolerance(model)


def test_clean_speech_decodes_with_a_high_average_log_probability(model, closing) -> None:
    """Whisper's own confidence on the real clips it transcribes well: every token's log-probability
    is at most ~0 and the decode's average is above −1 (the closing retry's floor, stream.py)."""
    for encoding, input_s in closing:
        result = decode(model, encoding, input_s)
        assert result.stop_reason == "eot" and len(result.logprobs) == len(result.tokens)
        assert max(result.logprobs) < _LOGPROB_TOLERANCE  # the int8 projection's log-sum-exp is an estimate
        assert -1.0 < result.avg_logprob < 0.0


@pytest.mark.parametrize("index", range(len(CLIPS)))
def test_any_draft_gives_the_greedy_tokens(model, closing, index) -> None:
    encoding, input_s = closing[index]
    greedy = decode(model, encoding, input_s)
    tokens = list(greedy.tokens)
    rng = np.random.default_rng(index)
    mid = len(tokens) // 2
    drafts = {
        "right": tokens,
        "truncated": tokens[: mid],
        "substituted": [*tokens[:mid], tokens[mid] + 1, *tokens[mid + 1:]],
        "inserted": [*tokens[:mid], 13, *tokens[mid:]],
        "deleted": tokens[:mid] + tokens[mid + 1 :],
        "garbage": [int(t) for t in rng.integers(300, 40000, size=len(tokens))],
    }
    for name, draft in drafts.items():
        counting = Counting(model)
        result = decode(counting, encoding, input_s, draft)
        assert list(result.tokens) == tokens, name
        assert result.stop_reason == greedy.stop_reason, name
        assert result.attn_align.shape == greedy.attn_align.shape
        assert np.abs(result.attn_align - greedy.attn_align).max() < _attention_tolerance(model), name
        # the log-probabilities too (a verifier row's log-sum-exp is the sequential step's)
        assert len(result.logprobs) == len(tokens) and result.eot_logprob is not None, name
        assert np.abs(np.subtract(result.logprobs, greedy.logprobs)).max() < _LOGPROB_TOLERANCE, name
        assert abs(result.avg_logprob - greedy.avg_logprob) < _AVG_TOLERANCE, name
        if name == "right":
            # the draft confirmed whole: after the head (which predicts the first tokens of an English-only
            # prompt itself), a verifier dispatch per 5 tokens and no sequential chunk
            head = model.chunk_plan(encoding.bucket, prefixed=False)[0][1] - len(model.vocab.prompt("en", "transcribe")) + 1
            assert result.drafted >= len(tokens) - head - 1
            assert sum(kind == "verify" for kind, _ in counting.calls) <= len(tokens) // 5 + 2
            assert sum(kind == "run" for kind, _ in counting.calls) == 1  # the prompt's batched head


def test_a_revising_live_round_checks_its_drafts_with_the_short_caches_verifier(model) -> None:
    """An opening round (the first seconds of an utterance, heard with silence to 6 s: a short
    bucket) decodes its drafts again: they are proposed to the short cache's verifier, which gives
    the greedy tokens in fewer sequential chunks."""
    audio = max((load_audio_file(DATA / clip["audio"]) for clip in CLIPS), key=len)[: 4 * SR]
    assert audio.size == 4 * SR
    encoding = model.encode(np.concatenate([audio, np.zeros(2 * SR, np.float32)]))
    assert encoding.bucket == 6 and model.pack.verifier(6) is not None
    greedy = decode(model, encoding, 6.0)
    tokens = list(greedy.tokens)
    assert len(tokens) >= 8
    plain, drafted = Counting(model), Counting(model)
    assert list(decode(plain, encoding, 6.0).tokens) == tokens
    result = decode(drafted, encoding, 6.0, tokens)
    assert list(result.tokens) == tokens and result.stop_reason == greedy.stop_reason
    assert np.abs(np.subtract(result.logprobs, greedy.logprobs)).max() < _LOGPROB_TOLERANCE
    assert result.drafted >= len(tokens) // 2 and any(kind == "verify" for kind, _ in drafted.calls)
    sequential = [size for kind, size in drafted.calls if kind == "run"]
    assert len(sequential) < sum(kind == "run" for kind, _ in plain.calls)
