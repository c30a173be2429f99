"""Controlled unrolling: one round's greedy decode as a chain of chunk graphs with early stop.

The decoder walks the model's chunk plan (e.g. ``[4,6,5,5,5,5]`` or, with a carried prefix,
``[5,5,5,5,5,5]``; NPUSPER.md §14.2 has ``[6,4,…]``; see ``BuildOptions``), forcing the prompt and the prefix positions through the
``forced`` input (and the ``token`` input of a chunk that starts on a forced position). After
**each** chunk it hands the chunk's steps to a validator in the reference's order — the attention of
the consumed token first (it belongs to the token that step consumed, §5), then the EOT rule on the
predicted one — and stops dispatching as soon as a stop condition fires: the chunks that are not
run are the saving the design is about.

The plan is finite (~30 positions, or 224 for the 10 s and 30 s buckets). The last token predicted by the plan
is never consumed, so it has no attention and cannot be validated: it is dropped, and the round
ends as if it had reached the token limit there (``stop is None``; the stream calls it "limit").

**Draft decoding** (``draft``: tokens the round is expected to produce: a closing round's draft
words, ``stream.py`` deviation 17, or the drafts an opening or reaching-back live round decodes
again, deviation 20): past the forced positions, where the pack has a verifier
for the bucket (:class:`~captioner.engine.model.VerifyingRunner`), the next K − 1 draft tokens are
proposed and checked in one batched dispatch: every row predicts, the predictions are accepted up
to the first that differs from the proposal, and the cache positions after it are forgotten. Out
of step with the draft (after a correction), the decoder runs the plan's sequential chunk and
looks for its last two tokens in the draft to resume. The tokens are the greedy decode's (the same
argmax at every position, up to floating-point differences between a batched and a sequential
step); the cost of K tokens the draft had right is about one step instead of K (a CPU step
streams all the decoder's weights, whatever the rows). Prompt-lookup decoding, with the earlier
rounds of the utterance as the lookup text.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from captioner.engine.model import AcousticModel, ChunkOutput, Encoding, VerifyingRunner
from captioner.engine.validate import Stop, WordGuard

__all__ = ["DecodeResult", "NativeValidator", "TokenValidator", "decode_round", "forced_ids", "max_prefix", "round_plan"]

logger = logging.getLogger(__name__)

_PREFIXED_HEAD = 5  # the prefixed schedule's first chunk batches this many given tokens
_TOKENS_PER_S_FLOOR = 1.5  # re-inference: EOT is refused before floor(1.5 × seconds) tokens (§11.3)


class TokenValidator(Protocol):
    """What :func:`decode_round` feeds (see :class:`captioner.engine.validate.RoundValidator`)."""

    decoded: list[int]
    checked: int
    last_peak_s: float  # f+ of the last passed backward-shift test, seconds (0 if none)

    def on_prediction(self, token: int, token_logit: float, eot_logit: float) -> Stop | None: ...

    def on_attention(self, attn_last: np.ndarray) -> Stop | None: ...

    def close(self) -> Stop | None: ...

    # optional: ``on_alignment(attn_align)``, the alignment heads' attention [n_frames] of the same
    # token, given just before ``on_attention`` (:class:`~captioner.engine.validate.RoundValidator`)


class NativeValidator:
    """The 30 s re-inference decode (NPUSPER.md §11.3): greedy without the attention tests; EOT
    ends it only once at least ``floor(1.5 × input_s)`` tokens were decoded (before that the best
    ordinary token is taken instead). The word guards (phrase repetition, sound annotations;
    :class:`~captioner.engine.validate.WordGuard`) apply, since this is where greedy loops."""

    def __init__(self, input_s: float, vocab=None):
        self.min_tokens = math.floor(_TOKENS_PER_S_FLOOR * input_s)
        self.decoded: list[int] = []
        self.checked = 0
        self.last_peak_s = 0.0
        self.stop: Stop | None = None
        self._words = WordGuard(vocab) if vocab is not None else None

    def on_prediction(self, token: int, token_logit: float, eot_logit: float) -> Stop | None:
        """EOT wins and the floor is reached → stop "eot"; a guard fires → its stop; otherwise keep
        ``token``."""
        ends = eot_logit > token_logit and len(self.decoded) >= self.min_tokens
        if self.stop is None and self._words is not None:
            self.stop = self._words.on_token(self.decoded, None if ends else int(token))
        if self.stop is None and ends:
            self.stop = Stop("eot", len(self.decoded))
        if self.stop is None:
            self.decoded.append(int(token))
        return self.stop

    def close(self) -> Stop | None:
        """The plan ran out: check the last word."""
        if self.stop is None and self._words is not None:
            self.stop = self._words.on_token(self.decoded[: self.checked], None)
        return self.stop

    def on_attention(self, attn_last: np.ndarray) -> Stop | None:
        """No test; just counts the token as checked."""
        self.checked += 1
        return self.stop


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """One round's decode.

    Attributes:
        tokens: generated tokens that were validated (forced prefix excluded).
        attn_align: float32 [len(tokens), n_frames], alignment-head attention per token (DTW).
        stop: the stop condition, or None when the plan ran out ("limit").
        chunks: chunk graphs dispatched.
        decoder_ms: summed ``elapsed_ms`` of the chunks.
        validation_ms: host time spent in the validator.
        last_peak_s: f+ of the last passed backward-shift test (seconds; 0 if none).
        drafted: tokens accepted from the draft by verifier dispatches.
        logprobs: float [len(tokens)], each token's log-probability (its logit less the step's
            log-sum-exp over the vocabulary); empty when the model reports no log-sum-exp.
        eot_logprob: EOT's log-probability at the step where EOT ended the decode; None otherwise.
    """

    tokens: tuple[int, ...]
    attn_align: np.ndarray
    stop: Stop | None
    chunks: int
    decoder_ms: float
    validation_ms: float
    last_peak_s: float = 0.0
    drafted: int = 0
    logprobs: tuple[float, ...] = ()
    eot_logprob: float | None = None

    @property
    def candidates(self) -> tuple[int, ...]:
        """The tokens before the stop index (all validated tokens at the limit) (§11.1)."""
        return self.tokens if self.stop is None else self.tokens[: self.stop.index]

    @property
    def stop_reason(self) -> str:
        """The stop reason, ``"limit"`` when the plan ran out."""
        return "limit" if self.stop is None else self.stop.reason

    @property
    def avg_logprob(self) -> float | None:
        """Whisper's average log-probability of the decode (openai/whisper and faster-whisper judge
        a decode by it: below −1 it likely failed): the candidates' log-probabilities plus EOT's
        when EOT ended it, over the candidates + 1. None when the log-probabilities are unknown.
        With the int8 vocabulary projection the log-sum-exp is the int8 estimate (within ~0.5; up to
        ~0.75 where the weights are fitted to a saturating u8×s8 kernel, :mod:`~captioner.engine.int8_kernel`)."""
        n = len(self.candidates)
        if len(self.logprobs) < n or (n == 0 and self.eot_logprob is None):
            return None
        eot = self.eot_logprob if self.stop_reason == "eot" and self.eot_logprob is not None else 0.0
        total = sum(self.logprobs[:n]) + eot
        return total / (n + 1)


def max_prefix(model: AcousticModel, bucket: int, prompt_len: int) -> int:
    """Longest prefix the prefixed plan can force while leaving room to decode: the prompt and
    prefix must fit in the plan's first two chunks (10 positions in the paper's schedule)."""
    plan = model.chunk_plan(bucket, prefixed=True)
    head = sum(size for _, size in plan[:2]) if len(plan) >= 2 else sum(size for _, size in plan)
    return max(0, head - prompt_len)


def decode_round(
    model: AcousticModel,
    encoding: Encoding,
    prompt: Sequence[int],
    prefix: Sequence[int],
    validator: TokenValidator,
    max_tokens: int = 224,
    draft: Sequence[int] = (),
    context: Sequence[int] = (),
) -> DecodeResult:
    """Run the chunk plan over ``encoding`` until ``validator`` stops it or the plan ends.

    Args:
        model: the acoustic model.
        encoding: this round's encoder output.
        prompt: ``[SOT, lang, task, notimestamps]`` (or the English-only two tokens).
        prefix: forced tokens after the prompt (the carried second-to-last word), possibly empty.
        validator: receives every generated token; its ``decoded`` list is the round's tokens.
        max_tokens: generated-token limit of a round (the reference's 224); the plan may end sooner.
        draft: the tokens the round is expected to decode (after the prefix), checked by the
            pack's verifier where it has one (module docstring); empty: plain greedy chunks.
        context: Whisper's previous context before the prompt (``<|startofprev|>`` and the user's
            vocabulary, :mod:`~captioner.engine.vocabulary`): forced like the prompt, run with the
            prefixed schedule (its head batches 5 given tokens) and, where the bucket has a
            verifier, 5 given tokens per dispatch; empty: exactly the decode without one.

    Returns:
        The validated tokens, their alignment attention, the stop and the costs.
    """
    seq = [int(t) for t in (*context, *prompt, *prefix)]
    n_forced = len(seq)
    runner = model.decoder(encoding)
    plan = round_plan(model, encoding.bucket, bool(prefix), n_forced)
    batcher = runner if context and isinstance(runner, VerifyingRunner) and runner.verify_size > 1 else None
    align_rows: list[np.ndarray] = []
    chunks = 0
    decoder_ms = validation_ms = 0.0
    stop: Stop | None = None
    verifier = runner if draft and isinstance(runner, VerifyingRunner) and runner.verify_size > 1 else None
    drafted = 0
    scores = _Scores()
    note_alignment = _alignment_reader(validator)
    for start, size in plan:
        if verifier is not None and start >= n_forced and start == len(seq) - 1:
            limit = plan[-1][0] + plan[-1][1]
            d = _decode_with_draft(verifier, seq, start, limit, plan[-1][1], list(draft), n_forced, validator,
                                   max_tokens, align_rows, scores)
            stop, chunks, decoder_ms, validation_ms, drafted = (d.stop, chunks + d.chunks, decoder_ms + d.decoder_ms,
                                                                validation_ms + d.validation_ms, d.drafted)
            break
        if start >= len(seq):  # cannot happen with a consistent plan; never guess a token
            logger.warning("chunk plan skips position %d; ending the round", len(seq))
            break
        forced = forced_ids(seq, n_forced, start, size)
        if batcher is not None and start > 0 and size == batcher.verify_size and start + size <= n_forced:
            out = batcher.verify(start, seq[start], forced)  # given tokens only: one batched dispatch
        else:
            out = runner.run(start, size, seq[start], forced)
        chunks += 1
        decoder_ms += out.elapsed_ms
        t0 = time.perf_counter()
        for s in range(size):
            consumed = start + s
            if consumed >= n_forced:
                align_rows.append(out.attn_align[s])
                note_alignment(out.attn_align[s])
                stop = validator.on_attention(out.attn_last[s])
                if stop is not None:
                    break
            if consumed + 1 >= n_forced:
                stop = scores.predict(validator, out, s)
                if stop is not None:
                    break
                seq.append(int(out.tokens[s]))
                if len(validator.decoded) > max_tokens:  # the extra token is dropped like the plan's last
                    break
        validation_ms += (time.perf_counter() - t0) * 1000.0
        if stop is not None or len(validator.decoded) > max_tokens:
            break
    if stop is None:
        stop = validator.close()
    tokens = tuple(validator.decoded[: min(validator.checked, max_tokens)])
    n_frames = encoding.n_frames
    attn = np.asarray(align_rows[: len(tokens)], dtype=np.float32).reshape(len(tokens), n_frames)
    return DecodeResult(
        tokens=tokens,
        attn_align=attn,
        stop=stop,
        chunks=chunks,
        decoder_ms=decoder_ms,
        validation_ms=validation_ms,
        last_peak_s=float(validator.last_peak_s),
        drafted=drafted,
        logprobs=tuple(scores.logprobs[: len(tokens)]) if scores.known else (),
        eot_logprob=scores.eot if scores.known else None,
    )


def round_plan(model: AcousticModel, bucket: int, prefixed: bool, n_forced: int) -> tuple[tuple[int, int], ...]:
    """The chunk plan of a round: the prefixed schedule when a prefix is forced or the forced tokens
    fill its batched head (``_PREFIXED_HEAD``), else the default one."""
    return model.chunk_plan(bucket, prefixed=prefixed or n_forced >= _PREFIXED_HEAD)


def forced_ids(seq: Sequence[int], n_forced: int, start: int, size: int) -> np.ndarray:
    """The ``forced`` input of chunk ``(start, size)``: the token at each position after ``start``
    while it is one of the ``n_forced`` given ones, −1 (the model's choice) after them."""
    return np.array([seq[q] if q < n_forced else -1 for q in range(start + 1, start + size)], dtype=np.int64)


def _alignment_reader(validator: TokenValidator) -> Callable[[np.ndarray], None]:
    """The validator's ``on_alignment`` (optional: it reads the alignment heads' attention of the
    token whose final-layer attention comes next), or a no-op; looked up once per decode."""
    return getattr(validator, "on_alignment", None) or (lambda attn_align: None)


class _Scores:
    """The log-probabilities of the tokens a validator accepts, and of the EOT that ended it."""

    def __init__(self) -> None:
        self.logprobs: list[float] = []  # one per token appended to the validator's ``decoded``
        self.eot: float | None = None
        self.known = True  # False once a chunk reports no log-sum-exp (the scripted oracle)

    def predict(self, validator: TokenValidator, out: ChunkOutput, s: int) -> Stop | None:
        """``validator.on_prediction`` for row ``s`` of ``out``, scoring what it accepts."""
        n = len(validator.decoded)
        token_logit, eot_logit = float(out.token_logit[s]), float(out.eot_logit[s])
        stop = validator.on_prediction(int(out.tokens[s]), token_logit, eot_logit)
        if out.logsumexp is None:
            self.known = False
            return stop
        lse = float(out.logsumexp[s])
        if len(validator.decoded) > n:
            self.logprobs.append(token_logit - lse)
        if stop is not None and stop.reason == "eot":
            self.eot = eot_logit - lse
        return stop


@dataclass(slots=True)
class _Drafted:
    stop: Stop | None = None
    chunks: int = 0
    decoder_ms: float = 0.0
    validation_ms: float = 0.0
    drafted: int = 0


_LOOK = 3  # after a correction, the decoded tokens are looked for this far around in the draft
_MISSES = 2  # verifier dispatches in a row that confirm no draft token before the draft is left


def _decode_with_draft(runner: VerifyingRunner, seq: list[int], pos: int, limit: int, chunk: int,
                       draft: list[int], n_forced: int, validator: TokenValidator, max_tokens: int,
                       align_rows: list[np.ndarray], scores: _Scores) -> _Drafted:
    """Draft decoding from position ``pos`` (``seq[pos]``, the last predicted token, not yet
    consumed) up to position ``limit`` (module docstring). Appends to ``seq`` and ``align_rows``.

    In step with the draft, every dispatch is a verifier: it proposes the next K − 1 draft tokens
    (fewer at the draft's end: the rest of the batch repeats the last one and its rows are
    forgotten); row 0's prediction is valid whatever the proposal, so a dispatch never yields less
    than one greedy token. After a correction, :func:`_resume` finds where the draft goes on. After
    :data:`_MISSES` verifier dispatches in a row that confirmed nothing, and past the draft's end,
    the plan's sequential chunks of ``chunk`` steps run until the last two decoded tokens are
    found again in the rest of the draft.
    """
    k = runner.verify_size
    out_d = _Drafted()
    at: int | None = _resume(draft, seq, 0, wide=True)  # draft index expected next; None: out of step
    misses = 0
    note_alignment = _alignment_reader(validator)
    while out_d.stop is None and len(validator.decoded) <= max_tokens:
        real = draft[at : at + k - 1] if at is not None else []
        verify = at is not None and at < len(draft) and pos + k <= limit
        size = k if verify else chunk
        if pos + size > limit:
            break
        if verify:
            forced = np.asarray(real + [real[-1] if real else seq[pos]] * (k - 1 - len(real)), dtype=np.int64)
            out = runner.verify(pos, seq[pos], forced)
        else:
            out = runner.run(pos, size, seq[pos], np.full(size - 1, -1, dtype=np.int64))
        out_d.chunks += 1
        out_d.decoder_ms += out.elapsed_ms
        t0 = time.perf_counter()
        rows = size
        confirmed = 0
        for s in range(size):
            align_rows.append(out.attn_align[s])
            note_alignment(out.attn_align[s])
            out_d.stop = validator.on_attention(out.attn_last[s])
            if out_d.stop is not None:
                break
            out_d.stop = scores.predict(validator, out, s)
            if out_d.stop is not None:
                break
            token = int(out.tokens[s])
            seq.append(token)
            if len(validator.decoded) > max_tokens:
                break
            if verify and at is not None:
                hit = at < len(draft) and token == draft[at]
                confirmed += hit
                at = at + 1 if hit else _resume(draft, seq, at)
                # rows after s consumed a proposal that is now wrong, or the padding past the draft
                if s < size - 1 and (s >= len(real) or token != real[s]):
                    rows = s + 1
                    break
        out_d.validation_ms += (time.perf_counter() - t0) * 1000.0
        out_d.drafted += confirmed
        if verify and rows < size and out_d.stop is None:
            runner.rewind(pos + rows)
        if verify:
            misses = 0 if confirmed else misses + 1
            if misses >= _MISSES:
                at, misses = None, 0  # out of step: sequential chunks until the draft is found again
        else:
            floor = at if at is not None else 0
            at = _find(draft, seq[-2:], floor) if len(seq) - n_forced >= 2 else None
        pos += rows
    return out_d


def _resume(draft: list[int], seq: list[int], at: int, wide: bool = False) -> int:
    """Where the draft goes on after the last decoded token ``seq[-1]``, which was not the expected
    ``draft[at]``: after the last two decoded tokens found within :data:`_LOOK` tokens around
    ``at`` (the draft split or merged a word's tokens), else after ``seq[-1]`` found within
    ``_LOOK`` ahead (the draft missed tokens), else after ``draft[at]`` (a substituted token).
    ``wide``: also at the draft's start (the first decoded token). Returns ``len(draft)`` at most."""
    lo = 0 if wide else max(0, at - _LOOK)
    pair = seq[-2:]
    for i in range(lo, min(at + _LOOK, len(draft) - 1)):
        if draft[i : i + 2] == pair:
            return i + 2
    for i in range(at, min(at + _LOOK, len(draft))):
        if draft[i] == seq[-1]:
            return i + 1
    return min(at + 1, len(draft))


def _find(draft: list[int], tail: list[int], floor: int) -> int | None:
    """Index in ``draft`` just after the first occurrence of ``tail`` that ends after ``floor``;
    None if there is none."""
    n = len(tail)
    for i in range(max(0, floor - n + 1), len(draft) - n + 1):
        if draft[i : i + n] == tail:
            return i + n
    return None
