"""WAV reading in every common encoding, load_audio_file, FileSource and the WAV writer."""

from __future__ import annotations

import itertools
import logging
import shutil
import struct
import subprocess
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from captioner.audio import FileSource, WavWriter, load_audio_file, read_wav
from captioner.errors import AudioFileError


def _riff(path: Path, payload: bytes, tag: int, channels: int, rate: int, bits: int, extensible: bool = False) -> Path:
    """Write a WAV by hand (independent of the reader under test)."""
    block = channels * bits // 8
    if extensible:
        guid_tail = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
        fmt = struct.pack("<HHIIHH", 0xFFFE, channels, rate, rate * block, block, bits)
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", tag) + guid_tail
    else:
        fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    junk = b"LIST" + struct.pack("<I", 3) + b"abc\x00"  # an odd-sized chunk to skip
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + junk + b"data" + struct.pack("<I", len(payload)) + payload
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    return path


def _ramp(frames: int, channels: int) -> np.ndarray:
    x = np.linspace(-0.9, 0.9, frames * channels).reshape(frames, channels)
    return x


ENCODINGS = {
    "u8": (1, 8, lambda x: np.round(x * 127 + 128).astype(np.uint8).tobytes(), 2 / 127),
    "s16": (1, 16, lambda x: np.round(x * 32767).astype("<i2").tobytes(), 2 / 32767),
    "s24": (1, 24, lambda x: b"".join(int(v).to_bytes(3, "little", signed=True) for v in np.round(x.ravel() * 8388607)), 1e-6),
    "s32": (1, 32, lambda x: np.round(x * 2147483647).astype("<i4").tobytes(), 1e-6),
    "f32": (3, 32, lambda x: x.astype("<f4").tobytes(), 1e-7),
    "f64": (3, 64, lambda x: x.astype("<f8").tobytes(), 1e-7),
}


@pytest.mark.parametrize("extensible", [False, True], ids=["plain", "extensible"])
@pytest.mark.parametrize("enc", list(ENCODINGS))
def test_read_wav_encodings(tmp_path: Path, enc: str, extensible: bool) -> None:
    tag, bits, pack, tol = ENCODINGS[enc]
    x = _ramp(300, 3)
    path = _riff(tmp_path / f"{enc}.wav", pack(x), tag, 3, 22_050, bits, extensible)
    data, info = read_wav(path)
    assert (info.rate, info.channels, info.bits, info.frames) == (22_050, 3, bits, 300)
    np.testing.assert_allclose(data, x, atol=tol * 1.01 + 1e-7)


def test_read_wav_matches_sox_24bit(tmp_path: Path) -> None:
    if shutil.which("sox") is None:
        pytest.skip("sox is not installed (scripts/setup --dev installs it)")
    path = tmp_path / "sox24.wav"
    subprocess.run(["sox", "-n", "-r", "44100", "-c", "2", "-b", "24", str(path), "synth", "0.5", "sine", "1000"], check=True)
    data, info = read_wav(path)
    assert (info.rate, info.channels, info.bits, info.frames) == (44_100, 2, 24, 22_050)
    ref = subprocess.run(["sox", str(path), "-t", "f32", "-"], check=True, capture_output=True).stdout
    np.testing.assert_allclose(data.ravel(), np.frombuffer(ref, "<f4"), atol=1e-6)


def test_load_audio_file_44k_stereo_to_16k_mono(tmp_path: Path) -> None:
    t = np.arange(44_100) / 44_100
    x = 0.5 * np.sin(2 * np.pi * 1000 * t)
    path = tmp_path / "tone.wav"
    with wave.open(str(path), "wb") as w:  # the standard library writes it
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(44_100)
        w.writeframes(np.round(np.repeat(x[:, None], 2, axis=1) * 32767).astype("<i2").tobytes())
    y = load_audio_file(path)
    assert y.dtype == np.float32 and y.shape == (16_000,)
    assert np.sqrt(np.mean(y[1000:-1000] ** 2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.01)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"hello, this is text, not audio\n" * 3, "not a WAV file"),
        (b"RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00", "truncated"),
        (b"RIFF\x04\x00\x00\x00WAVE", "truncated"),
    ],
    ids=["empty", "text", "cut-in-fmt", "header-only"],
)
def test_bad_files_give_one_line_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.wav"
    path.write_bytes(content)
    with pytest.raises(AudioFileError, match=message) as err:
        load_audio_file(path)
    assert "\n" not in str(err.value) and "bad.wav" in str(err.value)
    with pytest.raises(AudioFileError):
        FileSource(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(AudioFileError, match="does not exist"):
        load_audio_file(tmp_path / "nope.wav")


def test_truncated_data_reads_what_is_there(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _riff(tmp_path / "cut.wav", np.zeros(1000, "<i2").tobytes(), 1, 1, 16_000, 16)
    path.write_bytes(path.read_bytes()[:-500])  # header says 1000 frames, 750 are there
    with caplog.at_level(logging.WARNING):
        y = load_audio_file(path)
    assert len(y) == 750 and "only 750" in caplog.text


def test_nan_and_inf_become_zero_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    x = np.full((1600, 1), 0.25, np.float32)
    x[100], x[200], x[300] = np.nan, np.inf, -np.inf
    path = _riff(tmp_path / "nan.wav", x.astype("<f4").tobytes(), 3, 1, 16_000, 32)
    with caplog.at_level(logging.WARNING):
        y = load_audio_file(path)
    assert np.isfinite(y).all() and y[100] == 0 and y[500] == pytest.approx(0.25)
    assert "3 NaN/Inf" in caplog.text


def test_other_formats_through_ffmpeg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed (scripts/setup --dev installs it)")
    flac = tmp_path / "tone.flac"
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=1.5",
                    str(flac)], check=True)
    y = load_audio_file(flac)
    assert abs(len(y) - 24_000) <= 160 and y.dtype == np.float32
    not_audio = tmp_path / "notes.mp3"
    not_audio.write_text("not audio")
    with pytest.raises(AudioFileError, match="ffmpeg could not decode"):
        load_audio_file(not_audio)
    monkeypatch.setenv("PATH", str(tmp_path))  # no ffmpeg
    with pytest.raises(AudioFileError, match="install ffmpeg"):
        load_audio_file(flac)


