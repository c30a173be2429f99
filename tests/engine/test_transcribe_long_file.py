"""``captioner transcribe`` streams a file: bounded memory on a long one, the same words as the whole file."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from wavs import write_wav

from captioner import cli
from captioner.audio import WavWriter, load_audio_file, resample
from captioner.audio import files as audio_files
from captioner.audio.files import READ_BLOCK_S, AudioFileReader
from captioner.engine import StreamConfig, Transcriber
from captioner.storage.paths import AppPaths

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"


def _quiet_wav(path: Path, seconds: float) -> Path:
    """Low-level noise (about −50 dBFS), written a minute at a time by the project's streaming writer."""
    rng = np.random.default_rng(0)
    with WavWriter(path) as w:
        for start in range(0, round(seconds), 60):
            w.write((0.003 * rng.standard_normal(min(60, round(seconds) - start) * 16_000)).astype(np.float32))
    return path


def test_a_long_file_is_transcribed_without_loading_it_whole(tiny_pack, tmp_path: Path, capsys,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """30 min of near-silence (the speech detector makes its rounds cheap): every read is one block,
    and the Python/numpy memory of the run stays far below the file in float32 (115 MB)."""
    seconds = 1800.0
    wav = _quiet_wav(tmp_path / "long.wav", seconds)
    reads: list[int] = []
    real_read = audio_files.read_wav

    def counting_read(path, start=0, frames=None):
        reads.append(-1 if frames is None else frames)
        return real_read(path, start, frames)

    monkeypatch.setattr(audio_files, "read_wav", counting_read)
    out_json = tmp_path / "long.json"
    tracemalloc.start()
    try:
        code = cli.run(["transcribe", str(wav), "--model", str(tiny_pack.root), "--json", str(out_json), "--no-save"],
                       AppPaths.default(tmp_path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"({seconds:.1f} s)" in err  # the length comes from the header, before anything is decoded
    assert json.loads(out_json.read_text())["stats"]["audio_s"] == pytest.approx(seconds)
    assert reads and -1 not in reads and max(reads) <= READ_BLOCK_S * 16_000  # never the whole file
    assert len(reads) >= seconds / READ_BLOCK_S
    whole = seconds * 16_000 * 4
    assert peak < whole / 4, f"peak {peak / 2**20:.1f} MB traced for a {whole / 2**20:.0f} MB file"


def test_streamed_file_gives_the_same_words_as_the_whole_file(real_tiny_en_pack, tmp_path: Path) -> None:
    """Real speech at 44.1 kHz (resampled as it is read, in blocks that do not divide a step)."""
    clips = [load_audio_file(SPEECH / name) for name in ("1089-134691-0001.wav", "1221-135766-0002.wav")]
    speech = np.concatenate([clips[0], np.zeros(12_000, np.float32), clips[1]])
    wav = write_wav(tmp_path / "speech44k.wav", resample(speech, 16_000, 44_100), rate=44_100)
    engine = Transcriber.from_pack(real_tiny_en_pack, "cpu")
    try:
        config = StreamConfig(step_s=2.0, language="en")
        whole, info_whole = engine.transcribe(load_audio_file(wav), config)
        streamed, info_streamed = engine.transcribe(iter(AudioFileReader(wav, block_s=0.37)), config)
    finally:
        engine.close()

    def key(words):
        return [(w.text, w.start, w.end, w.speculative) for w in words]

    assert len(whole) > 15 and "longer" in " ".join(w.text for w in whole).lower()
    assert key(streamed) == key(whole)
    assert info_streamed.audio_s == info_whole.audio_s and len(info_streamed.rounds) == len(info_whole.rounds)
