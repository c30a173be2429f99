"""The callback side: bounded ring, overflow counting, no blocking, no large allocations."""

from __future__ import annotations

import queue
import time
import tracemalloc

import numpy as np

from captioner.audio.ring import BlockRing

BLOCK = 960  # 20 ms at 48 kHz


def _block(value: float, channels: int = 2) -> np.ndarray:
    return np.full((BLOCK, channels), value, dtype=np.float32)


def test_stalled_consumer_counts_overflows_and_gaps() -> None:
    bell: queue.SimpleQueue[int] = queue.SimpleQueue()
    ring = BlockRing(4, BLOCK, 2, bell, token=7)
    for i in range(10):  # the consumer is stalled: only 4 fit
        ring.write(_block(i), BLOCK, None, None)
    assert ring.pending() == 4
    assert ring.dropped_blocks == 6 and ring.dropped_frames == 6 * BLOCK
    assert [bell.get_nowait() for _ in range(4)] == [7] * 4 and bell.empty()
    got = [ring.take() for _ in range(4)]
    assert [float(g.data[0, 0]) for g in got] == [0, 1, 2, 3]  # oldest kept, newest dropped
    assert all(g.gap_frames == 0 for g in got)
    assert ring.take() is None
    ring.write(_block(10), BLOCK, None, None)  # consumer caught up: the gap rides on the next block
    item = ring.take()
    assert item is not None and item.gap_frames == 6 * BLOCK and float(item.data[0, 0]) == 10


def test_status_flags_and_oversized_blocks_are_counted() -> None:
    ring = BlockRing(4, BLOCK, 1)
    ring.write(np.ones((BLOCK + 100, 1), np.float32), BLOCK + 100, None, status=True)
    assert ring.status_flags == 1 and ring.dropped_frames == 100
    ring.write(np.ones((10, 1), np.float32), 10, None, None)
    first, second = ring.take(), ring.take()
    assert first is not None and second is not None
    assert len(first.data) == BLOCK and second.gap_frames == 100  # the clock still sees the cut frames


def test_callback_is_fast_even_when_full() -> None:
    """Median cost of one callback, with room and with a full ring, is far below a block (20 ms)."""
    ring = BlockRing(8, BLOCK, 2, queue.SimpleQueue())
    x = _block(0.25)
    costs: dict[str, list[float]] = {"room": [], "full": []}
    for _ in range(300):
        while ring.take() is not None:
            pass
        t = time.perf_counter()
        ring.write(x, BLOCK, None, None)
        costs["room"].append(time.perf_counter() - t)
        for _ in range(8):
            ring.write(x, BLOCK, None, None)
        t = time.perf_counter()
        ring.write(x, BLOCK, None, None)  # full: dropped and counted, never waits
        costs["full"].append(time.perf_counter() - t)
    med = {k: float(np.median(v)) for k, v in costs.items()}
    assert med["room"] < 1e-3 and med["full"] < 1e-3, med
    assert ring.dropped_blocks >= 300


def test_callback_does_not_allocate_blocks() -> None:
    """The callback copies into preallocated slots: far less than one block (7.7 kB) is allocated."""
    ring = BlockRing(4, BLOCK, 2, queue.SimpleQueue())
    x = _block(0.5)
    ring.write(x, BLOCK, None, None)  # warm up attribute caches
    ring.take()
    peaks = []
    for _ in range(20):
        while ring.take() is not None:  # the consumer (not traced)
            pass
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            for _ in range(10):  # 4 stored, 6 dropped as overflow
                ring.write(x, BLOCK, None, None)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
        finally:
            tracemalloc.stop()
    assert ring.dropped_blocks == 20 * 6
    assert max(peaks) < 2048, f"callback allocated up to {max(peaks)} bytes"
