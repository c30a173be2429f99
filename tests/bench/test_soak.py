"""The soak benchmark, short: a minute of real speech through the worker into a real store, then the report.

The same invariants as the two-hour run (``captioner bench --sections soak``, docs/soak/), no timing:
every committed word the worker emitted is in the store once and in order, the SRT export of the
session parses, and the report and plot are written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import srt

from captioner import cli
from captioner.bench.soak import (
    RoundRecord,
    live_lag,
    markdown,
    soak_summary,
    write_soak_plot,
    write_speech_wav,
)
from captioner.commands._soak import RecordingStream, run_soak_session
from captioner.storage.paths import AppPaths
from captioner.transcript.store import SessionStore

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before pytest-qt creates the QApplication

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"


def test_the_recording_stream_passes_what_the_worker_sets_to_the_engine_stream() -> None:
    """The overload rule sets ``hurry`` on the stream the worker holds: through the soak's wrapper it
    reaches the engine's stream (set on the wrapper, it never did; latent while the soak reads its
    file unbounded, which never hurries); the wrapper's own record stays its own."""

    class Engine:
        hurry = False

    engine = Engine()
    wrapped = RecordingStream(engine, 0.0)  # type: ignore[arg-type]
    wrapped.hurry = True
    assert engine.hurry is True and wrapped.hurry is True
    wrapped.fed = 320
    assert wrapped.fed == 320 and not hasattr(engine, "fed")


def test_live_lag_is_the_computation_aware_replay() -> None:
    """Rounds every 2 s of audio: 0.5 s of compute keeps up (lag = compute); 3 s falls behind by 1 s a round."""
    fast = [RoundRecord(0.0, 2.0 * (k + 1), 500.0, 0.0, 3) for k in range(5)]
    assert live_lag(fast) == pytest.approx([0.5] * 5)
    slow = [RoundRecord(0.0, 2.0 * (k + 1), 3000.0, 0.0, 3) for k in range(5)]
    assert live_lag(slow) == pytest.approx([3.0, 4.0, 5.0, 6.0, 7.0])


def test_speech_wav_joins_clips_to_the_length(tmp_path: Path) -> None:
    from captioner.audio import read_wav

    info = write_speech_wav(tmp_path / "s.wav", 30.0, manifest=SPEECH / "manifest.jsonl")
    data, wav = read_wav(tmp_path / "s.wav")
    assert wav.frames == 30 * 16000 and wav.rate == 16000 and info["seconds"] == 30.0
    assert info["distinct_clips"] == 4 and info["clips_joined"] > 4  # repeated to reach 30 s
    assert float(abs(data).max()) > 0.1  # speech, not silence


def test_a_minute_of_speech_through_the_worker_is_stored_once_in_order(
        qapp, real_tiny_en_pack, tmp_path: Path) -> None:
    wav = tmp_path / "speech.wav"
    speech = write_speech_wav(wav, 60.0, manifest=SPEECH / "manifest.jsonl")  # the 4 clips, 3.3 times
    raw = run_soak_session(str(real_tiny_en_pack.root), wav, tmp_path / "work", AppPaths.default(tmp_path / "home"),
                           step_s=2.0, provider="cpu")
    raw["speech"] = speech
    words = raw["words"]
    assert raw["errors"] == []
    assert words["emitted"] > 100 and words["equal"] and words["stored"] == words["emitted"]
    assert words["first_difference"] is None and words["starts_non_decreasing"]
    # the real words of the clips, read back from the SQLite file (a second connection)
    with SessionStore.open(tmp_path / "work" / "sessions.db") as store:
        (session,) = store.list_sessions()
        text = " ".join(w.text for w in store.session_words(session.id)).lower()
    assert "longer" in text and "hester" in text
    cues = list(srt.parse((tmp_path / "work" / "session.srt").read_text(encoding="utf-8")))
    assert raw["export"]["parsed"] and len(cues) == raw["export"]["cues"] > 5
    assert cues[-1].end.total_seconds() <= 60.0
    assert raw["audio_s"] == pytest.approx(60.0) and raw["rounds"] and len(raw["rss"]) >= 2
    assert max(r["audio_end_s"] for r in raw["rounds"]) == pytest.approx(60.0, abs=0.05)  # all of it processed
    summary = soak_summary(raw)
    assert summary["verdicts"]["words_stored_once_in_order"] and summary["words"] == words
    json.dumps({"raw": raw, "summary": summary})  # what --json writes
    plot = write_soak_plot(raw, tmp_path / "soak.png")
    report = markdown(raw, summary, plot.name)
    assert plot.stat().st_size > 10_000 and "store = emitted" in report and "soak.png" in report
    # the CLI reports a saved run (--soak-raw): JSON, Markdown and the plot beside it
    (tmp_path / "raw.json").write_text(json.dumps(raw), encoding="utf-8")
    out = tmp_path / "docs"
    code = cli.run(["bench", "--sections", "soak", "--soak-raw", str(tmp_path / "raw.json"), "--report",
                    str(out / "README.md"), "--plots", str(out), "--json", str(out / "soak.json")],
                   AppPaths.default(tmp_path / "home"))
    assert code == 0 and (out / "soak.png").is_file()
    assert "](soak.png)" in (out / "README.md").read_text(encoding="utf-8")
    assert json.loads((out / "soak.json").read_text())["soak"]["summary"]["words"]["equal"]


def test_the_soak_needs_a_real_model_and_speech(tmp_path: Path, capsys) -> None:
    paths = AppPaths.default(tmp_path)
    assert cli.run(["bench", "--sections", "soak"], paths) == 2
    assert "needs a real model" in capsys.readouterr().err
    assert cli.run(["bench", "--sections", "soak", "--model", str(tmp_path)], paths) == 2
    assert "needs speech" in capsys.readouterr().err
