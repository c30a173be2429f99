"""Live capture: system audio, the microphone, or both, as 16 kHz mono :class:`AudioBlock` values.

The engine worker thread owns an :class:`AudioCapture`: it starts it (a context manager), blocks on
:meth:`AudioCapture.read` and drains :meth:`AudioCapture.events` now and then. Device callbacks
only copy into bounded rings (:mod:`captioner.audio.ring`); downmixing, resampling, clock keeping
and device-loss recovery all happen inside ``read`` on the worker thread.

"both" keeps the sources apart: blocks are tagged ``"mic"`` or ``"system"``, each source's clock
counts from the first sample captured by *either* source, so sample ``k`` of both clocks is the
same instant (to within a device block, ~20 ms). With ``mix_both`` the two are summed into one
stream tagged ``"system"`` (the one caption line), clipped to [-1, 1].
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from captioner.audio.backends import CaptureBackend, SystemBackend
from captioner.audio.source_capture import CaptureCounters, SourceCapture
from captioner.core import (
    CAPTURE_SOURCES,
    SAMPLE_RATE,
    AudioBlock,
    AudioEvent,
    CaptureSource,
    Source,
    stream_sources,
)
from captioner.errors import AudioDeviceError

__all__ = ["CAPTURE_SOURCES", "AudioCapture", "CaptureConfig", "CaptureSource"]

logger = logging.getLogger(__name__)

MIX_MAX_LAG = SAMPLE_RATE  # 1 s: a source further behind than this is mixed as silence
TICK_S = 0.1  # the longest read() sleeps without checking devices (watchdog and retries)


@dataclass(frozen=True, slots=True)
class CaptureConfig:
    """What to capture.

    Attributes:
        source: ``"system"`` (loopback / monitor), ``"mic"`` or ``"both"``.
        device: microphone name (substring) or PortAudio index; None for the default input.
        mix_both: in "both" mode, sum the sources into one ``"system"`` stream.
        ring_s: seconds of audio each source's ring holds before blocks are dropped (replaced by
            silence, reported as an ``overflow`` event that the worker turns into a gap). Longer
            than one slow engine round, so that the worker's lag rule, which sees the ring's backlog
            between rounds, decides what is skipped rather than the ring.
        stall_s: seconds without audio after which a stream is checked and declared lost.
        retry_s: seconds between attempts to reopen a lost device.
    """

    source: CaptureSource = "system"
    device: str | int | None = None
    mix_both: bool = False
    ring_s: float = 20.0  # a closing round over 20 s of speech took 15 s on a third of a core
    stall_s: float = 1.0
    retry_s: float = 0.5

    def __post_init__(self) -> None:
        if self.source not in CAPTURE_SOURCES:
            raise ValueError(f"capture source must be one of {', '.join(CAPTURE_SOURCES)}, got {self.source!r}")
        if self.ring_s <= 0 or self.stall_s <= 0 or self.retry_s <= 0:
            raise ValueError("ring_s, stall_s and retry_s must be positive")


class _Mixer:
    """Sums the aligned 16 kHz streams of both sources into one (clock-aligned, clipped)."""

    def __init__(self) -> None:
        self.clock = 0
        self._pending: dict[Source, list[np.ndarray]] = {"mic": [], "system": []}
        self._start: dict[Source, int] = {"mic": 0, "system": 0}
        self._end: dict[Source, int] = {"mic": 0, "system": 0}

    def add(self, source: Source, start: int, samples: np.ndarray) -> None:
        if not self._pending[source]:
            self._start[source] = start
        self._pending[source].append(samples)
        self._end[source] = start + len(samples)

    def take(self, final: bool = False) -> tuple[int, np.ndarray] | None:
        """Mix what both sources have; a source lagging over 1 s (or ``final``) counts as silence."""
        lo, hi = min(self._end.values()), max(self._end.values())
        upto = hi if final else max(lo, hi - MIX_MAX_LAG)
        if upto <= self.clock:
            return None
        out = np.zeros(upto - self.clock, dtype=np.float32)
        for src in ("mic", "system"):
            buf = np.concatenate(self._pending[src]) if self._pending[src] else np.zeros(0, np.float32)
            a = self._start[src]
            lo_i, hi_i = max(self.clock, a), min(upto, a + len(buf))
            if hi_i > lo_i:
                out[lo_i - self.clock : hi_i - self.clock] += buf[lo_i - a : hi_i - a]
            rest = buf[max(0, upto - a) :]
            self._pending[src] = [rest] if len(rest) else []
            self._start[src] = max(a, upto)
        start, self.clock = self.clock, upto
        np.clip(out, -1.0, 1.0, out=out)
        return start, out


class AudioCapture:
    """Capture one or two live sources as 16 kHz mono float32 blocks.

    Args:
        config: what to capture.
        backend: opens device streams (default: :class:`SystemBackend`, the real devices).

    Use as a context manager (or ``start()``/``stop()``) on the thread that calls ``read``: start,
    read and stop are not thread-safe with each other. ``level``, ``events`` and ``counters`` may be
    called from any thread (they read values, never the rings). To end a blocked ``read`` from
    elsewhere, read with a short timeout (0.1–0.5 s) and check a stop flag between reads.
    """

    def __init__(self, config: CaptureConfig, backend: CaptureBackend | None = None) -> None:
        self.config = config
        self._backend = backend if backend is not None else SystemBackend()
        self._bell: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._out: deque[AudioBlock] = deque()
        self._events: deque[AudioEvent] = deque()
        self._origin: float | None = None
        self._origin_lock = threading.Lock()
        self._mixer = _Mixer() if config.source == "both" and config.mix_both else None
        names: tuple[Source, ...] = ("system", "mic") if config.source == "both" else (config.source,)
        shared = self._shared_origin if config.source == "both" else None
        self._sources = [
            SourceCapture(
                name,
                config.device if name == "mic" else None,
                self._backend,
                self._bell,
                token,
                self._on_samples,
                self._events.append,
                ring_s=config.ring_s,
                stall_s=config.stall_s,
                retry_s=config.retry_s,
                origin=shared,
            )
            for token, name in enumerate(names)
        ]
        self._running = False
        self._stopped = False

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Open every source; raises :class:`AudioDeviceError` naming the device that failed."""
        if self._running:
            return
        try:
            for src in self._sources:
                src.open(src.device)
        except AudioDeviceError:
            for src in self._sources:
                src.close()
            raise
        self._running = True

    def stop(self) -> None:
        """Close the devices; blocks captured so far stay readable until ``finished``."""
        if self._stopped:
            return
        self._stopped = True
        self._running = False
        for src in self._sources:
            src.close()
        if self._mixer is not None and (mixed := self._mixer.take(final=True)) is not None:
            self._out.append(AudioBlock("system", *mixed))
        self._bell.put(-1)  # wake a reader blocked in read()

    def __enter__(self) -> AudioCapture:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def finished(self) -> bool:
        """True once stopped and every captured block has been read."""
        return self._stopped and not self._out

    @property
    def device_names(self) -> dict[Source, str]:
        """The device each source currently captures from."""
        return {s.source: s.device_name for s in self._sources}

    @property
    def sources(self) -> tuple[Source, ...]:
        """Tags of the blocks this capture produces (``("system",)`` when mixing)."""
        return stream_sources(self.config.source, self.config.mix_both)

    # -- consumer API ----------------------------------------------------------------------
    def read(self, timeout: float) -> AudioBlock | None:
        """Block until audio is available (at most ``timeout`` s); None on timeout or at the end."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            if self._out:
                return self._out.popleft()
            if self._running:
                now = time.monotonic()
                if self._origin is None and len(self._sources) > 1:
                    self._fix_origin()
                for src in self._sources:
                    src.poll(now)
                if self._mixer is not None and (mixed := self._mixer.take()) is not None:
                    self._out.append(AudioBlock("system", *mixed))
                if self._out:
                    return self._out.popleft()
            if not self._running:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            with contextlib.suppress(queue.Empty):  # woken by a block, or time to check devices
                self._bell.get(timeout=min(remaining, TICK_S))

    def events(self) -> list[AudioEvent]:
        """Every event since the last call (device lost/reopened/error, overflow); never blocks."""
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    def level(self, source: Source) -> tuple[float, float]:
        """Latest (rms, peak) of ``source``'s 16 kHz audio, in full scale; (0, 0) if unknown."""
        for src in self._sources:
            if src.source == source:
                return src.level
        return (0.0, 0.0)

    def counters(self, source: Source) -> CaptureCounters:
        """Counters of ``source`` (overflows, dropped blocks, reopens, clock)."""
        for src in self._sources:
            if src.source == source:
                return src.counters()
        raise KeyError(f"this capture has no {source!r} source")

    # -- internals -------------------------------------------------------------------------
    def _on_samples(self, source: Source, start: int, samples: np.ndarray) -> None:
        if self._mixer is not None:
            self._mixer.add(source, start, samples)
        else:
            self._out.append(AudioBlock(source, start, samples))

    def _fix_origin(self) -> None:
        """Sample 0 of both clocks: the start of the earliest first block now waiting."""
        begins = [b for src in self._sources if (b := src.first_begin()) is not None]
        if begins:
            with self._origin_lock:
                self._origin = min(begins)

    def _shared_origin(self, begin: float) -> float:
        with self._origin_lock:
            if self._origin is None:
                self._origin = begin
            return self._origin
