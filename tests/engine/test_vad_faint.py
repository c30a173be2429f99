"""The speech detector's faint speech (``SpeechDetector(faint=…)``), on scripted Silero probabilities.

The rule alone, window by window: which windows become speech, which stay out, and that the answer
does not depend on how the audio arrives. Real radio speech is in ``test_real_speech_policy.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from captioner.engine import StreamConfig
from captioner.engine.vad import VAD_WINDOW, SpeechDetector
from captioner.errors import CaptionerError


class ScriptedSilero:
    """Stands in for the Silero session: the next windows' probabilities, in order."""

    def __init__(self, probs: np.ndarray) -> None:
        self.probs, self.at = probs.astype(np.float32), 0

    def run(self, _outputs, feeds):
        n = feeds["input"].shape[0]
        out = self.probs[self.at : self.at + n].reshape(-1, 1)
        self.at += n
        return out, feeds["h"], feeds["c"]


# 32 windows = 1.024 s: the shortest stretch that can count (faint_s = 1.0 needs 32 windows)
RADIO = np.full(45, 0.35)  # a whole turn that Silero rates 0.35: never speech by the threshold
RADIO[20] = 0.05  # a dip between two words
SPOKEN = np.concatenate([np.full(20, 0.35), [0.7], np.full(20, 0.35)])  # reaches the threshold once
SHORT = np.full(15, 0.4)  # 0.5 s of faint speech: its stretches average under 0.25, too little to count
PROBS = np.concatenate([np.zeros(10), RADIO, np.zeros(20), SPOKEN, np.zeros(20), SHORT, np.zeros(20)])


def detector(blocks: list[int], probs: np.ndarray = PROBS, audio: np.ndarray | None = None,
             **options) -> SpeechDetector:
    """A detector fed ``probs.size`` windows (``audio``: float32 [windows, VAD_WINDOW], else
    digital silence) in blocks of these many windows, asked after each."""
    det = SpeechDetector(**options)
    det._session = ScriptedSilero(probs)  # type: ignore[assignment]
    fed = 0
    while fed < probs.size:
        n = min(blocks[fed % len(blocks)], probs.size - fed)
        det.feed(np.zeros(n * VAD_WINDOW, np.float32) if audio is None else audio[fed : fed + n].reshape(-1))
        fed += n
        det.speech(0, fed * VAD_WINDOW)  # asked between blocks, as a stream asks
    return det


def windows(det: SpeechDetector, n: int = PROBS.size) -> np.ndarray:
    """bool [n]: which of the first ``n`` windows are speech, each asked alone."""
    return np.array([det.speech(i * VAD_WINDOW, (i + 1) * VAD_WINDOW, min_s=0.0) is not None
                     for i in range(n)])


def test_a_faint_turn_is_speech_and_clear_speech_is_left_to_the_threshold() -> None:
    plain = windows(detector([PROBS.size]))
    faint = windows(detector([PROBS.size], faint=0.25))
    radio = slice(10, 10 + RADIO.size)
    spoken = 10 + RADIO.size + 20
    assert not plain[radio].any()  # the threshold hears nothing of the radio turn
    assert faint[radio].sum() == RADIO.size - 1 and not faint[10 + 20]  # all of it but the dip
    expected = plain.copy()
    expected[radio] = faint[radio]
    # a stretch that reaches the threshold anywhere is the threshold's: only its 0.7 window is
    # speech, and half a second of faint speech is too little; nothing outside the radio turn changes
    assert (faint == expected).all() and faint[spoken + 20] and faint.sum() == RADIO.size - 1 + 1
    assert (windows(detector([PROBS.size], faint=0.4)) == plain).all()  # the turn averages under 0.4


@pytest.mark.parametrize("blocks", [[1], [7, 3, 50], [31, 33]])
def test_faint_speech_does_not_depend_on_how_the_audio_arrives(blocks) -> None:
    whole = windows(detector([PROBS.size], faint=0.25))
    assert (windows(detector(blocks, faint=0.25)) == whole).all()


def test_a_faint_turn_counts_once_a_whole_stretch_of_it_averages_enough() -> None:
    """After 10 silent windows, the stretches that end at windows 31 and 32 average 0.23 and 0.24
    ((21 or 22) × 0.35 and the dip's 0.05, over 32): nothing yet; the one ending at window 33
    averages 0.25, and the turn so far is speech from its first window, all but the dip."""
    det = SpeechDetector(faint=0.25)
    det._session = ScriptedSilero(PROBS)  # type: ignore[assignment]
    det.feed(np.zeros(33 * VAD_WINDOW, np.float32))
    assert det.speech(0, 33 * VAD_WINDOW, min_s=0.0) is None
    det.feed(np.zeros(VAD_WINDOW, np.float32))
    assert det.speech(0, 34 * VAD_WINDOW) == (10 * VAD_WINDOW, 34 * VAD_WINDOW)
    assert det.speech(30 * VAD_WINDOW, 31 * VAD_WINDOW, min_s=0.0) is None  # the dip


