"""Writing test WAV files (16-bit PCM or 32-bit float, any rate and channel count)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np


def write_wav(path: Path, data: np.ndarray, rate: int = 16000, *, float32: bool = False) -> Path:
    """Write ``data`` (frames,) or (frames, channels) in [-1, 1] as a WAV file.

    ``float32`` writes IEEE-float samples (format 3), which keeps NaN and Inf as they are.
    """
    data = np.asarray(data)
    frames = data if data.ndim == 2 else data[:, None]
    channels = frames.shape[1]
    if float32:
        payload, fmt, width = frames.astype("<f4").tobytes(), 3, 4
    else:
        payload, fmt, width = (np.clip(frames, -1, 1) * 32767).astype("<i2").tobytes(), 1, 2
    header = b"RIFF" + struct.pack("<I", 36 + len(payload)) + b"WAVE"
    header += b"fmt " + struct.pack("<IHHIIHH", 16, fmt, channels, rate, rate * channels * width,
                                    channels * width, 8 * width)
    header += b"data" + struct.pack("<I", len(payload))
    Path(path).write_bytes(header + payload)
    return Path(path)


def speech_like(seconds: float, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """A voiced-ish signal: a gliding tone switched on and off, plus a little noise."""
    rng = np.random.default_rng(seed)
    n = round(seconds * rate)
    t = np.arange(n) / rate
    gate = np.sin(2 * np.pi * 0.3 * t) > -0.5
    x = 0.2 * np.sin(2 * np.pi * 220 * t * (1 + 0.1 * np.sin(t))) * gate + 0.03 * rng.standard_normal(n)
    return x.astype(np.float32)


_PASSAGE = (
    "Live captions appear on the screen while people speak. The meeting starts at nine, and the "
    "agenda has three points. First, the budget for next year. Second, the new office. Third, any "
    "other business that people want to raise before lunch."
)


def spoken(seconds: float, rate: int = 16000, pause_s: float = 0.8) -> np.ndarray:
    """Real (synthesised) speech: espeak-ng reading a passage, each sentence followed by a pause,
    repeated and cut to ``seconds``; float32 mono at ``rate``. The speech detector hears it as
    speech, unlike :func:`speech_like` (espeak-ng comes with the dev setup)."""
    import subprocess
    import tempfile

    from captioner.audio import load_audio_file
    from captioner.audio.resample import resample

    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "passage.wav"
        subprocess.run(["espeak-ng", "-s", "165", "-w", str(wav), _PASSAGE], check=True, capture_output=True)
        speech = load_audio_file(wav)
    pieces, n = [], 0
    target = round(seconds * 16000)
    while n < target:
        for block in (speech, np.zeros(round(pause_s * 16000), np.float32)):
            pieces.append(block)
            n += block.size
    audio = np.concatenate(pieces)[:target].astype(np.float32)
    return audio if rate == 16000 else resample(audio, 16000, rate).astype(np.float32)


def slow_down_encoder(monkeypatch, for_s: float, rtf: float) -> list[float]:
    """Make ``OnnxAcousticModel.encode`` sleep ``rtf`` × the audio it encodes, for the first ``for_s``
    wall seconds after its first call: an engine slower than real time, then a recovery. Returns a
    list that holds, once the encoder ran, the monotonic time the slowness ends."""
    import time

    from captioner.engine import OnnxAcousticModel

    encode = OnnxAcousticModel.encode
    slow_until: list[float] = []

    def slow_encode(self, audio, *, native_30s=False):
        if not slow_until:
            slow_until.append(time.monotonic() + for_s)
        if time.monotonic() < slow_until[0]:
            time.sleep(rtf * audio.size / 16_000)
        return encode(self, audio, native_30s=native_30s)

    monkeypatch.setattr(OnnxAcousticModel, "encode", slow_encode)
    return slow_until
