"""Long files are streamed: read block by block (WAV) or from ffmpeg's pipe, never held whole in float32."""

from __future__ import annotations

import shutil
import struct
import subprocess
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from captioner.audio import load_audio_file, resample
from captioner.audio.files import READ_BLOCK_S, AudioFileReader
from captioner.errors import AudioFileError


def write_quiet_wav(path: Path, seconds: float, rate: int = 16_000, seed: int = 0) -> Path:
    """``seconds`` of low-level noise (about −45 dBFS) as 8-bit PCM, written a minute at a time.

    8-bit keeps an hour at 58 MB on disk; the header is written first with the final sizes.
    """
    frames = round(seconds * rate)
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate, 1, 8)
    header = b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + frames) + b"WAVE" + b"fmt " + struct.pack(
        "<I", len(fmt)) + fmt + b"data" + struct.pack("<I", frames)
    rng = np.random.default_rng(seed)
    with path.open("wb") as f:
        f.write(header)
        for start in range(0, frames, 60 * rate):
            n = min(60 * rate, frames - start)
            f.write((128 + rng.integers(-1, 2, n)).astype(np.uint8).tobytes())
        if frames % 2:
            f.write(b"\0")
    return path


def test_an_hour_of_wav_is_read_in_blocks_with_bounded_memory(tmp_path: Path) -> None:
    path = write_quiet_wav(tmp_path / "hour.wav", 3600.0)
    reader = AudioFileReader(path)
    assert reader.duration_s == 3600.0
    whole = 3600 * 16_000 * 4  # the file as float32: 230 MB
    tracemalloc.start()
    try:
        total = biggest = 0
        for block in reader:
            assert block.dtype == np.float32
            total += len(block)
            biggest = max(biggest, len(block))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == 3600 * 16_000
    assert biggest <= READ_BLOCK_S * 16_000
    assert peak < whole / 20, f"peak {peak / 2**20:.1f} MB of Python/numpy memory while streaming a 230 MB file"


def test_blocks_resample_to_the_same_samples_as_the_whole_file(tmp_path: Path) -> None:
    rate, seconds = 44_100, 20.0
    t = np.arange(round(rate * seconds)) / rate
    left = (0.3 * np.sin(2 * np.pi * 440 * t) * np.sin(2 * np.pi * 0.5 * t)).astype(np.float32)
    stereo = np.stack([left, -0.5 * left], axis=1)
    path = tmp_path / "s.wav"
    fmt = struct.pack("<HHIIHH", 3, 2, rate, rate * 8, 8, 32)
    data = stereo.astype("<f4").tobytes()
    path.write_bytes(b"RIFF" + struct.pack("<I", 4 + 8 + 16 + 8 + len(data)) + b"WAVE" + b"fmt " + struct.pack("<I", 16)
                     + fmt + b"data" + struct.pack("<I", len(data)) + data)
    reader = AudioFileReader(path, block_s=1.7)  # blocks that do not divide the file
    blocks = list(reader)
    assert len(blocks) > 10 and max(map(len, blocks)) <= 1.7 * 16_000 + 64
    streamed = np.concatenate(blocks)
    assert len(streamed) == round(reader.duration_s * 16_000) == 320_000
    np.testing.assert_allclose(streamed, resample(stereo.mean(axis=1), rate), atol=1e-6)
    np.testing.assert_array_equal(streamed, load_audio_file(path))


def test_compressed_files_stream_from_ffmpeg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed (scripts/setup --dev installs it)")
    flac = tmp_path / "tone.flac"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=3",
                    str(flac)], check=True)
    reader = AudioFileReader(flac, block_s=0.25)
    assert reader.duration_s is None  # known once read
    blocks = list(reader)
    assert len(blocks) >= 11 and max(map(len, blocks)) == 4000
    assert abs(sum(map(len, blocks)) - 48_000) <= 160
    np.testing.assert_array_equal(np.concatenate(blocks), load_audio_file(flac))
    first = next(iter(AudioFileReader(flac, block_s=0.25)))  # stopping early ends ffmpeg, no error
    assert len(first) == 4000
    broken = tmp_path / "broken.mp3"
    broken.write_bytes(b"ID3\x03\x00\x00\x00\x00\x00\x00" + bytes(range(256)) * 8)
    with pytest.raises(AudioFileError, match=r"broken\.mp3"):
        list(AudioFileReader(broken))
