"""The accuracy bench's offline mode (the WER baseline and the time reference) on real tiny.en."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from captioner.audio import load_audio_file
from captioner.bench.accuracy import run_offline
from captioner.engine import OnnxAcousticModel, Runtime

# VCTK p287's "Please call Stella." (clean), then more; CC BY 4.0 (tests/data/speech-hard/README.md)
SAID = Path(__file__).resolve().parents[1] / "data" / "speech-hard" / "said-twice-vctk-p287_001-clean+noisy+002-clean.wav"
SR = 16000


@pytest.fixture(scope="module")
def model(real_tiny_en_pack) -> OnnxAcousticModel:
    return OnnxAcousticModel(real_tiny_en_pack, Runtime(real_tiny_en_pack, "cpu"))


@pytest.mark.parametrize("seconds", [1.8, 2.0])
def test_the_offline_word_times_of_a_clip_under_two_seconds_follow_the_speech(model, seconds) -> None:
    """VCTK p287's "Please call Stella." cut at 1.8 s: the last tokens attend to the window's padding,
    and DTW on the real frames alone put every word at 0.0 s (so each live word's latency read as the
    clip's length), at 2.0 s "Stella." at the end of "call". Aligned over the whole window and clamped
    to the clip, the words follow one another through it."""
    audio = load_audio_file(SAID)[: round(seconds * SR)]
    words = run_offline(model, audio).words
    assert [w.text for w in words] == ["Please", "call", "Stella."]
    ends = [w.end for w in words]
    assert 0.5 < ends[0] < ends[1] < ends[2] <= seconds, ends
    assert all(w.start <= w.end for w in words)
    assert np.isclose(words[1].start, ends[0]) and np.isclose(words[2].start, ends[1])