def _tone_wav(path: Path, rate: int, seconds: float) -> Path:
    t = np.arange(round(rate * seconds)) / rate
    x = (0.3 * np.sin(2 * np.pi * 700 * t)).astype(np.float32)
    return _riff(path, np.stack([x, x], 1).astype("<f4").tobytes(), 3, 2, rate, 32)


def test_file_source_fast_equals_load_audio_file(tmp_path: Path) -> None:
    path = _tone_wav(tmp_path / "t.wav", 44_100, 1.23)
    src = FileSource(path, realtime=False)
    blocks = []
    with src:
        while (b := src.read(0.0)) is not None:
            blocks.append(b)
    assert src.finished and src.read(0.1) is None
    assert blocks[0].start == 0 and all(b.start == a.end for a, b in itertools.pairwise(blocks))
    np.testing.assert_allclose(np.concatenate([b.samples for b in blocks]), load_audio_file(path), atol=1e-6)
    assert src.level("system")[1] > 0.25 and src.events() == []


def test_file_source_realtime_paces_blocks(tmp_path: Path) -> None:
    path = _tone_wav(tmp_path / "t.wav", 48_000, 0.6)
    src = FileSource(path, realtime=True, source="mic")
    t0 = time.monotonic()
    n = 0
    with src:
        while not src.finished:
            if (b := src.read(1.0)) is not None:
                assert b.source == "mic"
                n += len(b.samples)
    assert n == 9600 and time.monotonic() - t0 >= 0.55  # never faster than the audio


def test_wav_writer_is_readable_while_recording(tmp_path: Path) -> None:
    path = tmp_path / "rec.wav"
    with WavWriter(path) as w:
        w.write(np.full(1000, 0.5, np.float32))
        _, info = read_wav(path)  # valid mid-recording (a killed process leaves a good file)
        assert info.frames == 1000 and info.is_float
        w.write(np.full(600, -0.5, np.float32))
    data, info = read_wav(path)
    assert info.frames == 1600 and data[-1, 0] == -0.5
    if shutil.which("soxi"):
        out = subprocess.run(["soxi", "-s", str(path)], capture_output=True, text=True, check=True).stdout
        assert out.strip() == "1600"


def test_a_recording_that_meets_a_full_disk_keeps_every_whole_block_and_a_true_header(small_disk) -> None:
    """WavWriter on a real 64 KiB file system: the write that finds no room raises ``OSError`` and
    leaves the file as it was before it (no half block, the header's sizes true), so the recording
    so far reads back exactly."""
    disk = small_disk.mount("64k")
    writer = WavWriter(disk / "rec.wav")
    block = np.linspace(-0.5, 0.5, 1600, dtype=np.float32)  # 0.1 s, 6.4 KB
    written = 0
    with pytest.raises(OSError, match="No space left on device"):
        for _ in range(100):
            writer.write(block)
            written += 1
    writer.close()
    assert 5 <= written <= 10 and writer.frames == written * 1600
    data, info = read_wav(disk / "rec.wav")
    assert info.frames == written * 1600 and (disk / "rec.wav").stat().st_size == info.data_offset + written * 6400
    np.testing.assert_array_equal(data[:, 0], np.tile(block, written))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="/dev/full is Linux's")
def test_a_recording_that_cannot_be_started_is_a_clear_error() -> None:
    """``/dev/full`` fails every write as a full disk does: the header's own write fails at once."""
    with pytest.raises(AudioFileError, match=r"^cannot write /dev/full: No space left on device$"):
        WavWriter(Path("/dev/full"))
