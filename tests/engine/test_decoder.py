"""Controlled unrolling (:mod:`captioner.engine.decoder`): forcing, early stop, attention attribution."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import bump, make_vocab

from captioner.engine.decoder import NativeValidator, decode_round, max_prefix
from captioner.engine.model import ChunkOutput, Encoding
from captioner.engine.validate import RoundValidator

V = make_vocab()
VOCAB = V.vocab
PROMPT = VOCAB.prompt()
FRAMES = 150  # a 3 s input


class ScriptedRunner:
    """Predicts ``script[q]`` for generated token q (a garbage token with EOT winning at ``eot_at``
    and past the script's end; EOT winning over the real token at ``eot_real``) and
    reports, for the step consuming position p, an attention bump at frame ``3 p``."""

    def __init__(self, model: ScriptedModel):
        self.model = model
        self.consumed: list[int] = []

    def run(self, start, size, token, forced):
        m = self.model
        assert start == len(self.consumed)
        m.calls.append((start, size, int(token), forced.tolist()))
        tokens, eot = np.zeros(size, np.int64), np.zeros(size, np.float32)
        attn = np.zeros((size, FRAMES), np.float32)
        for s in range(size):
            p = start + s
            self.consumed.append(token if s == 0 else (int(forced[s - 1]) if forced[s - 1] >= 0 else int(tokens[s - 1])))
            attn[s] = bump(3 * p, FRAMES)
            q = p + 1 - m.gen_start
            if 0 <= q < len(m.script):
                tokens[s], eot[s] = m.script[q], 0.0
            else:
                tokens[s], eot[s] = V.punct[0], 2.0
            if q in m.eot_at:  # EOT wins with a garbage runner-up
                tokens[s], eot[s] = V.punct[0], 2.0
            elif q in m.eot_real:  # EOT wins, the runner-up is a real word
                eot[s] = 2.0
        lse = None if m.lse is None else np.full(size, m.lse, np.float32)
        return ChunkOutput(tokens, np.ones(size, np.float32), eot, attn, attn * 2, elapsed_ms=1.5, logsumexp=lse)


class ScriptedModel:
    vocab = VOCAB
    provider = "test"
    buckets = (3, 30)

    def __init__(self, script, gen_start, eot_at=(), eot_real=(), lse=None):
        self.script, self.gen_start, self.eot_at, self.eot_real = list(script), gen_start, set(eot_at), set(eot_real)
        self.lse = lse  # the log-sum-exp every step reports (None: not reported, as the oracle)
        self.calls: list[tuple] = []

    def chunk_plan(self, bucket, prefixed):
        sizes = [6, 4, 5, 5, 5, 5] if prefixed else [4, 6, 5, 5, 5, 5]
        if bucket == 30:
            sizes += [5] * 38 + [4]
        starts = np.cumsum([0, *sizes[:-1]])
        return tuple(zip(starts.tolist(), sizes, strict=True))

    def encode(self, audio, *, native_30s=False):
        raise AssertionError("not used")

    def decoder(self, encoding):
        return ScriptedRunner(self)


def encoding(bucket=3):
    return Encoding(bucket, FRAMES, 50 * bucket)


def words(n):
    return [V.word[i] for i in range(n)]


def test_prompt_and_prefix_are_forced_then_the_model_decodes():
    prefix = [V.word[100], V.subword[0]]
    m = ScriptedModel(words(30), gen_start=6, eot_at={3})
    res = decode_round(m, encoding(), PROMPT, prefix, RoundValidator(VOCAB, input_s=3.0))
    assert m.calls[0] == (0, 6, PROMPT[0], [*PROMPT[1:], *prefix])
    assert m.calls[1] == (6, 4, V.word[0], [-1, -1, -1])  # token input = the first generated token
    assert res.tokens == tuple(words(3)) and res.stop_reason == "eot" and res.candidates == tuple(words(3))


def test_a_prefix_longer_than_the_first_chunk_is_forced_through_the_token_input():
    prefix = [V.word[100], V.subword[0], V.subword[1]]  # positions 4, 5, 6: position 6 starts chunk 2
    m = ScriptedModel(words(30), gen_start=7, eot_at={2})
    res = decode_round(m, encoding(), PROMPT, prefix, RoundValidator(VOCAB, input_s=3.0))
    assert m.calls[1] == (6, 4, V.subword[1], [-1, -1, -1])
    assert res.tokens == tuple(words(2))


def test_early_stop_skips_the_remaining_chunks():
    m = ScriptedModel(words(30), gen_start=4, eot_at={2})
    res = decode_round(m, encoding(), PROMPT, [], RoundValidator(VOCAB, input_s=3.0))
    # generated positions 4, 5 (chunk (4,6) predicts 5..10): EOT at position 6 stops after chunk 2
    assert res.chunks == 2 == len(m.calls) and res.stop.reason == "eot"
    assert res.decoder_ms == pytest.approx(3.0) and res.validation_ms >= 0.0


def test_attention_comes_from_the_step_that_consumes_the_token():
    m = ScriptedModel(words(30), gen_start=4, eot_at={5})
    res = decode_round(m, encoding(), PROMPT, [], RoundValidator(VOCAB, input_s=3.0))
    # token k sits at position 4 + k and is consumed there: its bump is at frame 3 (4 + k)
    assert res.attn_align.shape == (5, FRAMES)
    assert [int(np.argmax(r)) for r in res.attn_align] == [3 * (4 + k) for k in range(5)]
    np.testing.assert_allclose(res.attn_align[0], 2 * bump(12, FRAMES))  # attn_align, not attn_last


def test_the_plans_last_prediction_has_no_attention_and_is_dropped():
    m = ScriptedModel(words(40), gen_start=4)
    res = decode_round(m, encoding(), PROMPT, [], RoundValidator(VOCAB, input_s=3.0, peak_margin_s=0.0))
    # 30 positions consumed (0..29): generated positions 4..29 have attention; position 30 has none
    assert res.chunks == 6 and res.stop is None and res.stop_reason == "limit"
    assert res.tokens == tuple(words(26)) and res.candidates == res.tokens


def test_token_limit():
    m = ScriptedModel(words(40), gen_start=4)
    res = decode_round(m, encoding(), PROMPT, [], RoundValidator(VOCAB, input_s=3.0, peak_margin_s=0.0), max_tokens=3)
    # the third token's attention comes from chunk (4, 6), which also predicts a fourth: dropped
    assert res.tokens == tuple(words(3)) and res.chunks == 2 and res.stop is None


def test_a_stop_inside_a_chunk_discards_the_rest_of_it():
    script = [*words(3), V.word[3], V.word[3], V.word[3], *words(10)]
    m = ScriptedModel(script, gen_start=4)
    res = decode_round(m, encoding(), PROMPT, [], RoundValidator(VOCAB, input_s=3.0))
    assert res.stop.reason == "repetition" and res.candidates == tuple(words(3))
    assert res.chunks == 2


def test_native_decode_refuses_eot_before_the_floor():
    m = ScriptedModel(words(40), gen_start=4, eot_real=set(range(1, 40)))  # EOT wins from token 1 on
    res = decode_round(m, encoding(30), PROMPT, [], NativeValidator(4.0))
    assert res.tokens == tuple(words(6)) and res.stop.reason == "eot"  # floor(1.5 × 4 s) = 6


def test_max_prefix_leaves_the_first_two_chunks_to_the_prompt():
    assert max_prefix(ScriptedModel([], 4), 3, len(PROMPT)) == 6


def test_the_decode_reports_whisper_average_log_probability():
    # every token's logit 1 and EOT's 2 against a log-sum-exp of 3: token log-probability −2, EOT's −1
    m = ScriptedModel(words(30), gen_start=6, eot_at={3}, lse=3.0)
    res = decode_round(m, encoding(), PROMPT, [V.word[100], V.subword[0]], RoundValidator(VOCAB, input_s=3.0))
    assert res.logprobs == (-2.0, -2.0, -2.0) and res.eot_logprob == -1.0
    assert res.avg_logprob == pytest.approx((3 * -2.0 - 1.0) / 4)  # openai/whisper: over the tokens + 1 (EOT)
    # a guard stop: the candidates before it, no EOT
    script = [*words(3), V.word[3], V.word[3], V.word[3], *words(10)]
    res = decode_round(ScriptedModel(script, gen_start=4, lse=3.0), encoding(), PROMPT, [],
                       RoundValidator(VOCAB, input_s=3.0))
    assert res.stop.reason == "repetition" and res.eot_logprob is None
    assert res.avg_logprob == pytest.approx(3 * -2.0 / 4)
    # a model that reports no log-sum-exp (the policy tests' oracle): unknown
    res = decode_round(ScriptedModel(words(30), gen_start=4, eot_at={3}), encoding(), PROMPT, [],
                       RoundValidator(VOCAB, input_s=3.0))
    assert res.logprobs == () and res.avg_logprob is None
