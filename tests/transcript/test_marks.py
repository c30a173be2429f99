"""Marked moments ("Mark this moment"): kept by the store (schema 3, upgraded from schema-2 files
without touching their words or gaps), shown in every transcript that can show them: a line of its
own in plain text and ``sessions show``, a ``"marks"`` list in JSON, a ``NOTE`` in WebVTT that the
independent ``webvtt`` parser skips (the cues are those of the export without marks); SRT, which has
no comments, is the export without marks."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import srt
import webvtt

from captioner import cli
from captioner.core import EngineUpdate, Word
from captioner.errors import StorageError
from captioner.storage.paths import AppPaths
from captioner.transcript._schema import MIGRATIONS, SCHEMA_VERSION
from captioner.transcript.cues import Gap, Mark
from captioner.transcript.export import export_session, render_txt
from captioner.transcript.store import SessionStore

WORDS = [("Good", 0.5, 0.8), ("morning.", 0.9, 1.4), ("The", 4.0, 4.2), ("budget", 4.3, 4.8), ("is", 4.9, 5.0),
         ("late.", 5.1, 5.6), ("Next", 9.0, 9.3), ("item.", 9.4, 9.9)]


def recorded(store: SessionStore) -> int:
    sid = store.begin_session(title="weekly")
    store.apply(sid, EngineUpdate(0, tuple(Word(t, a, b) for t, a, b in WORDS)))
    store.end_session(sid)
    return sid


def test_the_store_keeps_marks_in_time_order_and_deletes_them_with_their_session(tmp_path: Path) -> None:
    store = SessionStore.open(tmp_path / "sessions.sqlite3")
    sid = recorded(store)
    assert store.add_mark(sid, 4.6) == Mark(4.6)
    assert store.add_mark(sid, 0.2, " the\nstart ") == Mark(0.2, "the start")
    assert store.session_marks(sid) == [Mark(0.2, "the start"), Mark(4.6)]
    with pytest.raises(StorageError, match="there is no session 99"):
        store.add_mark(99, 1.0)
    store.delete_session(sid)
    assert store._conn.execute("SELECT count(*) FROM marks").fetchone()[0] == 0
    store.close()


def test_a_marks_note_is_written_afterwards_one_line_and_not_too_long(tmp_path: Path) -> None:
    """A shortcut pressed mid-meeting leaves no note: it is written later (the History window's
    Note…), on the mark picked by its place in time order, and read back by a new store."""
    db = tmp_path / "sessions.sqlite3"
    with SessionStore.open(db) as store:
        sid = recorded(store)
        store.add_mark(sid, 9.0)
        store.add_mark(sid, 4.6)
        store.add_mark(sid, 4.6)  # two at one moment: each its own
        assert store.set_mark_note(sid, 0, "  send the\nbudget ") == Mark(4.6, "send the budget")
        assert store.set_mark_note(sid, 1, "x" * 500) == Mark(4.6, "x" * 500)
        with pytest.raises(StorageError, match="at most 500 characters; this one has 501"):
            store.set_mark_note(sid, 2, "x" * 501)
        with pytest.raises(StorageError, match="has 3 marked moments; there is no mark 4"):
            store.set_mark_note(sid, 3, "late")
        with pytest.raises(StorageError, match="there is no session 99"):
            store.set_mark_note(99, 0, "late")
        with pytest.raises(StorageError, match="at most 500"):
            store.add_mark(sid, 1.0, "y" * 501)
    with SessionStore.open(db) as store:
        assert store.session_marks(sid) == [Mark(4.6, "send the budget"), Mark(4.6, "x" * 500), Mark(9.0)]
        assert store.set_mark_note(sid, 0, "") == Mark(4.6)  # no note again


def test_a_schema_2_store_is_upgraded_without_touching_its_words_or_gaps(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    conn = sqlite3.connect(db, isolation_level=None)
    MIGRATIONS[0](conn)  # exactly what an older captioner wrote
    MIGRATIONS[1](conn)
    conn.execute("PRAGMA user_version = 2")
    conn.execute("INSERT INTO sessions (id, started_at, sources) VALUES (1, '2026-01-01T00:00:00+00:00', 'system')")
    conn.execute("INSERT INTO words (session_id, source, seq, text, start_ms, end_ms, emitted_at_ms)"
                 " VALUES (1, 'system', 0, 'old', 0, 500, 600)")
    conn.execute("INSERT INTO gaps (session_id, source, start_ms, end_ms) VALUES (1, 'system', 1000, 2000)")
    conn.close()
    store = SessionStore.open(db)
    assert int(store._conn.execute("PRAGMA user_version").fetchone()[0]) == SCHEMA_VERSION >= 3
    assert [x.text for x in store.session_words(1)] == ["old"] and store.session_gaps(1) == [Gap(1.0, 2.0)]
    assert store.session_marks(1) == []
    store.add_mark(1, 0.3)
    assert store.session_marks(1) == [Mark(0.3)]
    store.close()


def test_a_mark_is_a_line_after_the_paragraph_it_falls_in() -> None:
    words = [Word(t, a, b) for t, a, b in WORDS]
    marks = [Mark(0.1, "start"), Mark(4.6), Mark(12.0)]
    assert render_txt(words, timestamps=True, marks=marks).split("\n\n") == [
        "[00:00:00] ★ Marked: start",  # before the first words
        "[00:00:00] Good morning.",
        "[00:00:04] The budget is late.",
        "[00:00:04] ★ Marked",  # said during "budget": after its paragraph, the sentence whole
        "[00:00:09] Next item.",
        "[00:00:12] ★ Marked\n",  # after the last words
    ]
    assert render_txt(words, marks=[Mark(4.6)]).split("\n\n")[2] == "★ Marked at 00:00:04"
    assert render_txt([], marks=[Mark(3.0)]) == "★ Marked at 00:00:03\n"  # a mark in silence


def test_every_export_that_can_show_marks_shows_them(tmp_path: Path) -> None:
    store = SessionStore.open(tmp_path / "sessions.sqlite3")
    sid = recorded(store)
    plain = {fmt: export_session(store, sid, tmp_path / f"plain.{fmt}", fmt).read_text(encoding="utf-8")  # type: ignore[arg-type]
             for fmt in ("srt", "vtt")}
    store.add_mark(sid, 4.6, "budget --> late")
    store.add_mark(sid, 9.95)
    out = {fmt: export_session(store, sid, tmp_path / f"s.{fmt}", fmt).read_text(encoding="utf-8")  # type: ignore[arg-type]
           for fmt in ("srt", "vtt", "txt", "json")}
    assert json.loads(out["json"])["marks"] == [{"at": 4.6, "note": "budget --> late"}, {"at": 9.95, "note": ""}]
    assert "★ Marked at 00:00:04: budget --> late" in out["txt"].split("\n\n")
    assert out["srt"] == plain["srt"]  # SRT has no comments
    assert "NOTE ★ Marked at 00:00:04.600: budget -> late\n\n" in out["vtt"]  # no "-->" inside a NOTE
    assert "NOTE ★ Marked at 00:00:09.950\n\n" in out["vtt"]
    parsed = [(c.start, c.end, c.text) for c in webvtt.from_string(out["vtt"])]
    assert parsed == [(c.start, c.end, c.text) for c in webvtt.from_string(plain["vtt"])] and parsed
    assert [s.content for s in srt.parse(out["srt"])]
    store.close()


def test_sessions_show_has_the_marks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = AppPaths.default(tmp_path / "home").ensure()
    with SessionStore.open(home.sessions_db) as store:
        sid = recorded(store)
        store.add_mark(sid, 4.6, "decide")
    assert cli.run(["sessions", "show", str(sid)], home) == 0
    assert "\n[00:00:04] The budget is late.\n\n[00:00:04] ★ Marked: decide\n\n[00:00:09] Next item." in capsys.readouterr().out
