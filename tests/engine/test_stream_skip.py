"""``Stream.skip`` and ``Stream.set_step``: the overload mechanisms the lag rule uses (engine/overload.py).

On the scripted oracle: skipped audio yields no words and one gap, the words before the gap stay
(final), the words after it are the script's words heard after the gap, and times stay on the
audio clock (they do not shift by the skipped seconds).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from oracle import SR, make_vocab, random_script
from test_stream_oracle import check_words, stream_of

from captioner.core import apply_update
from captioner.errors import CaptionerError

V = make_vocab()


def _script(seed: int = 3):
    import random

    return random_script(V, random.Random(seed), n_words=40, rate=1.0, pauses=0.1)


def _feed(stream, clock, audio, pos: int, end: int, words: list) -> int:
    """Feed ``audio[pos:end]`` in 0.1 s blocks at real pace, stepping after each; returns ``end``."""
    block = SR // 10
    while pos < end:
        stream.feed(audio[pos : pos + block])
        pos += block
        clock.now += 0.1
        upd = stream.step()
        if upd is not None:
            apply_update(words, upd)
    return pos


def test_skip_drops_pending_audio_with_one_gap_and_keeps_words_on_the_audio_clock():
    script = _script()
    stream, _model, clock = stream_of(script, step_s=1.0)
    audio = script.audio
    words: list = []
    pos = _feed(stream, clock, audio, 0, 8 * SR, words)  # 8 s at real pace
    before = [w.text for w in words]
    stream.feed(audio[pos : pos + 6 * SR])  # 6 s arrive while the engine was busy
    pos += 6 * SR
    update = stream.skip(1.0)
    assert update.gap is not None
    gap_start, gap_end = update.gap
    assert gap_end == (pos - SR) / SR  # the last 1 s is kept
    assert gap_start <= 8.0
    assert update.stats is not None and update.stats.stop_reason == "skipped"
    assert abs(update.stats.skipped_s - (gap_end - gap_start)) < 1e-9
    apply_update(words, update)
    assert not any(w.speculative for w in words)  # the open utterance ended as it stood
    assert words and max(w.end for w in words) <= gap_start + 1e-9  # the gap follows the words kept
    kept = [w.text for w in words]
    assert kept[: len(before) - 1] == before[: len(before) - 1]
    _feed(stream, clock, audio, pos, audio.size, words)
    apply_update(words, stream.finish())
    after = [w for w in words[len(kept) :]]
    heard = [V.vocab.decode(w.tokens).strip() for w in script.words if w.start / SR >= gap_end + 0.3]
    texts = [w.text for w in after]
    assert texts[-len(heard) :] == heard  # every word spoken wholly after the gap is transcribed
    assert all(w.start >= gap_end - 1e-9 for w in after)  # on the audio clock, after the gap
    assert stream.skip(1.0).is_empty  # finished: nothing to skip


def test_skip_with_little_pending_does_nothing():
    stream, _model, _clock = stream_of(_script(), step_s=2.0)
    stream.feed(np.zeros(SR // 2, np.float32))
    assert stream.skip(1.0).is_empty
    assert stream.lag_s == 0.5


def test_a_step_changed_mid_stream_sets_when_the_next_rounds_run_and_loses_no_word():
    """The lag rule lengthens the step between rounds (and shortens it back): a round then waits
    for the new step's audio, the open utterance goes on, and every scripted word is transcribed."""
    script = _script(seed=4)
    stream, _model, clock = stream_of(script, step_s=1.0)
    audio, block = script.audio, SR // 10
    words: list = []
    rounds: list[tuple[float, float]] = []  # (audio fed, the step in force) at each round
    steps = {6 * SR: 2.0, 12 * SR: 3.0, 20 * SR: 0.5}  # set when this much audio has been fed
    for pos in range(0, audio.size, block):
        if pos in steps:
            stream.set_step(steps[pos])
        stream.feed(audio[pos : pos + block])
        clock.now += 0.1
        if (upd := stream.step()) is not None:
            rounds.append((stream.audio_s, stream.config.step_s))
            apply_update(words, upd)
    apply_update(words, stream.finish())
    check_words(words, script)
    for (fed_a, _), (fed_b, step) in itertools.pairwise(rounds):
        assert fed_b - fed_a >= step - 1e-6  # a round waits for its step's audio
    assert {step for _, step in rounds} == {1.0, 2.0, 3.0, 0.5}
    with pytest.raises(CaptionerError, match="step must be between"):
        stream.set_step(3.5)
    assert stream.config.step_s == 0.5  # a refused step changes nothing
