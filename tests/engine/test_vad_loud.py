"""The speech detector's loud continuation (``SpeechDetector(loud_db=…)``), on scripted Silero
probabilities and audio of known levels.

The rule alone, window by window: which windows become speech, which stay out, and that the answer
does not depend on how the audio arrives. Real meeting speech is in ``test_real_speech_policy.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from captioner.engine import StreamConfig
from captioner.engine.vad import VAD_WINDOW, SpeechDetector
from captioner.errors import CaptionerError
from tests.engine.test_vad_faint import ScriptedSilero

QUIET, LOUD = 1e-4, 0.05  # −80 dBFS and −29 dBFS (a sine's RMS): 51 dB apart
# (probability, level, windows of 32 ms)
RUNS = [
    (0.0, QUIET, 10),
    (0.9, LOUD, 10),  # a phrase: windows 10–19
    (0.1, LOUD, 6),  # its loud end, which Silero lets go: 20–25
    (0.0, QUIET, 6),  # a pause: 26–31
    (0.1, LOUD, 6),  # the speaker goes on, quietly for Silero: 32–37
    (0.9, LOUD, 8),  # the next phrase, 19 windows after the first: 38–45
    (0.1, LOUD, 6),  # a loud tail that no speech follows: 46–51
    (0.0, QUIET, 28),
    (0.1, LOUD, 10),  # a loud sound 1.1 s after any speech: 80–89
    (0.0, QUIET, 10),
]
PROBS = np.concatenate([np.full(n, p) for p, _, n in RUNS])
LEVELS = np.concatenate([np.full(n, a) for _, a, n in RUNS])
BRIDGE = 20 * VAD_WINDOW / 16000  # 20 windows, 0.64 s
OPTIONS = {"loud_db": 20.0, "bridge_s": BRIDGE}


def audio(levels: np.ndarray) -> np.ndarray:
    """float32 [windows × 512]: a 1 kHz sine of each window's RMS level."""
    t = np.arange(VAD_WINDOW) / 16000
    return np.concatenate([np.sqrt(2) * a * np.sin(2 * np.pi * 1000 * t) for a in levels]).astype(np.float32)


class Fed:
    """A detector on the scripted probabilities, fed the audio of ``levels`` as a stream feeds it."""

    def __init__(self, levels: np.ndarray = LEVELS, **options) -> None:
        self.det = SpeechDetector(**options)
        self.det._session = ScriptedSilero(PROBS)  # type: ignore[assignment]
        self.samples, self.fed = audio(levels), 0

    def upto(self, window: int, blocks: list[int]) -> SpeechDetector:
        """Feed the windows before ``window`` in blocks of these many windows, asked after each."""
        while self.fed < window:
            n = min(blocks[self.fed % len(blocks)], window - self.fed)
            self.det.feed(self.samples[self.fed * VAD_WINDOW : (self.fed + n) * VAD_WINDOW])
            self.fed += n
            self.det.speech(0, self.fed * VAD_WINDOW)
        return self.det


