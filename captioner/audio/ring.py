"""The bounded, preallocated block ring between a device callback and the capture consumer.

Single producer (the PortAudio callback, or a reader thread) and single consumer (the thread that
calls ``AudioCapture.read``). The producer side, :meth:`BlockRing.write`, is what runs in the
real-time callback: it copies the block into a preallocated slot, or counts it as dropped when the
ring is full. It never blocks, logs or allocates more than a few small Python objects.

NB: the two sides share plain integer counters. ``_written`` is only written by the producer and
``_read`` only by the consumer; each is published after the slot data it guards (the GIL orders
these stores), so no lock is needed.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass

import numpy as np

__all__ = ["BlockRing", "RingItem"]


@dataclass(frozen=True, slots=True)
class RingItem:
    """One block taken out of the ring by the consumer.

    Attributes:
        data: float32 array (frames, channels), a copy the consumer owns.
        gap_frames: frames dropped (ring full) just before this block, at the device rate.
        end_time: ``time.monotonic()`` seconds when the callback delivered the block.
    """

    data: np.ndarray
    gap_frames: int
    end_time: float


class BlockRing:
    """A ring of ``slots`` preallocated blocks of up to ``max_frames`` × ``channels`` float32.

    Args:
        slots: capacity in blocks (the bound).
        max_frames: largest block the callback may deliver; longer blocks are cut and the rest is
            counted as dropped.
        channels: channels of the device stream.
        bell: a queue on which the producer puts ``token`` after each block, so the consumer can
            block on it instead of polling; several rings may share one bell.
        token: the small int this ring rings the bell with.
    """

    def __init__(
        self,
        slots: int,
        max_frames: int,
        channels: int,
        bell: queue.SimpleQueue[int] | None = None,
        token: int = 0,
    ) -> None:
        if slots < 2 or max_frames < 1 or channels < 1:
            raise ValueError(f"bad ring shape: {slots} slots × {max_frames} frames × {channels} ch")
        self._data = np.zeros((slots, max_frames, channels), dtype=np.float32)
        self._frames = [0] * slots
        self._gaps = [0] * slots
        self._times = [0.0] * slots
        self._slots = slots
        self._max_frames = max_frames
        self._written = 0  # producer's count of stored blocks
        self._read = 0  # consumer's count of taken blocks
        self._pending_gap = 0  # frames dropped since the last stored block (producer side)
        self._bell = bell
        self._token = token
        # Counters (producer side; the consumer only reads them).
        self.dropped_blocks = 0
        self.dropped_frames = 0
        self.status_flags = 0  # callbacks that reported a device-side overflow/underflow
        self.last_callback = 0.0  # monotonic seconds of the last callback (0.0: none yet)

    @property
    def channels(self) -> int:
        """Channels per frame."""
        return int(self._data.shape[2])

    def write(self, indata: np.ndarray, frames: int, time_info: object = None, status: object = None) -> None:
        """Copy one device block into the ring (the real-time callback; sounddevice's signature).

        Args:
            indata: float32 array (frames, channels) owned by the device; copied, never kept.
            frames: number of frames in ``indata``.
            time_info: ignored (PortAudio's timestamps are per-stream; the monotonic clock is not).
            status: sounddevice ``CallbackFlags`` (truthy when the device overflowed) or None.
        """
        now = time.monotonic()
        self.last_callback = now
        if status:
            self.status_flags += 1
        w = self._written
        if w - self._read >= self._slots:
            self.dropped_blocks += 1
            self.dropped_frames += frames
            self._pending_gap += frames
            return
        i = w % self._slots
        n = frames if frames <= self._max_frames else self._max_frames
        self._data[i, :n] = indata[:n]
        if n < frames:  # an oversized block: keep the clock true by counting the cut tail as a gap
            self.dropped_frames += frames - n
        self._frames[i] = n
        self._gaps[i] = self._pending_gap
        self._times[i] = now
        self._pending_gap = frames - n
        self._written = w + 1
        if self._bell is not None:
            self._bell.put(self._token)

    def pending(self) -> int:
        """Blocks waiting for the consumer."""
        return self._written - self._read

    def take(self) -> RingItem | None:
        """Consumer side: the oldest stored block, or None when the ring is empty."""
        r = self._read
        if self._written - r <= 0:
            return None
        i = r % self._slots
        n = self._frames[i]
        item = RingItem(self._data[i, :n].copy(), self._gaps[i], self._times[i])
        self._read = r + 1  # publish only after the copy: the slot may be reused from now on
        return item

    def peek_time(self) -> tuple[int, float] | None:
        """Consumer side: ``(frames, end_time)`` of the oldest stored block, without taking it."""
        r = self._read
        if self._written - r <= 0:
            return None
        i = r % self._slots
        return self._frames[i], self._times[i]

    def pending_gap(self) -> int:
        """Frames dropped after the last stored block (not yet attached to a block)."""
        return self._pending_gap
