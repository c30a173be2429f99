"""Beam search for a closing round's decode (deviation 43): what offline Whisper does by default.

faster-whisper and openai-whisper decode with 5 hypotheses by default; on the development corpus's
long recordings that is worth about 2.5 points over greedy decoding (docs/accuracy). A closing
round decodes an utterance once, to its end, so it is where the search pays: the live rounds stay
greedy (their words are provisional, and their latency is the product).

The search is openai-whisper's ``BeamSearchDecoder`` with patience 1: every step, each of the B live
hypotheses offers its B best text tokens and EOT, scored by the sum of log-probabilities; the B best
that do not end become the live hypotheses, the ones that end are kept until B have ended (or the
caches are full); the answer is the ended hypothesis with the best score per token (openai-whisper's
``length_penalty=None``). All B hypotheses run in one dispatch of the pack's beam-step graph (a CPU
step streams the weights once for all rows).

The round's validator then reads the chosen hypothesis as if a greedy decode had produced it, in the
same order (each token's attention, then the next prediction), so every guard still applies: a guard
that stops it stops the round at the same token, and the EOT rule sees the search's choice (EOT where
the search ended, not elsewhere).
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from captioner.engine.decoder import DecodeResult, TokenValidator, _alignment_reader, forced_ids, round_plan
from captioner.engine.model import AcousticModel, BeamRunner, Encoding, SearchingModel

__all__ = ["decode_beam", "repeated_block", "skipped_words"]

#: a searched decode that leaves out this many consecutive words of another reading of its input
#: (the live drafts, the greedy decode) skipped speech
SKIP_WORDS = 3
#: a searched decode that reads this many words fewer than the greedy reading of the same input
#: dropped speech that reading heard: Whisper's search ranks by log-probability per token, and a
#: repeat or a filler ("we could we could", "oh, mm-hmm") is less likely than the sentence without it
FEWER_WORDS = 2


def skipped_words(chosen: Sequence[bytes], reference: Sequence[bytes], trailing: bool = True) -> int:
    """The longest run of consecutive ``reference`` words (normalised) that ``chosen`` leaves out.

    A search ranks hypotheses by log-probability per token, so one that jumps over a sentence or
    ends before the speech does can win (seen on radio calls and continuous speech, deviation 43);
    a greedy reading of the same input shows what it left out. Words it changes one for one are
    not counted: they are substitutions, not skipped speech (``n`` words read as ``m < n`` count
    ``n − m``). ``trailing=False``: a run at the end of ``reference`` that ``chosen`` does not reach
    is not counted."""
    ops = difflib.SequenceMatcher(None, list(reference), list(chosen), autojunk=False).get_opcodes()
    if not trailing and ops and ops[-1][0] != "equal":
        ops = ops[:-1]  # where ``chosen`` ends before ``reference`` does (a guard's stop: its rest is decoded again)
    return max((i2 - i1 - (j2 - j1) for op, i1, i2, j1, j2 in ops if op in ("delete", "replace")), default=0)


def repeated_block(words: Sequence[bytes], times: int = 3) -> int:
    """Words (normalised) of the longest block that ``words`` says ``times`` times or more in a row,
    0 where none does. A search ranks by log-probability per token, and once a phrase is said twice
    its third copy is likely: on spontaneous speech it can read a phrase three times over words it
    did not hear (the CHILDES clip of the new speakers' joins, thirty-seventh round), where the
    greedy reading of the same input keeps other words."""
    best = 0
    for n in range(1, len(words) // times + 1):
        for i in range(len(words) - n * times + 1):
            block = words[i : i + n]
            if all(words[i + k * n : i + (k + 1) * n] == block for k in range(1, times)):
                best = n
                break
    return best


@dataclass(slots=True)
class _Hypothesis:
    """One hypothesis: its tokens, their log-probabilities and the per-step rows the validator reads."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    token_logits: list[float] = field(default_factory=list)  # the logit of each token where it was chosen
    align: list[np.ndarray] = field(default_factory=list)  # [n_frames] per consumed generated token
    last: list[np.ndarray] = field(default_factory=list)
    score: float = 0.0  # sum of the log-probabilities, EOT's included once it ended
    eot_logprob: float | None = None  # set when it ended

    def extended(self, token: int, logprob: float, logit: float) -> _Hypothesis:
        return _Hypothesis([*self.tokens, token], [*self.logprobs, logprob], [*self.token_logits, logit],
                           list(self.align), list(self.last), self.score + logprob)

    @property
    def ranking(self) -> float:
        """Score per token (openai-whisper's ranking without a length penalty)."""
        return self.score / max(1, len(self.tokens))


def decode_beam(
    model: AcousticModel,
    encoding: Encoding,
    prompt: Sequence[int],
    prefix: Sequence[int],
    validator: TokenValidator,
    max_tokens: int = 224,
    context: Sequence[int] = (),
) -> DecodeResult | None:
    """Beam-search ``encoding`` after the forced ``context + prompt + prefix``; the chosen hypothesis
    is read by ``validator`` (module docstring). None, before any decoder is made, when the model
    does not search in the round's bucket (a pack without a beam step, the scripted oracle, a replay):
    the caller decodes greedily; arguments as :func:`~captioner.engine.decoder.decode_round`'s."""
    if not isinstance(model, SearchingModel) or model.beam_width(encoding.bucket) < 2:
        return None  # decided before a decoder is made: the greedy decode makes its own
    seq = [int(t) for t in (*context, *prompt, *prefix)]
    n_forced = len(seq)
    runner = model.decoder(encoding)
    if not isinstance(runner, BeamRunner):
        raise TypeError(f"{type(model).__name__} searches in the {encoding.bucket} s bucket but its decoder cannot")
    eot = model.vocab.eot
    chunks, decoder_ms = 0, 0.0
    # the forced tokens but the last run through the plan's chunks (what they consume past it is forgotten)
    for start, size in round_plan(model, encoding.bucket, bool(prefix), n_forced):
        if start >= n_forced - 1:
            break
        head = runner.run(start, size, seq[start], forced_ids(seq, n_forced, start, size))
        chunks, decoder_ms = chunks + 1, decoder_ms + head.elapsed_ms
    runner.rewind(n_forced - 1)
    beams = runner.beams(n_forced - 1)
    width = beams.size
    live = [_Hypothesis()]
    ended: list[_Hypothesis] = []
    inputs = np.full(width, seq[-1], dtype=np.int64)
    while live and beams.position < beams.limit and len(live[0].tokens) <= max_tokens:
        out = beams.step(inputs)
        chunks, decoder_ms = chunks + 1, decoder_ms + out.elapsed_ms
        candidates: list[tuple[float, int, int, float, float]] = []  # (score, row, token, logprob, logit)
        for row, hyp in enumerate(live):
            if hyp.tokens:  # the row consumed the hypothesis' last token: its attention
                hyp.align.append(out.attn_align[row])
                hyp.last.append(out.attn_last[row])
            lse = float(out.logsumexp[row])
            eot_lp = float(out.eot_logit[row]) - lse
            candidates.append((hyp.score + eot_lp, row, eot, eot_lp, float(out.eot_logit[row])))
            for token, logit in zip(out.top_tokens[row].tolist(), out.top_logits[row].tolist(), strict=True):
                candidates.append((hyp.score + logit - lse, row, int(token), logit - lse, logit))
        candidates.sort(key=lambda c: -c[0])
        following: list[_Hypothesis] = []
        parents: list[int] = []
        for _, row, token, logprob, logit in candidates:
            if token == eot:
                if len(ended) < width:
                    done = _Hypothesis(live[row].tokens, live[row].logprobs, live[row].token_logits, live[row].align,
                                       live[row].last, live[row].score + logprob, logprob)
                    ended.append(done)
                continue
            following.append(live[row].extended(token, logprob, logit))
            parents.append(row)
            if len(following) == width:
                break
        if len(ended) >= width:
            break
        live = following
        beams.reorder(np.array(parents + [parents[0]] * (width - len(parents)), dtype=np.int64))
        inputs = np.array([h.tokens[-1] for h in live] + [live[0].tokens[-1]] * (width - len(live)), dtype=np.int64)
    if ended:
        best = max(ended, key=lambda h: h.ranking)
    else:  # the caches filled up: the last token of a live hypothesis was never consumed (no attention)
        best = max(live, key=lambda h: h.ranking)
        best = _Hypothesis(best.tokens[: len(best.align)], best.logprobs[: len(best.align)],
                           best.token_logits[: len(best.align)], best.align, best.last, best.score)
    return _read(best, validator, encoding.n_frames, max_tokens, chunks, decoder_ms)


def _read(best: _Hypothesis, validator: TokenValidator, n_frames: int, max_tokens: int, chunks: int,
          decoder_ms: float) -> DecodeResult:
    """The validator reads ``best`` in a greedy decode's order: each token's prediction (EOT loses
    it: the search went on), the token's attention, and at the end EOT's win where the search ended."""
    t0 = time.perf_counter()
    note_alignment = _alignment_reader(validator)
    stop = None
    logprobs: list[float] = []
    for i, token in enumerate(best.tokens):
        n = len(validator.decoded)
        stop = validator.on_prediction(token, best.token_logits[i], -math.inf)
        if stop is not None:
            break
        if len(validator.decoded) > n:
            logprobs.append(best.logprobs[i])
        note_alignment(best.align[i])
        stop = validator.on_attention(best.last[i])
        if stop is not None:
            break
    eot_logprob = None
    if stop is None and best.eot_logprob is not None:
        stop = validator.on_prediction(0, -math.inf, 0.0)
        if stop is not None and stop.reason == "eot":
            eot_logprob = best.eot_logprob
    if stop is None:
        stop = validator.close()
    tokens = tuple(validator.decoded[: min(validator.checked, max_tokens)])
    attn = np.asarray(best.align[: len(tokens)], dtype=np.float32).reshape(len(tokens), n_frames)
    return DecodeResult(
        tokens=tokens,
        attn_align=attn,
        stop=stop,
        chunks=chunks,
        decoder_ms=decoder_ms,
        validation_ms=(time.perf_counter() - t0) * 1000.0,
        last_peak_s=float(validator.last_peak_s),
        logprobs=tuple(logprobs[: len(tokens)]),
        eot_logprob=eot_logprob,
    )
