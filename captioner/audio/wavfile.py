"""A small RIFF/WAVE reader and a streaming float32 WAV writer (no third-party dependency).

The standard ``wave`` module reads only integer PCM (and, before Python 3.12, not
WAVE_FORMAT_EXTENSIBLE), so this parser handles what recorders actually write: 8/16/24/32-bit
integer PCM, 32/64-bit IEEE float, plain or extensible headers, odd-sized chunks, and streaming
writers that left the data size at 0 or 0xFFFFFFFF (read to the end of the file).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from captioner.core import SAMPLE_RATE
from captioner.errors import AudioFileError

__all__ = ["WavInfo", "WavWriter", "read_wav", "read_wav_info"]

logger = logging.getLogger(__name__)

PCM, IEEE_FLOAT, EXTENSIBLE = 0x0001, 0x0003, 0xFFFE


@dataclass(frozen=True, slots=True)
class WavInfo:
    """The format of a WAV file.

    Attributes:
        rate: samples per second per channel (Hz).
        channels: interleaved channels.
        bits: bits per sample.
        is_float: IEEE float samples (else signed integer; unsigned for 8-bit).
        data_offset: byte offset of the first sample.
        frames: frames in the file (what is really there, if the header claims more).
    """

    rate: int
    channels: int
    bits: int
    is_float: bool
    data_offset: int
    frames: int


def read_wav_info(path: Path) -> WavInfo:
    """Parse the header of ``path``; :class:`AudioFileError` with a one-line reason if it is not WAV."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            return _parse(f, size, path)
    except OSError as exc:
        raise AudioFileError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _parse(f: BinaryIO, size: int, path: Path) -> WavInfo:
    if size == 0:
        raise AudioFileError(f"{path} is empty")
    head = f.read(12)
    if len(head) < 12 or head[:4] not in (b"RIFF", b"RF64") or head[8:12] != b"WAVE":
        raise AudioFileError(f"{path} is not a WAV file (no RIFF/WAVE header)")
    fmt: tuple[int, int, int, int] | None = None
    while True:
        chunk = f.read(8)
        if len(chunk) < 8:
            raise AudioFileError(f"{path} is truncated: no {'data' if fmt else 'fmt'} chunk")
        cid, clen = chunk[:4], struct.unpack("<I", chunk[4:])[0]
        if cid == b"fmt ":
            body = f.read(clen)
            if clen < 16 or len(body) < 16:
                raise AudioFileError(f"{path} is truncated: short fmt chunk")
            tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
            if tag == EXTENSIBLE and len(body) >= 26:
                tag = struct.unpack("<H", body[24:26])[0]  # first two bytes of the SubFormat GUID
            fmt = (tag, channels, rate, bits)
            if clen % 2:
                f.read(1)
        elif cid == b"data":
            if fmt is None:
                raise AudioFileError(f"{path} has its data chunk before the fmt chunk")
            break
        else:
            f.seek(clen + (clen % 2), 1)
    tag, channels, rate, bits = fmt
    offset = f.tell()
    if tag not in (PCM, IEEE_FLOAT) or (tag == PCM and bits not in (8, 16, 24, 32)) or (
        tag == IEEE_FLOAT and bits not in (32, 64)
    ):
        raise AudioFileError(f"{path}: unsupported WAV encoding (format tag {tag:#x}, {bits} bits)")
    if channels < 1 or rate < 1:
        raise AudioFileError(f"{path}: invalid WAV header ({channels} channels, {rate} Hz)")
    frame_bytes = channels * bits // 8
    available = (size - offset) // frame_bytes
    claimed = clen // frame_bytes if clen not in (0, 0xFFFFFFFF) else available
    if claimed > available:
        logger.warning("%s: header claims %d frames but only %d are present; reading those", path, claimed, available)
    return WavInfo(rate, channels, bits, tag == IEEE_FLOAT, offset, min(claimed, available))


def read_wav(path: Path, start: int = 0, frames: int | None = None) -> tuple[np.ndarray, WavInfo]:
    """Read frames ``[start, start + frames)`` of ``path`` as float32 (frames, channels) in [-1, 1]."""
    info = read_wav_info(path)
    start = min(max(0, start), info.frames)
    count = info.frames - start if frames is None else max(0, min(frames, info.frames - start))
    width = info.bits // 8
    with path.open("rb") as f:
        f.seek(info.data_offset + start * info.channels * width)
        raw = f.read(count * info.channels * width)
    return _decode(raw, info).reshape(-1, info.channels), info


def _decode(raw: bytes, info: WavInfo) -> np.ndarray:
    if info.is_float:
        return np.frombuffer(raw, dtype="<f4" if info.bits == 32 else "<f8").astype(np.float32)
    if info.bits == 8:
        return (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    if info.bits == 16:
        return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    if info.bits == 32:
        return (np.frombuffer(raw, dtype="<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
    v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
    v = np.where(v >= 1 << 23, v - (1 << 24), v)
    return (v / float(1 << 23)).astype(np.float32)


class WavWriter:
    """Append mono float32 samples to a 32-bit float WAV file, keeping the header valid as it grows.

    Written unbuffered, and the sizes in the header rewritten after every ``write``, so the file is
    readable even if the process is killed mid-recording. A write that fails (a full disk) leaves
    the file as it was before it, its header true, and raises ``OSError``: a block is in the file
    whole or not at all.
    """

    def __init__(self, path: Path, rate: int = SAMPLE_RATE) -> None:
        self.path, self.rate, self.frames = path, rate, 0
        self._f: BinaryIO | None = None
        try:
            self._f = path.open("wb", buffering=0)
            self._write_at(0, self._header())
        except OSError as exc:
            self.close()
            raise AudioFileError(f"cannot write {path}: {exc.strerror or exc}") from exc
        self._data_start = len(self._header())

    def _header(self) -> bytes:
        data = self.frames * 4
        fmt = struct.pack("<HHIIHHH", IEEE_FLOAT, 1, self.rate, self.rate * 4, 4, 32, 0)  # cbSize 0: non-PCM needs it
        fact = struct.pack("<4sII", b"fact", 4, self.frames)
        return b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + len(fact) + 8 + data) + b"WAVE" + (
            b"fmt " + struct.pack("<I", len(fmt)) + fmt + fact + b"data" + struct.pack("<I", data)
        )

    def _write_at(self, offset: int, data: bytes) -> None:
        assert self._f is not None
        self._f.seek(offset)
        view = memoryview(data)
        while view:  # an unbuffered write may take part of it
            view = view[self._f.write(view):]

    def write(self, samples: np.ndarray) -> None:
        """Append ``samples`` (n,) float32.

        Raises:
            OSError: it could not be written (the file keeps every earlier block and a true header).
        """
        if self._f is None:
            raise ValueError("write to a closed WavWriter")
        end = self._data_start + self.frames * 4
        try:
            self._write_at(end, np.asarray(samples, dtype="<f4").tobytes())
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._f.fileno(), end)  # the part of this block that got in
            raise
        self.frames += len(samples)
        self._write_at(0, self._header())  # over bytes already there: needs no new room

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> WavWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
