"""Live subtitle files and the recorder; the SIGKILL crash test of the store and the live file."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import srt
import webvtt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from captioner.core import EngineUpdate, Word, apply_update
from captioner.errors import StorageError
from captioner.transcript.cues import build_cues
from captioner.transcript.export import export_session, render_srt, render_vtt
from captioner.transcript.live import LiveSubtitleWriter
from captioner.transcript.recorder import SessionRecorder
from captioner.transcript.store import SessionStore

from ._streams import engine_like_updates, replay

CHILD = Path(__file__).with_name("_crash_child.py")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 100_000), n=st.integers(0, 80), fmt=st.sampled_from(["srt", "vtt"]),
       settles=st.booleans())
def test_live_file_equals_the_export(tmp_path: Path, seed: int, n: int, fmt: str, settles: bool) -> None:
    """With engine-like retractions, the finished live file is byte-identical to the export; cues
    closed early where the source settled (:meth:`CueSegmenter.settle`) are the export's too."""
    updates = list(itertools.islice(engine_like_updates(seed, settles=settles), n))
    path = tmp_path / f"live-{seed}-{n}.{fmt}"
    with LiveSubtitleWriter(path, fmt) as live:  # type: ignore[arg-type]
        for update in updates:
            live.feed(update)
            # at every moment the file is a valid subtitle file holding only final cues
            text = path.read_text(encoding="utf-8")
            if fmt == "srt":
                list(srt.parse(text))
            else:
                webvtt.from_string(text)
    cues = build_cues(replay(updates).get("system", []))
    expected = render_srt(cues) if fmt == "srt" else render_vtt(cues)
    assert path.read_text(encoding="utf-8") == expected


def test_cues_are_written_as_they_become_final(tmp_path: Path) -> None:
    path = tmp_path / "live.srt"
    live = LiveSubtitleWriter(path)
    first = tuple(
        Word(t, i * 0.4, i * 0.4 + 0.3) for i, t in enumerate(["One", "sentence", "here.", "And", "so"])
    )
    # "so" may still be replaced, "And" is final and opens a new cue: the first cue is final
    assert live.feed(EngineUpdate(0, first)) == 1
    assert [s.content for s in srt.parse(path.read_text(encoding="utf-8"))] == ["One sentence here."]
    assert live.feed(EngineUpdate(0, (Word("more", 2.0, 2.3, speculative=True),))) == 0
    live.close()
    assert [s.content for s in srt.parse(path.read_text(encoding="utf-8"))] == [
        "One sentence here.",
        "And so",
    ]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_sentence_before_a_pause_is_written_once_the_source_settles(tmp_path: Path) -> None:
    """The engine keeps a stream's last committed word back (a later round may extend it), so a
    sentence followed by silence reached the file only when the next speech came; an update saying
    the source ``settled`` makes its words final, and the cue is written where no later word could
    change it: its text ends a sentence (or the silence is long enough) and its reading time is over
    by then."""
    path = tmp_path / "live.srt"
    live = LiveSubtitleWriter(path)
    text = "One rather longer sentence is here."  # 35 characters: 2.059 s to read at 17 a second
    sentence = tuple(Word(t, 0.5 + i * 0.2, 0.7 + i * 0.2) for i, t in enumerate(text.split()))  # to 1.7 s
    assert live.feed(EngineUpdate(0, sentence)) == 0  # "here." may still be extended
    assert live.feed(EngineUpdate(settled=1.8)) == 0  # final, but the cue's reading time runs to 2.559 s
    assert path.read_text(encoding="utf-8") == ""
    assert live.feed(EngineUpdate(settled=4.0)) == 1
    assert [(s.content, s.start.total_seconds(), s.end.total_seconds())
            for s in srt.parse(path.read_text(encoding="utf-8"))] == [(text, 0.5, 2.559)]
    clause = tuple(Word(t, 10 + i * 0.4, 10.3 + i * 0.4) for i, t in enumerate(["and", "then"]))
    assert live.feed(EngineUpdate(0, clause)) == 0
    assert live.feed(EngineUpdate(settled=11.5)) == 0  # no sentence end, and 0.8 s of silence: it may go on
    assert live.feed(EngineUpdate(settled=14.0)) == 1  # silence long enough: the next word opens a new cue
    live.close()
    assert [s.content for s in srt.parse(path.read_text(encoding="utf-8"))] == [text, "and then"]


