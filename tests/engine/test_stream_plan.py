"""The round plan (``captioner/engine/rounds.py::plan_round``) row by row: a stream's state and the
speech detector's answer in, the round's kind, input span, heard window, prefix and redecoded drafts
out; no model, no audio beyond a level. The executor is checked end to end by the replay and oracle
tests (the restatement made the same requests on every recorded scenario)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from replay import load_vocabulary

from captioner.engine._committed import CommittedLog, CommittedToken
from captioner.engine.rounds import RoundPolicy, StreamState, plan_round
from captioner.engine.stream import StreamConfig
from captioner.engine.tokens import Vocabulary
from captioner.engine.vad import SpeechSpan

SR = 16000
PAD = 3200  # speech_pad_s 0.2 s


class Model:
    """What the planner reads of a model: its buckets and chunk plans (the paper's schedule)."""

    buckets = (3, 4, 5, 6, 10, 20, 30)

    def chunk_plan(self, bucket: int, prefixed: bool) -> tuple[tuple[int, int], ...]:
        return ((0, 5), (5, 5), (10, 5), (15, 5), (20, 5), (25, 5))


MODEL: Any = Model()


class Detector:
    """The speech detector's answer: speech in ``[a, b)`` seconds (clipped to the query), or none."""

    def __init__(self, a: float | None = None, b: float | None = None,
                 pauses: tuple[tuple[float, float], ...] = ()) -> None:
        self.span = None if a is None or b is None else (round(a * SR), round(b * SR))
        self.pauses = [(round(x * SR), round(y * SR)) for x, y in pauses]  # non-speech inside the span
        self.asked: list[tuple[int, int]] = []

    def speech(self, start: int, end: int) -> SpeechSpan | None:
        self.asked.append((start, end))
        if self.span is None or self.span[1] <= start or self.span[0] >= end:
            return None
        return SpeechSpan(max(start, self.span[0]), min(end, self.span[1]))

    def pause(self, start: int, end: int, *, min_s: float) -> SpeechSpan | None:
        inside = [(a, b) for a, b in self.pauses if start <= a and b < end and b - a >= min_s * SR]
        return SpeechSpan(*inside[-1]) if inside else None


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return load_vocabulary()


def drafted(vocab: Vocabulary, *words: tuple[str, float, float]) -> CommittedLog:
    """A log of one-token words (text, start s, end s) whose words are an open utterance's drafts."""
    log = CommittedLog(vocab, "system")
    log.extend([CommittedToken(vocab.token_bytes.index(w.encode()), round(a * SR), round(b * SR), 0.0, False)
                for w, a, b in words])
    log.set_draft(0)
    return log


def state(log: CommittedLog, start_s: float, n_s: float, *, last: bool = False, hurry: bool = False,
          prefix: tuple[int, ...] = (), utterance_s: float | None = None, history_s: float = 0.0,
          level: float = 0.1) -> StreamState:
    start, n = round(start_s * SR), round(n_s * SR)
    return StreamState(start, np.full(n, level, np.float32), last, hurry, prefix,
                       None if utterance_s is None else round(utterance_s * SR), None,
                       (round(history_s * SR), start + n), log, 4)


def policy(step_s: float = 2.0, **config) -> RoundPolicy:
    return RoundPolicy.from_config(StreamConfig(step_s=step_s, **config))


def test_inputs_that_are_not_decoded(vocab) -> None:
    log = CommittedLog(vocab, "system")
    p = policy()
    assert plan_round(state(log, 0, 0), p, MODEL, Detector()).skip is None
    short = plan_round(state(log, 0, 0.8), p, MODEL, Detector(0, 1))
    assert (short.kind, short.skip) == ("skip", "short")
    assert plan_round(state(log, 0, 0.8, last=True), p, MODEL, Detector(0, 1)).kind == "closing"  # finish()
    assert plan_round(state(log, 0, 2, level=1e-5), p, MODEL, Detector()).skip == "silence"  # -100 dBFS, no speech
    assert plan_round(state(log, 0, 2, level=1e-5), p, MODEL, None).skip == "silence"  # no detector: the level decides
    heard = Detector(0, 2)
    quiet = plan_round(state(log, 0, 2, level=1e-5), p, MODEL, heard)  # quiet speech is speech [40]
    assert (quiet.kind, quiet.opens) == ("opening", (0, 0))
    assert heard.asked == [(0, 2 * SR)]  # the detector is asked once a round
    detector = Detector()
    assert plan_round(state(log, 0, 2), p, MODEL, detector).skip == "no_speech"
    assert detector.asked == [(0, 2 * SR)]


def test_the_first_speech_opens_an_utterance_heard_whole_with_silence(vocab) -> None:
    """An opening round [20]: leading non-speech trimmed to the onset less the pad [15], the whole
    young utterance decoded without a prefix, heard with silence to 6 s, its drafts replaced."""
    log = drafted(vocab, (" He", 0.2, 0.5))  # the previous utterance's word (final: its draft ended)
    log.set_draft(None)
    plan = plan_round(state(log, 10, 2), policy(), MODEL, Detector(10.5, 12))
    assert plan.kind == "opening" and plan.opens == (round(10.3 * SR), round(10.5 * SR))
    assert (plan.start, plan.end, plan.heard_n) == (round(10.3 * SR), 12 * SR, 6 * SR)
    assert plan.prefix == () and plan.redo_from == 1 and plan.draft_from == 1  # nothing of it committed yet
    assert log.draft_from is None  # planning writes nothing: the executor opens the utterance
    wider = plan_round(state(log, 10, 2), policy(onset_pad_s=0.4), MODEL, Detector(10.5, 12))  # a late onset
    assert wider.opens == (round(10.1 * SR), round(10.5 * SR)) and wider.start == round(10.1 * SR)


def test_a_live_round_follows_its_carry(vocab) -> None:
    """After the opening seconds, at a 2 s step: the paper's round, masked, the carry's prefix forced."""
    log = drafted(vocab, (" He", 10.5, 10.8), (" could", 10.8, 11.2), (" wait", 11.3, 11.6))
    plan = plan_round(state(log, 13, 3, prefix=(7,), utterance_s=10.3), policy(), MODEL, Detector(10.5, 16))
    assert (plan.kind, plan.start, plan.end, plan.heard_n, plan.prefix, plan.redo_from) == (
        "live", 13 * SR, 16 * SR, 3 * SR, (7,), None)


def test_the_rest_of_a_closed_utterance_is_decoded_whole_and_replaces_its_drafts(vocab) -> None:
    """The rest of an utterance after a closing round (closed at a pause [31], or its rest left to be
    decoded again [28]): the input starts where that rest starts, no prefix is carried, and drafts of
    the rest stand (one DTW timed just before the pause [48]). However long the input, the round
    decodes all of it without a prefix, heard with silence to 6 s, and replaces those drafts; with a
    carried prefix (a live round's carry), or with ``rest_drafts`` off, it is the paper's round."""
    log = drafted(vocab, (" France", 57.8, 58.26), (" in", 58.26, 58.26), (" both", 58.4, 58.7))
    log.set_draft(1)  # " France" final: the closing round's; the drafts after it stand
    rest = state(log, 58.34, 5.66, utterance_s=58.34, history_s=30)
    plan = plan_round(rest, policy(), MODEL, Detector(58.9, 64))
    assert (plan.kind, plan.prefix, plan.redo_from) == ("opening", (), 1)
    assert (plan.start, plan.end, plan.heard_n) == (round(58.34 * SR), 64 * SR, 6 * SR)
    carried = plan_round(state(log, 58.34, 5.66, prefix=(7,), utterance_s=58.34, history_s=30), policy(), MODEL,
                         Detector(58.9, 64))
    assert (carried.kind, carried.redo_from) == ("live", None)
    off = plan_round(rest, policy(rest_drafts=False), MODEL, Detector(58.9, 64))
    assert (off.kind, off.redo_from, off.start) == ("live", None, round(58.7 * SR))  # leading non-speech trimmed


def test_at_a_1_s_step_a_short_input_reaches_back_to_a_drafted_word(vocab) -> None:
    """Minimum context [20]: the drafted word starting 5 s before the input's end is forced as the
    prefix; the input starts 0.2 s before it (the carry's offset); the drafts after it are replaced."""
    log = drafted(vocab, (" He", 10.5, 10.8), (" could", 10.8, 11.2), (" wait", 11.3, 11.6),
                  (" no", 11.6, 11.8), (" longer", 11.8, 12.3))
    plan = plan_round(state(log, 14.5, 1.5, prefix=(7,), utterance_s=10.3, history_s=5), policy(1.0), MODEL,
                      Detector(10.5, 16))
    # the first drafted word starting at or after 16 - 5 = 11 s is " wait" (11.3 s)
    assert plan.kind == "live" and plan.prefix == (log.tokens[2].id,) and plan.redo_from == 3
    assert (plan.start, plan.end, plan.reach_n) == (round(11.1 * SR), 16 * SR, round(3.4 * SR))
    assert plan.heard_n == plan.end - plan.start  # masked
    at_2s = plan_round(state(log, 14.5, 1.5, prefix=(7,), utterance_s=10.3, history_s=5), policy(2.0), MODEL,
                       Detector(10.5, 16))
    assert at_2s.kind == "live" and at_2s.redo_from is None  # only at steps under 2 s
    hurried = plan_round(state(log, 14.5, 1.5, prefix=(7,), utterance_s=10.3, history_s=5, hurry=True),
                         policy(1.0), MODEL, Detector(10.5, 16))
    assert hurried.redo_from is None and hurried.start == round(14.5 * SR)


def test_a_pause_closes_the_utterance_looking_back_over_it(vocab) -> None:
    """Closing [16-18]: the speech ended 0.5 s or more before the input's end: cut 0.2 s after it,
    reaching back to the utterance's first committed word less the pad, heard with silence to 10 s,
    no prefix, the committed words of that audio proposed as the draft and replaced."""
    log = drafted(vocab, (" He", 10.5, 10.8), (" could", 10.8, 11.2), (" wait", 11.3, 11.6))
    plan = plan_round(state(log, 12, 2, prefix=(7,), utterance_s=10.3, history_s=5), policy(), MODEL,
                      Detector(10.5, 13.0))
    assert plan.kind == "closing" and plan.looks_back
    assert (plan.start, plan.end, plan.heard_n) == (round(10.3 * SR), round(13.2 * SR), 10 * SR)
    assert plan.prefix == () and plan.redo_from == 0
    local = plan_round(state(log, 12, 2, prefix=(7,), utterance_s=10.3, history_s=5, hurry=True), policy(),
                       MODEL, Detector(10.5, 13.0))  # behind real time: its own input, the carry's prefix
    assert local.kind == "closing" and not local.looks_back
    assert (local.start, local.end, local.prefix, local.heard_n) == (12 * SR, round(13.2 * SR), (7,), 10 * SR)


def test_an_open_utterance_with_no_speech_left_closes_on_the_round_boundary(vocab) -> None:
    log = drafted(vocab, (" He", 10.5, 10.8), (" could", 10.8, 11.9))
    plan = plan_round(state(log, 12, 2, utterance_s=10.3, history_s=5), policy(), MODEL, Detector())
    assert plan.kind == "closing" and plan.end == 12 * SR + PAD and plan.start == round(10.3 * SR)


def test_long_closing_inputs_are_heard_in_the_20_and_30_s_windows(vocab) -> None:
    log = drafted(vocab, (" He", 0.5, 0.8), (" could", 8.0, 8.4), (" wait", 14.0, 14.5))
    own = policy(closing_from_start=False)  # the stream's first utterance: [27] would decode it from 0
    plan = plan_round(state(log, 23, 2, utterance_s=0.3), own, MODEL, Detector(0.5, 24.0))
    assert plan.looks_back and plan.start == round(0.3 * SR) and plan.heard_n == 30 * SR
    plan = plan_round(state(log, 23, 2, utterance_s=0.3), policy(closing_context_s=20.0, closing_from_start=False),
                      MODEL, Detector(0.5, 24.0))
    # 20 s before the end (4.2 s) falls inside the utterance: from the next committed word's start less the pad
    assert plan.start == round(7.8 * SR) and plan.redo_from == 1 and plan.heard_n == 20 * SR


def test_a_short_closing_input_is_heard_in_the_30_s_window_when_asked(vocab) -> None:
    """``closing_full_s``: a closing input shorter than it is heard as offline Whisper hears it."""
    log = drafted(vocab, (" He", 10.5, 10.8), (" could", 10.8, 11.2))
    short = state(log, 11, 2, utterance_s=10.3, history_s=5)
    assert plan_round(short, policy(closing_full_s=3.0), MODEL, Detector(10.5, 12.0)).heard_n == 30 * SR
    assert plan_round(short, policy(closing_full_s=0.0), MODEL, Detector(10.5, 12.0)).heard_n == 10 * SR
    longer = state(log, 13, 2, utterance_s=10.3, history_s=5)  # 10.3 -> 14.2 s: 3.9 s
    assert plan_round(longer, policy(closing_full_s=3.0), MODEL, Detector(10.5, 14.0)).heard_n == 10 * SR


def test_the_first_utterance_of_a_recording_that_fits_the_window_is_decoded_as_offline_whisper_does(vocab) -> None:
    """Closing, whole [27]: the stream's first utterance, its input ending within 30 s of the stream's
    first sample, is decoded from that sample, heard in the 30 s window, without a prefix, its drafts
    replaced: offline Whisper's decode of the recording so far."""
    log = drafted(vocab, (" He", 1.5, 1.8), (" could", 1.8, 2.2))
    plan = plan_round(state(log, 2, 2, prefix=(7,), utterance_s=1.3), policy(), MODEL, Detector(1.5, 3.0))
    assert plan.kind == "closing" and plan.looks_back and plan.opens is None
    assert (plan.start, plan.end, plan.heard_n, plan.reach_n) == (0, round(3.2 * SR), 30 * SR, 2 * SR)
    assert plan.prefix == () and plan.redo_from == 0
    # finish() on a recording whose only round opens and closes the utterance: nothing to replace
    nothing = CommittedLog(vocab, "system")
    one = plan_round(state(nothing, 0, 3, last=True), policy(), MODEL, Detector(1.5, 2.5))
    assert (one.kind, one.start, one.end, one.heard_n, one.redo_from) == ("closing", 0, round(2.7 * SR), 30 * SR, None)
    assert one.opens == (round(1.3 * SR), round(1.5 * SR)) and one.reach_n == round(1.3 * SR)


def test_later_utterances_long_inputs_and_hurried_streams_close_from_the_utterance(vocab) -> None:
    """[27] applies to the stream's first utterance only, within 30 s of a first sample the stream
    still keeps, and not in a hurry; every other closing round looks back over its utterance [17]."""
    first = drafted(vocab, (" He", 1.5, 1.8), (" could", 1.8, 2.2))
    second = drafted(vocab, (" He", 1.5, 1.8), (" could", 10.8, 11.2))
    second.set_draft(1)  # " He" ended an earlier utterance
    cases = {
        # [52] off: with it, this one hears the final " He" before it (the tests of deviation 52)
        "a second utterance": (state(second, 12, 2, utterance_s=10.3), policy(closing_before_s=0.0), Detector(10.5, 13.0)),
        "an input ending past 30 s": (state(first, 29, 2, utterance_s=1.3), policy(), Detector(1.5, 30.4)),
        "the first sample dropped": (state(first, 2, 2, utterance_s=1.3, history_s=0.5), policy(), Detector(1.5, 3.0)),
        "off": (state(first, 2, 2, utterance_s=1.3), policy(closing_from_start=False), Detector(1.5, 3.0)),
    }
    for why, (s, p, detector) in cases.items():
        plan = plan_round(s, p, MODEL, detector)
        assert plan.kind == "closing" and plan.start == s.utterance_start and plan.heard_n == (
            30 * SR if plan.end - plan.start > 20 * SR else 10 * SR), why
    hurried = plan_round(state(first, 2, 2, prefix=(7,), utterance_s=1.3, hurry=True), policy(), MODEL,
                         Detector(1.5, 3.0))
    assert hurried.kind == "closing" and (hurried.start, hurried.prefix, hurried.redo_from) == (2 * SR, (7,), None)


def test_closing_rounds_search_but_the_whole_recording_s_and_a_hurried_one(vocab) -> None:
    """Beam search [43], with ``closing_beam`` (not the default): every closing round searches
    (looking back or not, splitting at a pause) when its input is at least ``closing_beam_min_s``
    long, except the decode of the whole recording [27], which is offline Whisper's greedy decode,
    and a round in a hurry; live and opening rounds are greedy; by default none searches."""
    first = drafted(vocab, (" He", 1.5, 1.8), (" could", 1.8, 2.2))
    second = drafted(vocab, (" He", 1.5, 1.8), (" could", 10.8, 11.2))
    second.set_draft(1)
    on = policy(closing_beam=True)
    whole = plan_round(state(first, 2, 2, utterance_s=1.3), on, MODEL, Detector(1.5, 3.0))
    later = plan_round(state(second, 12, 2, utterance_s=10.3), on, MODEL, Detector(10.5, 13.0))
    own = plan_round(state(first, 2, 2, utterance_s=1.3), policy(closing_beam=True, closing_from_start=False), MODEL,
                     Detector(1.5, 3.0))
    hurried = plan_round(state(second, 12, 2, utterance_s=10.3, hurry=True), on, MODEL, Detector(10.5, 13.0))
    live = plan_round(state(second, 12, 2, utterance_s=10.3), on, MODEL, Detector(10.5, 14.0))  # it goes on
    short = plan_round(state(second, 12, 2, utterance_s=10.3), policy(closing_beam=True, closing_beam_min_s=3.0,
                                                                       closing_before_s=0.0),
                       MODEL, Detector(10.5, 13.0))  # 10.3 -> 13.2 s: 2.9 s (not reaching back [52])
    default = plan_round(state(second, 12, 2, utterance_s=10.3), policy(), MODEL, Detector(10.5, 13.0))
    plans = (whole, later, own, hurried, live, short, default)
    assert [p.kind for p in plans] == ["closing"] * 4 + ["opening", "closing", "closing"]
    assert whole.start == 0 and later.looks_back and own.looks_back and not hurried.looks_back
    assert [p.search for p in plans] == [False, True, True, False, False, False, False]
    spent = plan_round(replace(state(second, 12, 2, utterance_s=10.3), spent=True), on, MODEL, Detector(10.5, 13.0))
    assert spent.kind == "closing" and spent.looks_back and not spent.search  # the budget is spent
    log = drafted(vocab, (" He", 0.5, 0.8), (" could", 8.0, 8.4), (" wait", 14.0, 14.5), (" no", 21.0, 21.3))
    split = plan_round(state(log, 21, 3, utterance_s=0.3), policy(closing_beam=True, closing_split_s=20.0,
                       closing_from_start=False), MODEL, Detector(0.5, 24.0, ((21.5, 21.7),)))
    assert split.splits and split.search


def test_a_long_utterance_closes_at_its_latest_pause_and_goes_on_after_it(vocab) -> None:
    """Closing at a pause [31]: an open utterance ``closing_split_s`` or longer (its start to the
    input's end) whose round input holds a pause of ``split_pause_s`` or more closes there, cut the
    pad after the pause begins (never past its end), looking back over the utterance; the plan says
    it splits (the executor carries the audio after the cut as the utterance)."""
    log = drafted(vocab, (" He", 0.5, 0.8), (" could", 8.0, 8.4), (" wait", 14.0, 14.5), (" no", 21.0, 21.3))
    speech = (0.5, 24.0)
    pauses = ((10.0, 10.4), (21.5, 21.7), (22.0, 22.3))
    p = policy(closing_split_s=20.0, closing_from_start=False)
    plan = plan_round(state(log, 21, 3, utterance_s=0.3), p, MODEL, Detector(*speech, pauses))
    assert plan.kind == "closing" and plan.splits and plan.looks_back
    assert (plan.start, plan.end, plan.redo_from, plan.heard_n) == (round(0.3 * SR), round(22.2 * SR), 0, 30 * SR)
    short = plan_round(state(log, 21, 3, utterance_s=0.3), policy(closing_split_s=20.0, split_pause_s=0.1,
                       closing_from_start=False), MODEL, Detector(*speech, ((22.0, 22.12),)))
    assert short.end == round(22.12 * SR) and short.splits  # a pause shorter than the pad: cut at its end
    cases = {
        "off": (state(log, 21, 3, utterance_s=0.3), policy(closing_split_s=0.0, closing_from_start=False), pauses),
        "too young": (state(log, 21, 3, utterance_s=5.3), p, pauses),
        "no pause long enough": (state(log, 21, 3, utterance_s=0.3), policy(closing_split_s=20.0, split_pause_s=0.5,
                                                                              closing_from_start=False), pauses),
        "the pause before the input": (state(log, 21, 3, utterance_s=0.3), p, ((10.0, 10.4),)),
        "in a hurry": (state(log, 21, 3, utterance_s=0.3, hurry=True), p, pauses),
    }
    for why, (s, policy_, where) in cases.items():
        live = plan_round(s, policy_, MODEL, Detector(*speech, where))
        assert live.kind == "live" and not live.splits, why


def test_a_short_closing_input_reaches_back_to_the_final_words_before_its_utterance(vocab) -> None:
    """Deviation 52: a closing input shorter than ``closing_before_s`` that starts at its utterance
    reaches back to the first committed word starting at least that long before its end (less the
    pad), so Whisper hears the sentence after the ones before it, as offline Whisper's window does;
    the committed words from there are the draft, the final ones before the utterance (``keeps``)
    stay, and the utterance's own closing plan is the fallback."""
    log = drafted(vocab, (" He", 2.0, 2.3), (" could", 2.3, 2.6), (" wait", 10.5, 10.8), (" no", 10.8, 11.0))
    log.set_draft(2)  # " He could" final: an earlier utterance's
    s = state(log, 12, 2, utterance_s=10.3)
    plan = plan_round(s, policy(closing_before_s=19.6), MODEL, Detector(10.5, 13.0))
    assert plan.kind == "closing" and plan.keeps == 2 and plan.redo_from == 0
    assert (plan.start, plan.end, plan.heard_n, plan.reach_n) == (round(1.8 * SR), round(13.2 * SR), 20 * SR,
                                                                  12 * SR - round(1.8 * SR))
    own = plan.fallback
    assert own is not None and own.fallback is None and own.keeps is None
    assert (own.start, own.end, own.heard_n, own.redo_from) == (round(10.3 * SR), round(13.2 * SR), 10 * SR, 2)
    assert plan_round(s, policy(closing_before_s=0.0), MODEL, Detector(10.5, 13.0)) == own  # off: the utterance's
    near = plan_round(s, policy(closing_before_s=9.6), MODEL, Detector(10.5, 13.0))  # from 13.2 - 9.6 + 0.2 s on
    assert near == own  # no final word starts after 3.8 s: nothing to reach back to


def test_no_reach_before_the_utterance_without_final_words_kept_audio_or_time(vocab) -> None:
    """Deviation 52 needs final words before the utterance whose audio the stream still keeps, an
    utterance shorter than ``closing_before_s``, and a stream that is not behind real time."""
    log = drafted(vocab, (" He", 2.0, 2.3), (" could", 2.3, 2.6), (" wait", 10.5, 10.8), (" no", 10.8, 11.0))
    on = policy(closing_before_s=19.6)
    log.set_draft(2)
    dropped = plan_round(state(log, 12, 2, utterance_s=10.3, history_s=5), on, MODEL, Detector(10.5, 13.0))
    assert dropped.keeps is None and dropped.start == round(10.3 * SR)  # " He could" no longer kept
    hurried = plan_round(state(log, 12, 2, prefix=(7,), utterance_s=10.3, hurry=True), on, MODEL, Detector(10.5, 13.0))
    assert hurried.keeps is None and hurried.start == 12 * SR
    short = policy(closing_before_s=2.5)  # 10.3 -> 13.2 s: 2.9 s, not shorter
    assert plan_round(state(log, 12, 2, utterance_s=10.3), short, MODEL, Detector(10.5, 13.0)).keeps is None
    log.set_draft(0)  # every word a draft: nothing final before the utterance
    assert plan_round(state(log, 12, 2, utterance_s=10.3), on, MODEL, Detector(10.5, 13.0)).keeps is None


@pytest.mark.parametrize(("guess", "language", "session", "stays"), [
    (("en", 0.99), "en", False, True),
    (("en", 0.40), "en", False, False),  # unsure before the session has a language: tried in another (38)
    (("en", 0.40), "en", True, True),
    (("la", 0.51), "en", True, True),  # an unsure other language does not change the session's (33)
    (("de", 0.95), "en", True, False),  # a German sentence before an English reply
    (("de", 0.51), "en", False, False),
])
def test_a_detecting_stream_reaches_before_an_utterance_only_where_its_language_stays(guess, language, session,
                                                                                      stays) -> None:
    """Deviation 52 where the language is detected: the utterance's own input is heard first, and its
    closing round reaches back only where that leaves the stream's language as it is: the final
    words before a short sentence must not decide its language (German before an English reply read
    the reply as German); an archaic English passage read as Latin at 0.51 still reaches back."""
    from captioner.engine.language import LanguageGuess
    from captioner.engine.stream import _language_stays

    assert _language_stays(LanguageGuess(guess[0], guess[1], (guess,)), language, session) is stays
