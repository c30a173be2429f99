"""``listen --seconds N`` ends even when a device never comes back (:func:`capture_loop`'s wall
clock rule), and never because of a backlog: the loop on a scripted capture and a scripted clock,
so the bounds are exact (the same rule on a real, killed PulseAudio server is in
``tests/audio/test_audio_pulse.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from captioner.commands import listen
from captioner.core import SAMPLE_RATE, AudioBlock, AudioEvent, Source

BLOCK = SAMPLE_RATE // 10  # 0.1 s blocks


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


class _Capture:
    """Delivers ``blocks`` 0.1 s blocks, one every ``every_s`` of (scripted) wall time, then
    nothing: every later read waits its whole timeout (a lost device that never returns)."""

    def __init__(self, clock: _Clock, blocks: int, every_s: float) -> None:
        self.clock, self.blocks, self.every_s = clock, blocks, every_s
        self.sent = 0
        self.reads_after_end = 0

    @property
    def sources(self) -> tuple[Source, ...]:
        return ("system",)

    @property
    def finished(self) -> bool:
        return False

    def read(self, timeout: float) -> AudioBlock | None:
        if self.sent < self.blocks and timeout > 0:
            self.clock.now += self.every_s
            self.sent += 1
            return AudioBlock("system", (self.sent - 1) * BLOCK, np.zeros(BLOCK, np.float32))
        if self.sent >= self.blocks:
            self.reads_after_end += 1
            assert self.reads_after_end < 10_000, "capture_loop never gave up on a silent device"
        self.clock.now += timeout
        return None

    def events(self) -> list[AudioEvent]:
        return []

    def level(self, source: Source) -> tuple[float, float]:
        return (0.0, 0.0)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr(listen, "time", fake)
    return fake


def test_a_device_that_never_returns_ends_the_loop_late_s_after_the_requested_time(clock: _Clock) -> None:
    capture = _Capture(clock, blocks=10, every_s=0.1)  # 1 s of audio, then the device is gone
    got: list[int] = []
    start = clock.now
    listen.capture_loop(capture, lambda b: got.append(b.end), seconds=4.0, late_s=2.0)
    assert got[-1] == SAMPLE_RATE  # all the audio there was, and it stopped short of 4 s
    waited = clock.now - start
    assert 4.0 + 2.0 < waited <= 4.0 + 2.0 + listen.READ_TIMEOUT_S  # not before, and at the first read after


def test_a_source_that_keeps_moving_is_never_cut_off(clock: _Clock) -> None:
    """A backlog (0.1 s of audio per 0.3 s of wall time: a slow engine's batches) reaches the target."""
    capture = _Capture(clock, blocks=30, every_s=0.3)
    got: list[int] = []
    listen.capture_loop(capture, lambda b: got.append(b.end), seconds=3.0, late_s=0.5)
    assert got[-1] == 3 * SAMPLE_RATE and clock.now - 100.0 > 3.0 + 0.5  # well past the wall time, whole
