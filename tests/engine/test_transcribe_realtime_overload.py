"""``captioner transcribe --realtime`` on an engine too slow for real time (issue 16, overload).

The real tiny pack on the CPU provider, through the real CLI, with every encoder dispatch made to
sleep twice its audio while "slow" (the first seconds of the run): the bounded-lag rule skips, the
skipped spans reach the JSON (``gaps``), the SRT (a ``[…]`` cue, read back by ``srt``) and the stored
session, the stderr summary reports the lag (max, p95) and the seconds skipped, and once the
slowness stops no more audio is skipped.
"""

from __future__ import annotations

import json
import time

import pytest
import srt
from wavs import slow_down_encoder, spoken, write_wav

from captioner import cli
from captioner.engine.overload import MAX_LAG_STEPS
from captioner.storage.paths import AppPaths
from captioner.transcript.store import SessionStore

STEP_S = 1.0
AUDIO_S = 12.0
SLOW_S = 6.0  # wall seconds from the first encoder dispatch
SLOW_RTF = 2.0


def test_realtime_transcribe_skips_when_overloaded_and_reports_the_lag(tiny_pack, tmp_path, monkeypatch, capsys):
    wav = write_wav(tmp_path / "speech.wav", spoken(AUDIO_S))
    slow_until = slow_down_encoder(monkeypatch, SLOW_S, SLOW_RTF)
    home = tmp_path / "home"
    out, subs = home / "out.json", tmp_path / "out.srt"
    t0 = time.monotonic()
    code = cli.run(["transcribe", str(wav), "--model", str(tiny_pack.root), "--provider", "cpu", "--realtime",
                    "--step", str(STEP_S), "--json", str(out), "--srt", str(subs)], AppPaths.default(home))
    assert code == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    stats, lag = doc["stats"], doc["stats"]["lag"]
    with capsys.disabled():
        print("overloaded realtime run:", lag, doc["gaps"], stats["wall_s"])
    assert stats["realtime"] and lag["skips"] >= 1 and lag["skipped_s"] > 0
    assert len(doc["gaps"]) == lag["skips"] == len(stats["gaps"])
    assert sum(g["end"] - g["start"] for g in doc["gaps"]) == pytest.approx(lag["skipped_s"], abs=0.01)
    assert 0 < lag["p95_s"] <= lag["max_s"]
    assert lag["max_s"] <= MAX_LAG_STEPS * STEP_S + SLOW_RTF * (MAX_LAG_STEPS * STEP_S + 30.0)  # never unbounded

    # recovery: the slowness ended SLOW_S after the first dispatch; the round running then ends
    # within its own sleep, and after that nothing is skipped
    settle = slow_until[0] - t0 + SLOW_RTF * (MAX_LAG_STEPS * STEP_S + STEP_S) + 1.0
    assert all(g["start"] <= settle for g in doc["gaps"])
    assert stats["audio_s"] == pytest.approx(AUDIO_S, abs=0.01)

    marks = [s for s in srt.parse(subs.read_text(encoding="utf-8")) if s.content == "[…]"]
    assert len(marks) == len(doc["gaps"])
    with SessionStore.open(AppPaths.default(home).sessions_db) as store:
        (info,) = store.list_sessions()
        assert [(g.start, g.end) for g in store.session_gaps(info.id)] == [(g["start"], g["end"]) for g in doc["gaps"]]
    err = capsys.readouterr().err
    assert f"lag max {lag['max_s']:.2f} s, p95 {lag['p95_s']:.2f} s" in err
    assert f"skipped {lag['skipped_s']:.1f} s of audio in {lag['skips']} skips" in err
