"""One capture source ("mic" or "system"): device stream, ring, resampler, audio clock, recovery.

Everything here except the ring's ``write`` runs on the consumer thread (the one that calls
``AudioCapture.read``). The audio clock of a source counts 16 kHz samples from 0 and every block
starts where the previous one ended, so a consumer may concatenate blocks blindly:

* audio dropped because the ring was full is replaced by the same length of silence
  (resampled with the stream, so the filter state stays right) and reported as an ``overflow``;
* while a device is lost, the outage is filled with silence as long as the outage measured on
  the monotonic clock, so the clock keeps up with wall time and stays aligned with the other
  source in "both" mode;
* everything the ring held when the device vanished is still delivered (the resampler is
  flushed), before the stream is reopened on the current default device.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from captioner.audio.backends import CaptureBackend, OpenedDevice
from captioner.audio.resample import Resampler, downmix
from captioner.audio.ring import BlockRing, RingItem
from captioner.core import SAMPLE_RATE, AudioEvent, Source
from captioner.errors import AudioDeviceError

__all__ = ["CaptureCounters", "SourceCapture"]

logger = logging.getLogger(__name__)

LABELS = {"mic": "microphone", "system": "system audio"}


@dataclass(frozen=True, slots=True)
class CaptureCounters:
    """Counters of one source since capture started.

    Attributes:
        blocks: device blocks consumed.
        samples: 16 kHz samples emitted (the source's audio clock).
        dropped_blocks: device blocks dropped because the ring was full (consumer too slow).
        dropped_samples: 16 kHz samples of silence that replaced them.
        device_overflows: callbacks whose status flags reported a device-side overflow.
        reopens: times the device was reopened after being lost.
        lost_samples: 16 kHz samples of silence that filled device outages.
    """

    blocks: int = 0
    samples: int = 0
    dropped_blocks: int = 0
    dropped_samples: int = 0
    device_overflows: int = 0
    reopens: int = 0
    lost_samples: int = 0


@dataclass(slots=True)
class _Generation:
    """One opened device stream and its ring (a new one after every reopen)."""

    opened: OpenedDevice
    ring: BlockRing
    started_at: float
    finished: bool = False  # set by the stream's finished callback
    last_end: float | None = None  # monotonic end time of the newest consumed block
    dropped_blocks_seen: int = 0
    flags_seen: int = 0


class SourceCapture:
    """Capture of one source; owned by :class:`~captioner.audio.capture.AudioCapture`.

    Args:
        source: the tag of every block and event.
        device: device name/index (microphone) or None for the default.
        backend: opens device streams.
        bell: shared wake-up queue; the ring rings it after each block.
        token: this source's token on the bell.
        emit: receives ``(source, start, samples)`` for each 16 kHz chunk.
        event: receives each :class:`AudioEvent`.
        ring_s: ring capacity in seconds of audio.
        stall_s: no block for this long after data has flowed, with the stream inactive,
            means the device is lost; with the stream still claiming to be active, three times
            this long.
        retry_s: pause between attempts to reopen a lost device.
        start_grace_s: how long a fresh stream may take to deliver its first block.
        origin: maps the monotonic start time of this source's first block to the monotonic time
            of sample 0 of its clock; "both" mode passes one shared origin so the two clocks
            are aligned. None: the first block starts the clock.
    """

    def __init__(
        self,
        source: Source,
        device: str | int | None,
        backend: CaptureBackend,
        bell: queue.SimpleQueue[int],
        token: int,
        emit: Callable[[Source, int, np.ndarray], None],
        event: Callable[[AudioEvent], None],
        ring_s: float = 4.0,
        stall_s: float = 1.0,
        retry_s: float = 0.5,
        start_grace_s: float = 5.0,
        origin: Callable[[float], float] | None = None,
    ) -> None:
        self._origin = origin
        self.source, self.device, self._backend = source, device, backend
        self._bell, self._token, self._emit, self._event = bell, token, emit, event
        self._ring_s, self._stall_s, self._retry_s, self._grace_s = ring_s, stall_s, retry_s, start_grace_s
        self._gen: _Generation | None = None
        self._resampler: Resampler | None = None
        self.clock = 0  # next 16 kHz sample index to emit
        self._started = False  # first block seen (clock origin fixed)
        self._outage_from: float | None = None  # end time of the last block before a loss
        self._lost = False
        self._next_retry = 0.0
        self._failing = False
        self._stopping = False
        self._c = {k: 0 for k in CaptureCounters.__slots__}
        self.level: tuple[float, float] = (0.0, 0.0)
        self.device_name = ""

    # -- lifecycle -------------------------------------------------------------------------
    def open(self, device: str | int | None) -> None:
        """Open and start a stream on ``device``; raises :class:`AudioDeviceError`."""
        gen_box: list[_Generation] = []

        def finished() -> None:  # called by PortAudio / the reader thread when the stream ends
            if gen_box:
                gen_box[0].finished = True
            self._bell.put(self._token)

        ring_box: list[BlockRing] = []

        def callback(indata: np.ndarray, frames: int, time_info: object, status: object) -> None:
            ring_box[0].write(indata, frames, time_info, status)

        opened = self._backend.open(self.source, device, callback, finished)
        slots = max(4, int(self._ring_s * opened.samplerate / opened.blocksize) + 1)
        ring = BlockRing(slots, 2 * opened.blocksize, opened.channels, self._bell, self._token)
        ring_box.append(ring)
        gen = _Generation(opened, ring, time.monotonic())
        gen_box.append(gen)
        self._gen, self._resampler = gen, Resampler(opened.samplerate, SAMPLE_RATE)
        self.device_name = opened.name
        try:
            opened.stream.start()
        except Exception as exc:  # PortAudioError and friends: the device refused to start
            _close_quietly(opened)
            self._gen = None
            raise AudioDeviceError(f"cannot start {LABELS[self.source]} {opened.name!r}: {exc}") from exc
        logger.info("%s: capturing from %s at %d Hz, %d ch", self.source, opened.name, opened.samplerate, opened.channels)

    def close(self) -> None:
        """Stop the stream and deliver everything captured so far (flushes the resampler)."""
        self._stopping = True
        gen = self._gen
        if gen is not None:
            _close_quietly(gen.opened)
            self._drain(gen)
            self._flush()
            self._gen = None

    # -- consumer side ---------------------------------------------------------------------
    def poll(self, now: float) -> None:
        """Move captured blocks to ``emit``; detect a lost device and try to reopen it."""
        if self._stopping:
            return
        gen = self._gen
        if gen is not None:
            self._drain(gen)
            if self._is_lost(gen, now):
                self._on_lost(gen, now)
        if self._lost and now >= self._next_retry:
            self._reopen(now)

    def first_begin(self) -> float | None:
        """Monotonic start time of this source's very first block, while it waits in the ring."""
        gen = self._gen
        if self._started or gen is None or (head := gen.ring.peek_time()) is None:
            return None
        return head[1] - head[0] / gen.opened.samplerate

    def counters(self) -> CaptureCounters:
        """A snapshot of the counters."""
        c = dict(self._c)
        c["samples"] = self.clock
        return CaptureCounters(**c)

    def _drain(self, gen: _Generation) -> None:
        ring = gen.ring
        chunks: list[np.ndarray] = []
        at = self.clock  # where the next chunk starts on the audio clock
        while (item := ring.take()) is not None:
            chunks.append(self._process(gen, item, at))
            at += len(chunks[-1])
        if gen.flags_seen != ring.status_flags:
            self._c["device_overflows"] += ring.status_flags - gen.flags_seen
            gen.flags_seen = ring.status_flags
        if chunks:
            self._push(np.concatenate(chunks))

    def _process(self, gen: _Generation, item: RingItem, at: int) -> np.ndarray:
        """Resample one block (starting at ``at`` on the audio clock); silence for what came before it
        (clock origin, outage, overflow)."""
        assert self._resampler is not None
        rate = gen.opened.samplerate
        frames = len(item.data)
        begin = item.end_time - frames / rate
        lead = np.zeros(0, dtype=np.float32)
        if gen.last_end is None:  # first block of this stream
            origin = self._origin_for(begin)
            if origin is not None:
                n = max(0, round((begin - origin) * SAMPLE_RATE))
                lead = np.zeros(n, dtype=np.float32)
                if self._started:
                    self._c["lost_samples"] += n
            self._started = True
        gen.last_end = item.end_time
        self._c["blocks"] += 1
        parts = [lead]
        if item.gap_frames:
            dropped = gen.ring.dropped_blocks - gen.dropped_blocks_seen
            gen.dropped_blocks_seen = gen.ring.dropped_blocks
            self._c["dropped_blocks"] += dropped
            silence = self._resampler.process(np.zeros(item.gap_frames, dtype=np.float32))
            self._c["dropped_samples"] += round(item.gap_frames * SAMPLE_RATE / rate)
            parts.append(silence)
            self._event(
                AudioEvent(
                    "overflow",
                    self.source,
                    f"dropped {item.gap_frames / rate:.2f} s of {LABELS[self.source]}: "
                    "processing fell behind (replaced by silence)",
                    at + len(lead),
                    item.gap_frames / rate,
                )
            )
        parts.append(self._resampler.process(downmix(item.data)))
        return np.concatenate(parts)

    def _origin_for(self, begin: float) -> float | None:
        """Where the clock of a new stream starts: after an outage, the end of the last block."""
        if self._outage_from is not None:
            origin, self._outage_from = self._outage_from, None
            return origin
        return None if self._origin is None else self._origin(begin)

    def _push(self, samples: np.ndarray) -> None:
        if not len(samples):
            return
        start = self.clock
        self.clock += len(samples)
        self.level = (float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))), float(np.max(np.abs(samples))))
        self._emit(self.source, start, samples)

    def _flush(self) -> None:
        if self._resampler is not None:
            self._push(self._resampler.flush())
            self._resampler = None

    # -- device loss -----------------------------------------------------------------------
    def _is_lost(self, gen: _Generation, now: float) -> bool:
        if gen.finished:
            return True
        last = gen.ring.last_callback or gen.started_at
        quiet = now - last
        limit = self._stall_s if gen.last_end is not None else self._grace_s
        if quiet < limit:
            return False
        try:
            active = bool(gen.opened.stream.active)
        except Exception as exc:  # PortAudioError when the device vanished under the stream
            logger.info("%s: stream check failed: %s", self.source, exc)
            return True
        return not active or quiet >= 3 * limit

    def _on_lost(self, gen: _Generation, now: float) -> None:
        name = gen.opened.name
        _close_quietly(gen.opened)
        self._drain(gen)  # anything that arrived meanwhile
        self._flush()
        self._outage_from = gen.last_end if gen.last_end is not None else gen.started_at
        self._gen = None
        self._lost, self._next_retry, self._failing = True, now, False
        logger.warning("%s: device %s lost", self.source, name)
        self._event(AudioEvent("device_lost", self.source, f"{LABELS[self.source]} device {name!r} was lost; reopening", self.clock))

    def _reopen(self, now: float) -> None:
        refresh = getattr(self._backend, "refresh", None)
        if refresh is not None:
            refresh()
        try:
            self.open(None)  # the current default device (the named one is what vanished)
        except AudioDeviceError as exc:
            self._next_retry = now + self._retry_s
            if not self._failing:
                self._failing = True
                self._event(AudioEvent("device_error", self.source, str(exc), self.clock))
            logger.debug("%s: reopen failed: %s", self.source, exc)
            return
        self._lost = False
        self._c["reopens"] += 1
        self._event(
            AudioEvent(
                "device_reopened",
                self.source,
                f"{LABELS[self.source]} reopened on {self.device_name!r}",
                self.clock,
            )
        )


def _close_quietly(opened: OpenedDevice) -> None:
    """Stop and close a stream whose device may already be gone (errors are expected then)."""
    for step in (opened.stream.stop, opened.stream.close):
        try:
            step()
        except Exception as exc:  # PortAudioError from a vanished device: nothing left to save
            logger.debug("closing %s: %s", opened.name, exc)
