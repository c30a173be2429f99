"""The same audio through the same pack gives the same updates, however slow the machine is.

Wall time reaches the engine in one place only: a fast replay's clock (``emitted_at``, when a word
would have been shown live on this machine). It is a measurement; no decision may read it. A loaded
machine once changed what an update retracted (issue 23: "a retraction of 4 words with 'He could wait
no longer' instead of a retraction of 1"): the replay clock ran backwards after a slow first round,
a re-decoded word then carried another first-shown time, and the transcript compared words with
their times. Here the machine's speed is simulated, without any load: the engine's wall clock jumps
by seconds inside chosen rounds, and the updates must equal those of an undisturbed run.
"""

from __future__ import annotations

import time
import types
from pathlib import Path

import numpy as np
import pytest

from captioner.audio.files import load_audio_file
from captioner.core import SAMPLE_RATE, EngineUpdate
from captioner.engine import StreamConfig, Transcriber
from captioner.engine import transcriber as transcriber_module

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"


@pytest.fixture(scope="module")
def clips() -> np.ndarray:
    """The four vendored clips, each followed by 1 s of silence (20.8 s)."""
    pause = np.zeros(SAMPLE_RATE, dtype=np.float32)
    return np.concatenate([part for wav in sorted(SPEECH.glob("*.wav")) for part in (load_audio_file(wav), pause)])


class _SlowMachine(types.SimpleNamespace):
    """``time`` for the transcriber whose wall clock loses ``stalls[k]`` seconds inside its k-th engine
    call (a process descheduled by a busy machine: the call ends that much later); the rest is the
    real ``time``."""

    def __init__(self, stalls: dict[int, float]) -> None:
        super().__init__(sleep=time.sleep, monotonic=time.monotonic)
        self.stalls, self.calls, self.pending, self.lost = stalls, 0, 0.0, 0.0

    def entered(self) -> None:  # the replay clock starts an engine call
        self.pending = self.stalls.get(self.calls, 0.0)
        self.calls += 1

    def perf_counter(self) -> float:
        self.lost, self.pending = self.lost + self.pending, 0.0  # the call's first reading is already late
        return time.perf_counter() + self.lost


def _updates(pack, audio: np.ndarray, monkeypatch, stalls: dict[int, float] | None) -> list[EngineUpdate]:
    machine = _SlowMachine(stalls or {})
    monkeypatch.setattr(transcriber_module, "time", machine)
    enter = transcriber_module._SimClock.enter

    def entered(clock) -> None:
        enter(clock)
        machine.entered()

    monkeypatch.setattr(transcriber_module._SimClock, "enter", entered)
    engine = Transcriber.from_pack(pack, "cpu")
    updates: list[EngineUpdate] = []
    try:
        engine.transcribe(audio, StreamConfig(step_s=2.0, language="en"), on_update=lambda u, _last: updates.append(u))
    finally:
        engine.close()
        monkeypatch.undo()
    assert machine.calls > 10 and (not stalls or machine.lost == sum(stalls.values()))
    return updates


def _shown(updates: list[EngineUpdate]) -> list[tuple[int, list[tuple[str, float, float, bool]]]]:
    return [(u.retract, [(w.text, w.start, w.end, w.speculative) for w in u.words]) for u in updates]


@pytest.mark.parametrize("stalls", [{0: 6.0}, {0: 3.0, 3: 2.5, 6: 4.0}, dict.fromkeys(range(0, 11, 2), 0.9)],
                         ids=["slow-first-round", "three-stalls", "steadily-slow"])
def test_a_slow_machine_gets_the_same_updates(real_tiny_en_pack, clips, monkeypatch, stalls) -> None:
    steady = _updates(real_tiny_en_pack, clips, monkeypatch, None)
    slow = _updates(real_tiny_en_pack, clips, monkeypatch, stalls)
    assert sum(len(u.words) for u in steady) > 20  # real speech, really transcribed
    assert _shown(slow) == _shown(steady)


def test_first_shown_times_never_run_backwards(real_tiny_en_pack, clips, monkeypatch) -> None:
    """After a slow first round the next rounds are shown no earlier than it (they would wait for it
    live), and every word keeps the time it was first shown."""
    updates = _updates(real_tiny_en_pack, clips, monkeypatch, {0: 6.0})
    shown: list = []
    newest = [max(w.emitted_at for w in u.words) for u in updates if u.words]
    assert newest == sorted(newest)  # each update shows its words no earlier than the one before
    for u in updates:
        shown = shown[: len(shown) - u.retract] + list(u.words)
    first = next(w for u in updates for w in u.words)
    assert first.emitted_at >= 6.0  # the first round's stall is in its words' time
    assert all(w.emitted_at >= first.emitted_at for w in shown)
