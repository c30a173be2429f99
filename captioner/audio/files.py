"""Audio files: load a whole file as 16 kHz mono, or replay a WAV behind the capture interface.

WAV is read by :mod:`captioner.audio.wavfile` (any rate, channel count, 8/16/24/32-bit integer or
32/64-bit float); other formats are decoded by ``ffmpeg`` when it is on PATH. Everything is
resampled with :class:`captioner.audio.resample.Resampler`; NaN and Inf samples become 0 (logged).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np

from captioner.audio.resample import Resampler, downmix
from captioner.audio.wavfile import read_wav, read_wav_info
from captioner.core import SAMPLE_RATE, AudioBlock, AudioEvent, Source
from captioner.errors import AudioFileError

__all__ = ["FileSource", "load_audio_file"]

logger = logging.getLogger(__name__)

FILE_BLOCK_S = 0.1  # FileSource block length in seconds
FFMPEG_TIMEOUT_S = 600.0


def _finite(x: np.ndarray, path: Path) -> np.ndarray:
    bad = ~np.isfinite(x)
    if bad.any():
        logger.warning("%s: replaced %d NaN/Inf samples by 0", path, int(bad.sum()))
        x = np.where(bad, np.float32(0.0), x).astype(np.float32)
    return x


def _is_wav(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(12)
    except OSError as exc:
        raise AudioFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE"


def load_audio_file(path: str | Path) -> np.ndarray:
    """The whole file as 16 kHz mono float32 (n,).

    Raises:
        AudioFileError: missing, empty, truncated, not audio, or not WAV without ffmpeg.
    """
    path = Path(path)
    if not path.is_file():
        raise AudioFileError(f"{path} does not exist or is not a file")
    if path.stat().st_size == 0:
        raise AudioFileError(f"{path} is empty")
    if _is_wav(path) or path.suffix.lower() == ".wav":
        data, info = read_wav(path)
        mono = _finite(downmix(data), path)
        r = Resampler(info.rate, SAMPLE_RATE)
        return np.concatenate([r.process(mono), r.flush()])
    return _finite(_ffmpeg_decode(path), path)


def _ffmpeg_decode(path: Path) -> np.ndarray:
    exe = shutil.which("ffmpeg")
    if exe is None:
        raise AudioFileError(f"{path} is not a WAV file; install ffmpeg to read other formats")
    cmd = [exe, "-nostdin", "-v", "error", "-i", str(path), "-f", "f32le", "-ac", "1", "-ar", str(SAMPLE_RATE), "-"]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=FFMPEG_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AudioFileError(f"ffmpeg could not decode {path}: {exc}") from exc
    if done.returncode != 0:
        why = (done.stderr.decode(errors="replace").strip().splitlines() or ["unknown error"])[-1]
        raise AudioFileError(f"ffmpeg could not decode {path}: {why}")
    if not done.stdout:
        raise AudioFileError(f"{path} contains no audio")
    return np.frombuffer(done.stdout, dtype="<f4").astype(np.float32)


class FileSource:
    """Replays a WAV file as 16 kHz :class:`AudioBlock` values, behind the capture interface.

    Args:
        path: a WAV file (any rate / channels / sample format :func:`read_wav` reads).
        realtime: release blocks at the pace of the audio (like a device); otherwise as fast as
            they are read.
        source: the tag of the blocks.

    Blocks are 0.1 s long (the last may be shorter), contiguous from sample 0. ``read`` returns None
    once the file is exhausted and ``finished`` turns True.
    """

    def __init__(self, path: str | Path, realtime: bool = False, source: Source = "system") -> None:
        self.path = Path(path)
        self.realtime, self.source = realtime, source
        self._info = read_wav_info(self.path)  # fail early, with the file's name
        self._resampler = Resampler(self._info.rate, SAMPLE_RATE)
        self._pos = 0  # frames read from the file
        self._clock = 0  # 16 kHz samples emitted
        self._t0: float | None = None
        self._stop = threading.Event()
        self._done = False
        self._level: tuple[float, float] = (0.0, 0.0)
        self._block = max(1, round(self._info.rate * FILE_BLOCK_S))

    def start(self) -> None:
        """Start the clock of a real-time replay."""
        self._t0 = time.monotonic()

    def stop(self) -> None:
        """Stop: ``read`` returns None from now on."""
        self._stop.set()
        self._done = True

    def __enter__(self) -> FileSource:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def finished(self) -> bool:
        """True once the whole file has been read (or the source was stopped)."""
        return self._done

    @property
    def sources(self) -> tuple[Source, ...]:
        """The one tag of the blocks."""
        return (self.source,)

    @property
    def duration_s(self) -> float:
        """Length of the file in seconds."""
        return self._info.frames / self._info.rate

    def read(self, timeout: float) -> AudioBlock | None:
        """The next block; in real time waits (at most ``timeout`` s) until it is due."""
        if self._done:
            return None
        if self.realtime:
            if self._t0 is None:
                self._t0 = time.monotonic()
            due = self._t0 + (self._pos + self._block) / self._info.rate
            wait = due - time.monotonic()
            if wait > 0 and self._stop.wait(min(wait, max(0.0, timeout))):
                return None
            if due - time.monotonic() > 0:
                return None
        samples = self._next_samples()
        if not len(samples):
            self._done = True
            return None
        block = AudioBlock(self.source, self._clock, samples)
        self._clock += len(samples)
        self._level = (float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))), float(np.max(np.abs(samples))))
        return block

    def _next_samples(self) -> np.ndarray:
        out = np.zeros(0, dtype=np.float32)
        while not len(out) and self._pos < self._info.frames:
            data, _ = read_wav(self.path, self._pos, self._block)
            self._pos += len(data)
            out = self._resampler.process(_finite(downmix(data), self.path))
            if self._pos >= self._info.frames:
                out = np.concatenate([out, self._resampler.flush()])
        return out

    def events(self) -> list[AudioEvent]:
        """A file has no device events."""
        return []

    def level(self, source: Source) -> tuple[float, float]:
        """Latest (rms, peak) of the replayed audio."""
        return self._level if source == self.source else (0.0, 0.0)
