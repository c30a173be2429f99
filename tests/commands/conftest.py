"""Fixtures of the command tests: a real 19 s reading (the four English test clips, 0.5 s apart)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from captioner.audio.files import load_audio_file
from captioner.audio.wavfile import WavWriter

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="session")
def reading(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/data/speech's clips one after another with 0.5 s of silence between them (18.8 s)."""
    path = tmp_path_factory.mktemp("audio") / "reading.wav"
    gap = np.zeros(8000, np.float32)
    audio = np.concatenate([part for clip in sorted((DATA / "speech").glob("*.wav"))
                            for part in (load_audio_file(clip), gap)])
    writer = WavWriter(path)
    writer.write(audio)
    writer.close()
    return path