def test_faint_speech_settings_are_checked() -> None:
    with pytest.raises(CaptionerError, match="faint"):
        StreamConfig(speech_faint=0.5)
    with pytest.raises(CaptionerError, match="faint"):
        StreamConfig(speech_faint_s=0.0)
    assert StreamConfig().speech_faint == 0.25  # on by default (docs/accuracy/deviations.md, 32)


# Weak speech (deviation 45): 10 s of a radio channel's noise at −40 dBFS that Silero rates 0.02,
# then turns Silero hardly rates, each 1.5 s: "said" stands 20 dB above the noise at 0.15 (its
# pause, back at the noise, at 0.05), "low" stands only 8 dB above it at 0.15, "unrated" 20 dB above
# it at 0.05, "heard" 20 dB above it at 0.15 but reaches the threshold twice (0.6), once in every
# 1 s stretch of it
NOISE_DB, QUIET = -40.0, 312
TURN = 47
WEAK = [("said", -20.0, 0.15), ("low", -32.0, 0.15), ("unrated", -20.0, 0.05), ("heard", -20.0, 0.15)]


def _weak_script() -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, dBFS) per window: the noise, then each turn after 0.5 s of noise."""
    probs, levels = [np.full(QUIET, 0.02)], [np.full(QUIET, NOISE_DB)]
    for name, db, p in WEAK:
        turn_p, turn_db = np.full(TURN, p), np.full(TURN, db)
        turn_p[23], turn_db[23] = 0.05, NOISE_DB  # the pause between two words
        if name == "heard":  # every stretch of it holds a window the threshold hears
            turn_p[[15, 31]] = 0.6
        probs += [np.full(16, 0.02), turn_p]
        levels += [np.full(16, NOISE_DB), turn_db]
    return np.concatenate(probs), np.concatenate(levels)


def _weak_windows(blocks: list[int], **options) -> tuple[np.ndarray, dict[str, slice]]:
    """Which windows are speech (each asked alone) and where each turn is, the audio (white noise at
    each window's level) fed in blocks of these many windows."""
    probs, levels = _weak_script()
    rng = np.random.default_rng(7)
    audio = (rng.standard_normal((probs.size, VAD_WINDOW)) * 10 ** (levels[:, None] / 20)).astype(np.float32)
    speech = windows(detector(blocks, probs, audio, **options), probs.size)
    turns = {name: slice(QUIET + 16 * (k + 1) + TURN * k, QUIET + (16 + TURN) * (k + 1)) for k, (name, _, _) in
             enumerate(WEAK)}
    return speech, turns


def test_a_turn_that_stands_above_the_noise_is_weak_speech_where_it_stands_that_high() -> None:
    """The "said" turn is speech but its pause; the one only 8 dB above the noise, the one Silero
    rates 0.05 and the one the threshold hears in every stretch (left to the threshold: its two windows) are
    not, and without the rule none is (faint speech, 0.25, hears none of them)."""
    weak, turns = _weak_windows([10_000], faint=0.25, weak=0.1, weak_db=12.0)
    plain, _ = _weak_windows([10_000], faint=0.25)
    said = turns["said"]
    assert weak[said].sum() == TURN - 1 and not weak[said.start + 23]
    heard = np.flatnonzero(weak[turns["heard"]])
    assert heard.tolist() == [15, 31]  # the threshold's windows only
    assert not weak[turns["low"]].any() and not weak[turns["unrated"]].any()
    assert not weak[:QUIET].any()  # the noise is its own quiet level
    outside = np.ones(weak.size, bool)
    outside[said] = False
    assert (plain[outside] == weak[outside]).all() and not plain[said].any()  # the rule changes that turn only


@pytest.mark.parametrize("blocks", [[1], [7, 3, 50], [31, 33]])
def test_weak_speech_does_not_depend_on_how_the_audio_arrives(blocks) -> None:
    whole, _ = _weak_windows([10_000], faint=0.25, weak=0.1)
    assert (_weak_windows(blocks, faint=0.25, weak=0.1)[0] == whole).all()


def test_weak_speech_settings_are_checked() -> None:
    with pytest.raises(CaptionerError, match="weak"):
        StreamConfig(speech_weak=0.5)
    with pytest.raises(CaptionerError, match="weak"):
        StreamConfig(speech_weak_db=-1.0)
    assert (StreamConfig().speech_weak, StreamConfig().speech_weak_db) == (0.1, 12.0)  # deviations.md, 45