def speech_windows(det: SpeechDetector) -> list[int]:
    """The windows that are speech now, each asked alone."""
    return [i for i in range(det.analysed // VAD_WINDOW)
            if det.speech(i * VAD_WINDOW, (i + 1) * VAD_WINDOW, min_s=0.0) is not None]


def windows(blocks: list[int], levels: np.ndarray = LEVELS, **options) -> list[int]:
    """The speech windows once all the audio has arrived in blocks of these many windows."""
    return speech_windows(Fed(levels, **options).upto(PROBS.size, blocks))


PHRASES = list(range(10, 20)) + list(range(38, 46))  # what the threshold hears


def test_loud_windows_between_two_phrases_are_speech_and_a_loud_tail_or_lone_sound_is_not() -> None:
    assert windows([PROBS.size]) == PHRASES
    # the first phrase's loud end and the speaker going on join the two phrases (the pause stays a
    # pause); the tail that no speech follows and the sound after no speech are not speech
    assert windows([PROBS.size], **OPTIONS) == list(range(10, 26)) + list(range(32, 46))


def test_a_long_utterance_can_still_be_cut_where_silero_hears_a_pause() -> None:
    """The loud windows keep the utterance open, but the pause a long utterance is cut at
    (``pause``, deviation 31) is where the threshold hears none: from the first phrase's end to
    the second's start."""
    det = Fed(**OPTIONS).upto(PROBS.size, [PROBS.size])
    assert det.pause(0, 46 * VAD_WINDOW, min_s=0.1) == (20 * VAD_WINDOW, 38 * VAD_WINDOW)


def test_loud_windows_count_as_speech_while_the_next_phrase_may_still_come() -> None:
    """The stream asks as audio arrives: before the next phrase (window 38) the loud windows after the
    first are speech, so its utterance does not close; the tail after the second is speech until
    20 windows have passed with no speech (window 66), then taken back."""
    stream = Fed(**OPTIONS)
    assert speech_windows(stream.upto(36, [4])) == list(range(10, 26)) + list(range(32, 36))
    assert speech_windows(stream.upto(66, [4])) == list(range(10, 26)) + list(range(32, 52))
    assert speech_windows(stream.upto(67, [1])) == list(range(10, 26)) + list(range(32, 46))


def test_phrases_further_apart_than_the_bridge_stay_apart() -> None:
    short = dict(OPTIONS, bridge_s=18 * VAD_WINDOW / 16000)  # the phrases are 19 windows apart
    assert windows([PROBS.size], **short) == PHRASES


def test_nothing_changes_where_the_recording_is_not_quiet_between_words() -> None:
    """Noise 10 dB under the speech: the loud windows are not 20 dB above the recording's quiet level,
    so the threshold alone decides (an energy rule would hear the noise as speech)."""
    noisy = np.where(LEVELS == QUIET, LOUD / np.sqrt(10), LEVELS)
    assert windows([PROBS.size], noisy, **OPTIONS) == PHRASES


def test_sound_well_under_the_phrase_is_not_the_speaker_going_on() -> None:
    """Breath and room sound between the sentences of a clean reading: 20 dB under the phrase
    (though 31 dB over the room) is more than 10 dB under it, so the two phrases stay apart."""
    soft = np.where((PROBS == 0.1) & (LEVELS == LOUD), LOUD / 10, LEVELS)
    assert windows([PROBS.size], soft, **OPTIONS) == PHRASES


def test_digital_silence_is_not_the_quiet_level() -> None:
    """Recordings joined by digital zeros (or a player that mutes): the zeros are left out of the
    quiet level, which is then the room's (−80 dBFS), so the answer is that of the room alone."""
    zeros = np.where(LEVELS == QUIET, 0.0, LEVELS)
    zeros[:5] = QUIET  # a little of the room before the first phrase
    assert windows([PROBS.size], zeros, **OPTIONS) == windows([PROBS.size], **OPTIONS)


@pytest.mark.parametrize("blocks", [[1], [7, 3, 50], [31, 33]])
def test_loud_continuation_does_not_depend_on_how_the_audio_arrives(blocks) -> None:
    assert windows(blocks, **OPTIONS) == windows([PROBS.size], **OPTIONS)


def test_loud_continuation_settings_are_checked() -> None:
    for bad in ({"speech_loud_db": -1.0}, {"speech_bridge_s": 0.0}):
        with pytest.raises(CaptionerError, match="loud"):
            StreamConfig(**bad)
    assert StreamConfig().speech_loud_db == 20.0  # on by default (docs/accuracy/deviations.md, 39)


def test_window_levels_are_the_dbfs_the_rules_compare() -> None:
    """``levels()`` gives each 32 ms window's level (dBFS of its mean square), the same whatever
    blocks the audio came in; a span that ends inside a window includes it; none past the audio."""
    det = Fed(**OPTIONS).upto(PROBS.size, [3, 7])
    want = 20 * np.log10(LEVELS)  # a sine of RMS a: 10·log10(a²)
    np.testing.assert_allclose(det.levels(0, PROBS.size * VAD_WINDOW), want, atol=0.01)
    np.testing.assert_allclose(det.levels(10 * VAD_WINDOW, 20 * VAD_WINDOW - 100), want[10:20], atol=0.01)
    assert det.levels(PROBS.size * VAD_WINDOW, (PROBS.size + 5) * VAD_WINDOW).size == 0
    whole = Fed(**OPTIONS).upto(PROBS.size, [PROBS.size])
    np.testing.assert_array_equal(whole.levels(0, PROBS.size * VAD_WINDOW), det.levels(0, PROBS.size * VAD_WINDOW))
