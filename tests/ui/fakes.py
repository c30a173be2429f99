"""Fakes for one-layer tests of the worker and the app: a scripted capture and a scripted engine.

``FakeCapture`` replays blocks as fast as they are read (no wall clock); ``FakeStream`` turns each
0.1 s of audio into one speculative word and commits it on the next round, retracting the
speculative one — the shape of the real engine's updates (NPUSPER.md §11).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np

from captioner.core import AudioBlock, AudioEvent, EngineUpdate, RoundStats, Word
from captioner.errors import AudioDeviceError

BLOCK = 1600  # 0.1 s at 16 kHz


class FakeCapture:
    """Yields ``n_blocks`` blocks per source, then either ends (``finite``) or idles on reads."""

    def __init__(self, sources=("system",), n_blocks=10, finite=True, fail_first_read=False,
                 events=()) -> None:
        self.sources = tuple(sources)
        self._blocks = [AudioBlock(src, i * BLOCK, np.full(BLOCK, 0.1, np.float32))
                        for i in range(n_blocks) for src in self.sources]
        self.finite = finite
        self.started = self.stopped = 0
        self._fail = fail_first_read
        self._events = list(events)
        self._idle = threading.Event()
        self.reads = 0

    @property
    def finished(self) -> bool:
        return self.finite and not self._blocks

    def start(self) -> None:
        self.started += 1

    def stop(self) -> None:
        self.stopped += 1
        self._idle.set()

    def read(self, timeout: float):
        self.reads += 1
        if self._fail:
            self._fail = False
            raise AudioDeviceError("the microphone was unplugged")
        if self._blocks:
            return self._blocks.pop(0)
        self._idle.wait(timeout)  # like a device with nothing new: block for the timeout
        return None

    def events(self):
        out, self._events = self._events, []
        return out


class FakeStream:
    """One speculative word per 0.1 s fed; the next round commits it (retract 1, append committed).

    ``config.step_s`` is 3 s, so the worker's lag rule (skip beyond two steps waiting) leaves the
    fake's few seconds of instant blocks alone; ``skips`` records any ``skip`` asked of it.
    """

    def __init__(self, source="system", provider="FAKE-CPU", step_s=3.0) -> None:
        self.source = source
        self.provider = provider
        self.config = SimpleNamespace(step_s=step_s)
        self.fed = 0
        self.rounds = 0
        self.skips: list[float] = []
        self.hurry = False
        self._pending: Word | None = None
        self.finished = False

    @property
    def lag_s(self) -> float:
        return max(0, self.fed - self.rounds * BLOCK) / 16_000

    def skip(self, keep_s):
        """Like Stream.skip: drop all but ``keep_s`` of the pending blocks, commit the speculative
        word, and report the dropped span as the update's gap."""
        self.skips.append(keep_s)
        drop = self.fed // BLOCK - self.rounds - round(keep_s * 16_000) // BLOCK
        if drop <= 0:
            return EngineUpdate(source=self.source)
        start = self.rounds * 0.1
        self.rounds += drop
        retract, words = 0, ()
        if self._pending is not None:
            p, self._pending = self._pending, None
            retract, words = 1, (Word(p.text, p.start, p.end, source=self.source),)
        stats = RoundStats(provider=self.provider, stop_reason="skipped", skipped_s=drop * 0.1)
        return EngineUpdate(retract, words, stats, source=self.source, gap=(start, self.rounds * 0.1))

    def set_step(self, step_s) -> None:
        """Like Stream.set_step: the lag rule's new step (the fake's rounds stay one block each)."""
        self.config = SimpleNamespace(step_s=step_s)

    def feed(self, samples) -> None:
        self.fed += len(samples)

    def step(self):
        if self.fed < (self.rounds + 1) * BLOCK:
            return None
        i = self.rounds
        self.rounds += 1
        stats = RoundStats(round_index=i, provider=self.provider, lag_s=self.lag_s)
        new = Word(f"{self.source}{i}", i * 0.1, i * 0.1 + 0.08, source=self.source, speculative=True)
        retract, words = 0, [new]
        if self._pending is not None:
            p = self._pending
            retract = 1
            words = [Word(p.text, p.start, p.end, source=self.source), new]
        self._pending = new
        return EngineUpdate(retract, tuple(words), stats, source=self.source)

    def finish(self):
        self.finished = True
        if self._pending is None:
            return EngineUpdate(0, (), RoundStats(provider=self.provider), source=self.source)
        p, self._pending = self._pending, None
        return EngineUpdate(1, (Word(p.text, p.start, p.end, source=self.source),),
                            RoundStats(provider=self.provider), source=self.source)


def device_lost_event() -> AudioEvent:
    return AudioEvent("device_lost", "mic", "The microphone disappeared; waiting for it to come back.")