def test_two_sources_get_labels(tmp_path: Path) -> None:
    store = SessionStore.in_memory()
    with SessionRecorder.start(store, sources=("system", "mic"), live_path=tmp_path / "l.vtt") as rec:
        for update in itertools.islice(engine_like_updates(7, ("system", "mic")), 60):
            rec.apply(update)
    voices = {c.voice for c in webvtt.read(str(tmp_path / "l.vtt"))}
    assert voices == {"You", "Others"}
    assert store.get_session(rec.session_id).ended_at is not None


def test_retraction_past_the_written_cues_is_survived(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "live.srt"
    with LiveSubtitleWriter(path) as live:
        live.feed(EngineUpdate(0, tuple(Word(t, i, i + 0.5) for i, t in enumerate(["A.", "B.", "C.", "D."]))))
        with caplog.at_level(logging.WARNING):
            live.feed(EngineUpdate(3, (Word("X.", 5, 5.5),)))
        assert "reached words already written" in caplog.text
    assert len(list(srt.parse(path.read_text(encoding="utf-8")))) >= 2


def test_live_write_failure_stops_live_export_but_not_the_recording(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SessionStore.in_memory()
    rec = SessionRecorder.start(store, live_path=tmp_path / "l.srt")
    real_write = os.write

    def full_disk(fd: int, data: bytes) -> int:
        if rec.live is not None and fd == rec.live._fd:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr("captioner.transcript.live.os.write", full_disk)
    for update in itertools.islice(engine_like_updates(1), 40):
        rec.apply(update)
    rec.close()
    assert rec.live is None and len(rec.warnings) == 1 and "No space left" in rec.warnings[0]
    assert len(store.session_words(rec.session_id)) > 10


def test_live_file_cannot_be_created(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot create the live subtitle file"):
        LiveSubtitleWriter(tmp_path / "missing" / "live.srt")
    with pytest.raises(ValueError):
        LiveSubtitleWriter(tmp_path / "x.txt", "txt")  # type: ignore[arg-type]


@pytest.mark.parametrize("kill_after", [40, 400])
def test_sigkill_mid_session_loses_nothing_committed(tmp_path: Path, kill_after: int) -> None:
    db, live, seed = tmp_path / "sessions.sqlite3", tmp_path / "live.srt", 1234 + kill_after
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(db), str(live), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    reported = 0
    session_id = None
    deadline = time.monotonic() + 60
    try:
        assert child.stdout is not None
        for line in child.stdout:
            kind, value = line.split()
            if kind == "session":
                session_id = int(value)
            else:
                reported = int(value)
            if reported >= kill_after or time.monotonic() > deadline:
                break
        os.kill(child.pid, signal.SIGKILL)  # while it is still writing
    finally:
        child.kill()
        child.wait(timeout=30)
        assert child.stdout is not None and child.stderr is not None
        stderr = child.stderr.read()
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL, stderr
    assert session_id is not None and reported >= kill_after, stderr

    # Reopen: SQLite recovers the WAL; every reported update is there, and nothing half-applied.
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with SessionStore.open(db) as store:
        assert store.warnings == []
        assert store.get_session(session_id).ended_at is None
        stored = store.session_words(session_id, include_speculative=True)
    updates = engine_like_updates(seed)
    state = replay(itertools.islice(updates, reported))
    committed = reported
    while state.get("system", []) != stored:  # the child may have committed a few more before dying
        apply_update(state.setdefault("system", []), next(updates))
        committed += 1
        assert committed <= reported + 10_000, "the store matches no prefix of the update stream"
    assert committed >= reported
    print(f"reported {reported}, committed {committed} updates before the kill")

    # The live file parses, and its cues are the first cues of the committed words.
    subs = list(srt.parse(live.read_text(encoding="utf-8")))
    assert subs, "no cue was final before the kill"
    cues = build_cues(stored)
    assert [s.content for s in subs] == [c.text for c in cues[: len(subs)]]

    # The export has every word the captions showed last, the speculative ones as final.
    shown = [dataclasses.replace(w, speculative=False) for w in stored]
    with SessionStore.open(db) as store:
        export_session(store, session_id, tmp_path / "after-crash.srt")
    exported = [s.content for s in srt.parse((tmp_path / "after-crash.srt").read_text(encoding="utf-8"))]
    assert exported == [c.text for c in build_cues(shown)]  # (a speculative tail: 1 update in 4)
