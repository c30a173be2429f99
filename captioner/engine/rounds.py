"""The round policy: what one streaming round decodes, decided before anything is decoded.

:func:`plan_round` is a pure function of the stream's state (:class:`StreamState`), its sizes
(:class:`RoundPolicy`), the model's buckets and chunk plans, and the speech detector's answer for
the round's input; it returns a :class:`RoundPlan` (not to be confused with the decoder's *chunk*
plan, :meth:`~captioner.engine.model.AcousticModel.chunk_plan`), which
:meth:`~captioner.engine.stream.Stream._run_round` executes by one path. The policy, the life of
one utterance, is told in :mod:`~captioner.engine.stream`'s docstring; why each rule is there, with
the measurements, in ``docs/accuracy/deviations.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Protocol

import numpy as np

from captioner.core import SAMPLE_RATE
from captioner.engine._committed import CommittedLog
from captioner.engine.decoder import max_prefix
from captioner.engine.model import SAMPLES_PER_FRAME, AcousticModel
from captioner.engine.vad import SpeechSpan

__all__ = ["RoundKind", "RoundPlan", "RoundPolicy", "StreamState", "plan_round"]

RoundKind = Literal["skip", "opening", "live", "closing"]

FULL_N = 30 * SAMPLE_RATE  # Whisper's window, as offline Whisper hears every input
_CLOSING_MIN_N = 10 * SAMPLE_RATE  # closing inputs are heard with silence to at least 10 s
_REACH_BACK_BELOW_STEP_S = 2.0  # the minimum context applies to steps under 2 s only


class SpeechQuery(Protocol):
    def speech(self, start: int, end: int) -> SpeechSpan | None: ...

    def pause(self, start: int, end: int, *, min_s: float) -> SpeechSpan | None: ...


@dataclass(frozen=True)
class RoundPlan:
    """What one round decodes (all positions are absolute sample indices, 16 kHz).

    Attributes:
        kind: ``"skip"`` (not decoded: ``skip`` says why), ``"opening"`` (an utterance's first
            seconds, all of it), ``"live"`` (the paper's round, maybe reaching back for context),
            ``"closing"`` (the utterance's speech ended: decoded to its end as offline Whisper does;
            the stream's first utterance, within 30 s, from the stream's first sample).
        start, end: the input decoded, ``[start, end)``.
        heard_n: samples the encoder hears: the input followed by digital silence up to this length
            (the input alone, masked, when it is not longer than the input).
        prefix: tokens forced before the decode (dropped by the executor when the bucket's chunk
            plan has no room for them).
        redo_from: token index in the committed log from which the committed tokens are decoded
            again: proposed to the verifier as the draft and replaced by this round's words; None
            for a round that follows its carry (the paper's overlap dedup).
        reach_n: samples of already decoded audio before the round's own input (carry + new audio,
            trimmed) that it decodes again; the own input starts at ``start + reach_n``.
        opens: ``(utterance start, speech onset)`` when this round opens an utterance.
        draft_from: the committed log's draft start when this round opens an utterance.
        skip: why a ``"skip"`` round is not decoded: ``"short"``, ``"silence"``, ``"no_speech"``;
            None for an empty input.
        splits: a closing round that cuts a long open utterance at a pause inside the round's
            input (``end`` is in the pause): the audio after ``end`` stays the utterance's, carried to
            the next round.
        speech_end: where the speech detector hears the round input's speech end (absolute sample; None
            without a detector): a live round's backward-shift test is not a stop while the speech
            goes on ``backward_speech_s`` after where its decoder attended (deviation 46).
        search: a closing round that decodes with beam search (``closing_beam``, deviation 43, not
            the default): every closing round but the whole-recording decode (offline Whisper's
            greedy decode, 27), an input shorter than ``closing_beam_min_s`` and one in a hurry.
        keeps: a closing round whose input reaches back before its utterance (deviation 52): the
            committed tokens before this index are final words that stay (but where the decode reads
            the last closed utterance's otherwise and surer: deviation 53, in the executor); the
            decode's words after them replace the utterance's drafts.
        fallback: with ``keeps``, the utterance's own closing plan, decoded instead when the decode
            does not begin with those final words or does not hear the utterance.
    """

    kind: RoundKind
    start: int
    end: int
    heard_n: int = 0
    prefix: tuple[int, ...] = ()
    redo_from: int | None = None
    reach_n: int = 0
    opens: tuple[int, int] | None = None
    draft_from: int | None = None
    skip: str | None = None
    splits: bool = False
    search: bool = False
    speech_end: int | None = None
    keeps: int | None = None
    fallback: RoundPlan | None = None

    @property
    def closes(self) -> bool:
        """The round ends its utterance (closing validator rules, nothing carried)."""
        return self.kind == "closing"

    @property
    def looks_back(self) -> bool:
        """A closing round that decodes the utterance again from a committed word's start."""
        return self.kind == "closing" and self.redo_from is not None

    @property
    def revises(self) -> bool:
        """A live or opening round that decodes an open utterance's drafts again and replaces them."""
        return self.kind in ("opening", "live") and self.redo_from is not None


@dataclass(frozen=True)
class RoundPolicy:
    """The policy's sizes in samples (from :class:`~captioner.engine.stream.StreamConfig`)."""

    min_n: int  # a live input shorter than this is not decoded (carried)
    pad_n: int  # non-speech kept around detected speech
    end_silence_n: int  # speech ended this long before the input's end: the utterance closes
    context_n: int  # a closing round reaches this far back (0: no look-back, no drafts)
    opening_n: int  # an utterance at most this long is decoded whole from its start
    opening_window_n: int  # ... heard with silence to this length
    min_context_n: int  # a later live input shorter than this reaches back into the drafts
    offset_n: int  # word-start offset of a reach-back's cut (the carry cut's)
    silence_floor_dbfs: float | None  # inputs quieter than this are digital silence
    reach_back: bool  # the minimum context applies (steps under 2 s)
    full_n: int = 0  # a closing input shorter than this is heard in the 30 s window
    lead_n: int = 3200  # non-speech kept before detected speech when leading non-speech is trimmed
    from_start: bool = False  # the stream's first utterance, closing within 30 s, decoded from sample 0
    split_n: int = 0  # an open utterance this long is closed at a pause inside the round's input (0: never)
    pause_s: float = 0.2  # ... of at least this many seconds of non-speech
    beam: bool = False  # closing rounds search with five hypotheses (deviation 43)
    beam_min_n: int = 0  # ... those whose input is at least this long
    rest_drafts: bool = False  # the next round of an utterance's rest replaces the rest's drafts [48]
    before_n: int = 0  # a later utterance's closing input shorter than this reaches back before it [52]

    @classmethod
    def from_config(cls, cfg) -> RoundPolicy:
        return cls(
            min_n=round(cfg.min_chunk_s * SAMPLE_RATE),
            pad_n=_frames(round(cfg.speech_pad_s * SAMPLE_RATE)),
            end_silence_n=round(cfg.end_silence_s * SAMPLE_RATE),
            context_n=_frames(round(cfg.closing_context_s * SAMPLE_RATE)),
            opening_n=round(cfg.opening_s * SAMPLE_RATE),
            opening_window_n=_frames(round(cfg.opening_window_s * SAMPLE_RATE)),
            min_context_n=round(cfg.min_context_s * SAMPLE_RATE),
            offset_n=round(cfg.word_end_offset_s * SAMPLE_RATE),
            silence_floor_dbfs=cfg.silence_floor_dbfs,
            reach_back=cfg.step_s < _REACH_BACK_BELOW_STEP_S,
            full_n=round(cfg.closing_full_s * SAMPLE_RATE),
            lead_n=_frames(round(cfg.onset_pad_s * SAMPLE_RATE)),
            from_start=cfg.closing_from_start,
            split_n=round(cfg.closing_split_s * SAMPLE_RATE),
            pause_s=cfg.split_pause_s,
            beam=cfg.closing_beam,
            beam_min_n=round(cfg.closing_beam_min_s * SAMPLE_RATE),
            rest_drafts=cfg.rest_drafts,
            before_n=round(cfg.closing_before_s * SAMPLE_RATE),
        )


@dataclass(frozen=True)
class StreamState:
    """What the planner reads of a stream (nothing of it is written by planning).

    Attributes:
        start, audio: the round's own input (carry + new audio, at most ``max_input_s``).
        last: the stream is finishing (``finish()``).
        hurry: the caller is behind real time (no look-back, no reach-back).
        prefix: the carry's forced prefix (the second-to-last word of the last reliable round).
        utterance_start: where the open utterance's input begins; None: none is open.
        spec_from: token index of the previous round's speculative words, if any.
        history: ``[start, end)`` of the audio already taken that the stream keeps.
        log: the committed tokens (read only).
        prompt_n: tokens of the decoder prompt (the prefix bound depends on it).
        closed: a closing decode has run in this stream (the utterance it left open, if any, is the
            rest after a guard's stop, not a whole recording).
        spent: the stream's searched decodes have spent their budget (``closing_beam_rate``).
    """

    start: int
    audio: np.ndarray
    last: bool
    hurry: bool
    prefix: tuple[int, ...]
    utterance_start: int | None
    spec_from: int | None
    history: tuple[int, int]
    log: CommittedLog
    prompt_n: int
    closed: bool = False
    spent: bool = False


def plan_round(s: StreamState, p: RoundPolicy, model: AcousticModel, detector: SpeechQuery | None) -> RoundPlan:
    """The round's plan (the stream docstring's table, top to bottom)."""
    start, end = s.start, s.start + s.audio.size
    if s.audio.size == 0:
        return RoundPlan("skip", start, end)
    if not s.last and s.audio.size < p.min_n:
        return RoundPlan("skip", start, end, skip="short")
    span = detector.speech(start, end) if detector is not None else None
    if span is None and p.silence_floor_dbfs is not None and dbfs(s.audio) < p.silence_floor_dbfs:
        return RoundPlan("skip", start, end, skip="silence")  # digital silence [2]; quiet speech is speech [40]
    closes, opens = s.last, None
    utterance, draft_from = s.utterance_start, s.log.draft_from
    if detector is not None:
        if span is None and not (utterance is not None and p.context_n and s.log.tokens):
            return RoundPlan("skip", start, end, skip="no_speech")
        silent = span is None  # an open utterance whose end fell on the round boundary: it closes
        if span is None:
            span = SpeechSpan(start, start)
        lead = _frames(max(0, span.start - p.lead_n - start))
        if lead and not s.prefix:  # leading non-speech is not heard (a forced prefix needs it)
            start += lead
        if utterance is None:
            utterance, opens = start, (start, span.start)
            if p.context_n:  # its words are drafts until it closes
                draft_from = s.spec_from if s.spec_from is not None else len(s.log)
        if s.last or silent or end - span.end >= p.end_silence_n:
            closes = True
            end = start + min(end - start, -(-(span.end + p.pad_n - start) // SAMPLES_PER_FRAME) * SAMPLES_PER_FRAME)
        elif opens is None and _splits(s, p, end - utterance):
            pause = detector.pause(start, end, min_s=p.pause_s)
            if pause is not None:  # a long utterance: closed at its latest pause, the rest goes on
                cut = start + _frames(min(pause.start + p.pad_n, pause.end) - start)
                plan = _closing(s, p, model, start, cut, utterance, opens, draft_from)
                if plan.looks_back:
                    return replace(plan, splits=True)
    if closes:
        return _closing(s, p, model, start, end, utterance, opens, draft_from)
    speech_end = None if span is None else span.end
    if p.context_n and utterance is not None:  # an open utterance: its drafts may be decoded again
        revise = _reach_back(s, p, model, start, end, _frames(utterance or 0), draft_from or 0)
        if revise is not None:
            begin, prefix, redo = revise
            kind: RoundKind = "live" if prefix else "opening"
            heard = p.opening_window_n if kind == "opening" else end - begin
            return RoundPlan(kind, begin, end, heard, prefix, redo, start - begin, opens, draft_from,
                             speech_end=speech_end)
    return RoundPlan("live", start, end, end - start, s.prefix, opens=opens, draft_from=draft_from,
                     speech_end=speech_end)


def _closing(s: StreamState, p: RoundPolicy, model: AcousticModel, start: int, end: int, utterance: int | None,
             opens: tuple[int, int] | None, draft_from: int | None) -> RoundPlan:
    """The closing round of the utterance whose input (``[start, end)``, the round's own) ends at ``end``."""
    if _whole_recording(s, p, end, draft_from):  # as offline Whisper hears a recording this short
        redo = s.log.first_word_since(0) if s.log.tokens else None
        return RoundPlan("closing", 0, end, FULL_N, (), redo, start, opens, draft_from)
    if p.context_n and s.log.tokens and not s.hurry:  # look back: the utterance decoded again
        u = start if utterance is None else utterance
        begin = max(s.history[0], u, end - p.context_n)
        if begin > u:  # inside the utterance: begin where a committed word begins
            begin = max(s.history[0], s.log.word_start_since(begin, start) - p.pad_n)
        begin = _frames(begin)
        if begin <= start <= s.history[1]:
            plan = RoundPlan("closing", begin, end, _closing_window(model, end - begin, p.full_n), (),
                             s.log.first_word_since(begin), start - begin, opens, draft_from,
                             search=_searches(s, p, end - begin))
            return _before_utterance(s, p, model, plan, u, start) or plan
    return RoundPlan("closing", start, end, _closing_window(model, end - start, p.full_n), s.prefix,
                     opens=opens, draft_from=draft_from, search=_searches(s, p, end - start))


def _before_utterance(s: StreamState, p: RoundPolicy, model: AcousticModel, plan: RoundPlan, utterance: int,
                      start: int) -> RoundPlan | None:
    """Deviation 52: a later utterance's closing ``plan`` whose input is shorter than ``before_n``,
    reaching back to the first committed word that starts ``before_n`` before its end (less the pad)
    among the final words before the utterance, in audio the stream keeps: Whisper hears a short
    sentence after the ones before it, as offline Whisper's 30 s windows hear it. The final words
    stay (``keeps``); the decode's words after them replace the utterance's drafts; ``plan`` is the
    fallback. None where no final word is that near or kept."""
    end = plan.end
    if not (p.before_n and end - utterance < p.before_n and plan.draft_from):
        return None
    earlier = s.log.word_start_since(max(s.history[0], end - p.before_n + p.pad_n), utterance)
    begin = _frames(max(s.history[0], earlier - p.pad_n))
    if earlier >= utterance or not begin <= start <= s.history[1]:
        return None
    return replace(plan, start=begin, heard_n=_closing_window(model, end - begin, p.full_n),
                   redo_from=s.log.first_word_since(begin), reach_n=start - begin, keeps=plan.draft_from,
                   search=_searches(s, p, end - begin), fallback=plan)


def _searches(s: StreamState, p: RoundPolicy, n: int) -> bool:
    """A closing round of ``n`` input samples (not the whole recording's) decodes with beam search [43]."""
    return p.beam and not s.hurry and not s.spent and n >= p.beam_min_n


def _splits(s: StreamState, p: RoundPolicy, length: int) -> bool:
    """An open utterance ``length`` samples long (its start to the input's end) is long enough to be
    closed at a pause, and its words are drafts that a closing round can decode again."""
    return bool(p.split_n and p.context_n and s.log.tokens and not s.hurry and not s.last and length >= p.split_n)


def _reach_back(s: StreamState, p: RoundPolicy, model: AcousticModel, start: int, end: int, utterance: int,
                draft_from: int) -> tuple[int, tuple[int, ...], int] | None:
    """A live round of an open utterance that decodes its drafts again: (input start, forced prefix,
    first draft token replaced), or None when it follows its carry."""
    if s.hurry or not s.history[0] <= utterance <= start:
        return None
    shown = len(s.log.tokens) if s.spec_from is None else s.spec_from  # speculative words go anyway [7]
    if p.rest_drafts and not s.prefix and s.start <= utterance and draft_from < shown:
        # the rest of an utterance after a closing decode's pause or early end, whose drafts stand
        # [31, 28]: the input holds all of it; decoded whole, no prefix, its words replace them [48]
        return utterance, (), draft_from
    if end - utterance <= p.opening_n:  # opening: all of the utterance, no prefix
        return utterance, (), s.log.first_word_since(utterance, draft_from)
    if end - start >= p.min_context_n or not p.reach_back:
        return None
    tokens = s.log.tokens  # minimum context: from the drafted word that starts that long before the end
    k = s.log.first_word_since(max(utterance + p.pad_n, end - p.min_context_n), draft_from)
    after = next((i for i in range(k + 1, len(tokens)) if s.log.vocab.starts_word(tokens[i].id)), len(tokens))
    begin = _frames(max(s.history[0], tokens[k].start + p.offset_n)) if after < len(tokens) else end
    prefix = tuple(t.id for t in tokens[k:after])
    bucket = next((b for b in sorted(model.buckets) if end - begin <= b * SAMPLE_RATE), 30)
    if begin >= start or len(prefix) > max_prefix(model, bucket, s.prompt_n):
        return None
    return begin, prefix, after


def _whole_recording(s: StreamState, p: RoundPolicy, end: int, draft_from: int | None) -> bool:
    """The round is the stream's first closing decode and its utterance the first (nothing committed
    before it), the stream still keeps its first sample, and the input ends within Whisper's 30 s
    window: it is decoded from the stream's first sample in the 30 s window, as offline Whisper
    decodes the recording so far. (The rest of an utterance after a guard's stop is decoded by
    itself: decoding from the first sample again would stop at the same place.)"""
    first = not s.closed and (draft_from if draft_from is not None else len(s.log)) == 0
    return p.from_start and bool(p.context_n) and not s.hurry and first and s.history[0] == 0 and end <= FULL_N


def _closing_window(model: AcousticModel, n: int, full_n: int = 0) -> int:
    """Samples a closing input of ``n`` samples is heard as: 30 s when it is shorter than ``full_n``
    (a short utterance, heard as offline Whisper hears it), else the smallest of the model's buckets
    of at least 10 s that holds it (10, 30 s; 20 s where the pack has it)."""
    if n < full_n:
        return FULL_N
    buckets = [b * SAMPLE_RATE for b in model.buckets if b * SAMPLE_RATE >= _CLOSING_MIN_N]
    return next((b for b in sorted(buckets) if n <= b), FULL_N)


def _frames(samples: int) -> int:
    """Whole 20 ms frames in ``samples``, as samples."""
    return samples // SAMPLES_PER_FRAME * SAMPLES_PER_FRAME


def dbfs(audio: np.ndarray) -> float:
    """RMS level in dB re full scale 1.0 (−inf for all zeros)."""
    ms = float(np.mean(np.square(audio, dtype=np.float64)))
    return 10.0 * np.log10(ms) if ms > 0 else float("-inf")
