"""Opening the model is not transcribing with it: a file transcribed as fast as it can be opens each
graph in the first round that needs it (wall 3.7 s against 4.8 s opening them all, for a 9.4 s file),
and that time is named apart from the compute and left off the replay clock, because a live session
opens every graph before it starts. Seen as a new user: a 4.6 s clip's summary said "compute 4.9 s,
RTF 1.051" where the rounds themselves took about 1.3 s."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from captioner.audio.files import load_audio_file
from captioner.engine import StreamConfig, Transcriber
from captioner.engine import transcriber as transcriber_module

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"


def test_the_first_run_opens_the_graphs_and_its_compute_leaves_that_out(tiny_pack) -> None:
    audio = load_audio_file(SPEECH / "1089-134691-0001.wav")  # 5.4 s of a real reading
    engine = Transcriber.from_pack(tiny_pack, "cpu")
    try:
        first_words, first = engine.transcribe(audio, StreamConfig(step_s=2.0, language="en"))
        opened = dict(engine.info().session_ms)
        again_words, again = engine.transcribe(audio, StreamConfig(step_s=2.0, language="en"))
    finally:
        engine.close()
    assert opened and first.model_open_s == pytest.approx(sum(opened.values()) / 1000.0, abs=1e-6)
    rounds_s = sum(r.total_ms for r in first.rounds) / 1000.0
    assert first.compute_s == pytest.approx(rounds_s - first.model_open_s, abs=1e-6)
    assert 0.0 < first.compute_s < rounds_s
    assert again.model_open_s == 0.0  # every graph it needs is open: nothing to leave out
    assert again.compute_s == pytest.approx(sum(r.total_ms for r in again.rounds) / 1000.0)
    assert first.to_json()["model_open_s"] == round(first.model_open_s, 3) and again.to_json()["model_open_s"] == 0.0
    assert [w.text for w in first_words] == [w.text for w in again_words]


def test_the_replay_clock_leaves_out_the_time_a_call_spends_opening_graphs(monkeypatch) -> None:
    """An engine call of 2.5 s of which 2.0 s opened a graph reads as 0.5 s after its audio arrived."""
    now, opened = [100.0], [0.0]
    monkeypatch.setattr(transcriber_module, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    clock = transcriber_module._SimClock(lambda: opened[0])
    clock.audio_s = 4.0
    clock.enter()
    now[0] += 2.5
    opened[0] += 2.0
    assert clock() == pytest.approx(4.5)
    clock.audio_s = 6.0
    clock.enter()  # the next call: no graph opened, its own time counts whole
    now[0] += 0.75
    assert clock() == pytest.approx(6.75)
