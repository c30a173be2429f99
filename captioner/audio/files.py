"""Audio files as 16 kHz mono: streamed in blocks, loaded whole, or replayed behind the capture interface.

WAV is read by :mod:`captioner.audio.wavfile` (any rate, channel count, 8/16/24/32-bit integer or
32/64-bit float); other formats are decoded by ``ffmpeg`` when it is on PATH. Everything is
resampled with :class:`captioner.audio.resample.Resampler`; NaN and Inf samples become 0 (logged).

:class:`AudioFileReader` streams a file (WAV read block by block, ffmpeg's output read from its
pipe as it decodes), so a multi-hour file costs one block of memory, not the whole file in float32
(3 h: 0.7 GB); ``-`` is standard input, any format ffmpeg reads (``ffmpeg … -f wav - | captioner
transcribe -``); :func:`load_audio_file` is the whole file at once, for short clips.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from captioner.audio.resample import Resampler, downmix
from captioner.audio.wavfile import read_wav, read_wav_info
from captioner.core import SAMPLE_RATE, AudioBlock, AudioEvent, Source
from captioner.errors import AudioFileError

__all__ = ["STDIN", "AudioFileReader", "FileSource", "load_audio_file"]

logger = logging.getLogger(__name__)

STDIN = "-"  # the file name that means standard input
FILE_BLOCK_S = 0.1  # FileSource block length in seconds
READ_BLOCK_S = 10.0  # AudioFileReader block length in seconds of the file (0.6 MB of float32 at 16 kHz)


def _finite(x: np.ndarray, path: Path, *, log: bool = True) -> tuple[np.ndarray, int]:
    """``x`` with NaN/Inf replaced by 0, and how many were replaced (logged with ``log``)."""
    bad = ~np.isfinite(x)
    count = int(bad.sum())
    if count:
        if log:
            logger.warning("%s: replaced %d NaN/Inf samples by 0", path, count)
        x = np.where(bad, np.float32(0.0), x).astype(np.float32)
    return x, count


def _is_wav(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            head = f.read(12)
    except OSError as exc:
        raise AudioFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE"


def load_audio_file(path: str | Path) -> np.ndarray:
    """The whole file as 16 kHz mono float32 (n,) (a long file: :class:`AudioFileReader`).

    Raises:
        AudioFileError: missing, empty, truncated, not audio, or not WAV without ffmpeg.
    """
    blocks = list(AudioFileReader(path))
    return np.concatenate(blocks) if blocks else np.zeros(0, np.float32)


class AudioFileReader:
    """A file as consecutive 16 kHz mono float32 blocks, decoded as they are read.

    Iterating yields blocks of about ``block_s`` seconds (never more than ``block_s`` plus the
    resampler's few samples of flush; the last may be shorter); their concatenation is what
    :func:`load_audio_file` returns. A WAV is read ``block_s`` at a time through one
    :class:`Resampler` (the same samples as resampling it in one go); another format is decoded by
    ``ffmpeg`` into a pipe that is read as the blocks are consumed (stopping early ends ffmpeg).
    NaN/Inf samples become 0, logged once with their count when the file has been read.

    Args:
        path: the file.
        block_s: seconds of the file per block.

    Raises:
        AudioFileError: at construction for a missing, empty or unreadable file, a broken WAV
            header, or not WAV without ffmpeg; while iterating when ffmpeg fails or finds no audio.
    """

    def __init__(self, path: str | Path, block_s: float = READ_BLOCK_S) -> None:
        self.path = Path(path)
        self.block_s = block_s
        self._stdin = str(path) == STDIN
        if self._stdin:  # a stream has no header to read ahead of it, and may be any format: ffmpeg's
            self._wav = None
            self._ffmpeg = shutil.which("ffmpeg")
            if self._ffmpeg is None:
                raise AudioFileError("reading audio from standard input ('-') needs ffmpeg; install it, or "
                                     "give a file")
            return
        if not self.path.is_file():
            raise AudioFileError(f"{self.path} does not exist or is not a file")
        if self.path.stat().st_size == 0:
            raise AudioFileError(f"{self.path} is empty")
        self._wav = read_wav_info(self.path) if _is_wav(self.path) or self.path.suffix.lower() == ".wav" else None
        self._ffmpeg = None if self._wav is not None else shutil.which("ffmpeg")
        if self._wav is None and self._ffmpeg is None:
            raise AudioFileError(f"{self.path} is not a WAV file; install ffmpeg to read other formats")

    @property
    def _name(self) -> str:
        return "standard input" if self._stdin else str(self.path)

    @property
    def duration_s(self) -> float | None:
        """Length in seconds at 16 kHz, from the WAV header; None for other formats (known once read)."""
        if self._wav is None:
            return None
        return -(-self._wav.frames * SAMPLE_RATE // self._wav.rate) / SAMPLE_RATE

    def __iter__(self) -> Iterator[np.ndarray]:
        bad = 0
        for block in self._wav_blocks() if self._wav is not None else self._ffmpeg_blocks():
            block, n = _finite(block, self.path, log=False)
            bad += n
            if len(block):
                yield block
        if bad:
            logger.warning("%s: replaced %d NaN/Inf samples by 0", self.path, bad)

    def _wav_blocks(self) -> Iterator[np.ndarray]:
        info = self._wav
        assert info is not None
        resampler = Resampler(info.rate, SAMPLE_RATE)
        frames = max(1, round(self.block_s * info.rate))
        for start in range(0, info.frames, frames):
            data, _ = read_wav(self.path, start, frames)
            yield resampler.process(downmix(data))
        yield resampler.flush()

    def _ffmpeg_blocks(self) -> Iterator[np.ndarray]:
        assert self._ffmpeg is not None
        # a stream is probed on 32 kB, not ffmpeg's 5 MB (at 16 kHz 16-bit WAV 6 s before its first
        # sample came out; now 2 s, the WAV reader's own 64 kB look for S/PDIF data): the same samples
        # for WAV, FLAC, MP3, Ogg, Opus, WebM and AAC
        source = ["-probesize", "32768", "-i", "pipe:0"] if self._stdin else ["-nostdin", "-i", str(self.path)]
        cmd = [self._ffmpeg, "-v", "error", *source, "-f", "f32le", "-ac", "1", "-ar", str(SAMPLE_RATE), "-"]
        chunk = 4 * max(1, round(self.block_s * SAMPLE_RATE))
        with tempfile.TemporaryFile() as err:  # a file, not a pipe: ffmpeg never blocks on its stderr
            try:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err,
                                        stdin=sys.stdin.buffer if self._stdin else subprocess.DEVNULL)
            except OSError as exc:
                raise AudioFileError(f"ffmpeg could not decode {self._name}: {exc}") from exc
            assert proc.stdout is not None
            got = 0
            # a file is read in whole blocks; a stream as it comes (what is there, at most a block), so
            # the words of standard input fed as it is spoken come as they are spoken, not 10 s later
            read = proc.stdout.read1 if self._stdin else proc.stdout.read  # type: ignore[attr-defined]
            rest = b""  # a sample's bytes split between two reads
            try:
                while raw := read(chunk):
                    got += len(raw)
                    raw, cut = rest + raw, (len(rest) + len(raw)) // 4 * 4
                    raw, rest = raw[:cut], raw[cut:]
                    yield np.frombuffer(raw, dtype="<f4").astype(np.float32)
                code = proc.wait()
            finally:
                if proc.poll() is None:  # the consumer stopped early
                    proc.kill()
                    proc.wait()
                proc.stdout.close()
            if code != 0:
                err.seek(0)
                why = (err.read().decode(errors="replace").strip().splitlines() or ["unknown error"])[-1]
                raise AudioFileError(f"ffmpeg could not decode {self._name}: {why}")
            if got == 0:
                raise AudioFileError(f"{self._name} contains no audio")


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
            out = self._resampler.process(_finite(downmix(data), self.path)[0])
            if self._pos >= self._info.frames:
                out = np.concatenate([out, self._resampler.flush()])
        return out

    def events(self) -> list[AudioEvent]:
        """A file has no device events."""
        return []

    def level(self, source: Source) -> tuple[float, float]:
        """Latest (rms, peak) of the replayed audio."""
        return self._level if source == self.source else (0.0, 0.0)
