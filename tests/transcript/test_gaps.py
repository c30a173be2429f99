"""Gaps: audio the engine skipped because it fell behind real time (issue 16, overload).

The store keeps each gap at its audio-clock span (schema 2, upgraded from schema-1 files without
touching their words), the exports show it (a ``[…]`` cue in SRT and WebVTT read back by the
independent ``srt`` and ``webvtt`` parsers, a paragraph in text, a ``"gaps"`` list in JSON), the
live subtitle file writes the same cues as the export, and a store refusing writes holds gaps with
the words until it recovers.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from pathlib import Path

import srt
import webvtt

from captioner.core import EngineUpdate, RoundStats, Word
from captioner.transcript._schema import MIGRATIONS, SCHEMA_VERSION
from captioner.transcript.cues import GAP_TEXT, Gap, build_cues, merge_with_gaps
from captioner.transcript.export import export_session, export_words
from captioner.transcript.live import LiveSubtitleWriter
from captioner.transcript.recorder import SessionRecorder
from captioner.transcript.store import SessionStore


def w(text: str, start: float, end: float, speculative: bool = False, source="system") -> Word:
    return Word(text, start, end, source=source, speculative=speculative)


def overloaded_updates() -> list[EngineUpdate]:
    """Words, then a skip (the draft "hello" confirmed, 3.0–9.0 s dropped), then words after it."""
    skipped = RoundStats(stop_reason="skipped", skipped_s=6.0)
    return [
        EngineUpdate(0, (w("Good", 0.5, 0.8), w("morning.", 0.9, 1.4), w("hello", 2.0, 2.4, True))),
        EngineUpdate(1, (w("hello", 2.0, 2.4),), skipped, gap=(3.0, 9.0)),
        EngineUpdate(0, (w("and", 9.2, 9.4), w("welcome.", 9.5, 10.1))),
    ]


def recorded(tmp_path: Path) -> tuple[SessionStore, int]:
    store = SessionStore.open(tmp_path / "sessions.sqlite3")
    with SessionRecorder.start(store) as rec:
        for update in overloaded_updates():
            rec.apply(update)
    return store, rec.session_id


def test_the_store_keeps_the_gap_and_every_export_shows_it(tmp_path):
    store, sid = recorded(tmp_path)
    assert store.session_gaps(sid) == [Gap(3.0, 9.0, "system")]
    assert [x.text for x in store.session_words(sid)] == ["Good", "morning.", "hello", "and", "welcome."]

    subs = list(srt.parse(export_session(store, sid, tmp_path / "s.srt").read_text(encoding="utf-8")))
    texts = [s.content for s in subs]
    assert GAP_TEXT in texts
    gap = subs[texts.index(GAP_TEXT)]
    assert gap.start.total_seconds() == 3.0 and gap.end.total_seconds() == 9.0
    assert " ".join(texts) == f"Good morning. hello {GAP_TEXT} and welcome."
    assert all(a.end <= b.start for a, b in itertools.pairwise(subs))

    vtt = webvtt.read(str(export_session(store, sid, tmp_path / "s.vtt")))
    assert [c.text for c in vtt] == texts
    assert vtt[texts.index(GAP_TEXT)].start == "00:00:03.000"

    txt = export_session(store, sid, tmp_path / "s.txt").read_text(encoding="utf-8")
    assert txt == "Good morning. hello\n\n[… 6.0 s not transcribed]\n\nand welcome.\n"

    doc = json.loads(export_session(store, sid, tmp_path / "s.json").read_text(encoding="utf-8"))
    assert doc["gaps"] == [{"start": 3.0, "end": 9.0, "source": "system"}]
    assert [x["text"] for x in doc["words"]] == ["Good", "morning.", "hello", "and", "welcome."]
    store.close()


def test_a_gap_follows_the_words_heard_before_it_and_starts_after_them():
    # the skip confirmed "late" (heard at 3.2–3.6 s) although the dropped span starts at 3.0 s
    words = [w("early", 1.0, 1.5), w("late", 3.2, 3.6), w("after", 9.1, 9.5)]
    items = merge_with_gaps(words, [Gap(3.0, 9.0)])
    assert [x.text if isinstance(x, Word) else x for x in items] == ["early", "late", Gap(3.6, 9.0), "after"]
    cues = build_cues(words, gaps=[Gap(3.0, 9.0)])
    assert [c.gap for c in cues] == [False, True, False]
    assert cues[1].start_ms >= 3600 and cues[1].end_ms == 9000


def test_two_sources_label_their_gap_cues(tmp_path):
    words = [w("hi", 0.5, 0.9, source="mic"), w("yes", 1.0, 1.4), w("go", 6.0, 6.4, source="mic")]
    cues = build_cues(words, gaps=[Gap(2.0, 5.0, "mic")])
    gap = next(c for c in cues if c.gap)
    assert gap.label == "You" and gap.text == GAP_TEXT
    path = export_words(words, tmp_path / "both.vtt", gaps=[Gap(2.0, 5.0, "mic")])
    assert [(c.voice, c.text) for c in webvtt.read(str(path))][-2] == ("You", GAP_TEXT)


def test_the_live_file_writes_the_gap_as_the_export_does(tmp_path):
    path = tmp_path / "live.srt"
    with LiveSubtitleWriter(path, "srt") as live:
        for update in overloaded_updates():
            live.feed(update)
        assert GAP_TEXT in path.read_text(encoding="utf-8")  # written when the gap came, not at close
    live_cues = [(s.start, s.end, s.content) for s in srt.parse(path.read_text(encoding="utf-8"))]
    store_path = tmp_path / "batch.srt"
    words: list[Word] = []
    for update in overloaded_updates():
        del words[len(words) - update.retract:]
        words += update.words
    export_words(words, store_path, gaps=[Gap(3.0, 9.0)])
    assert live_cues == [(s.start, s.end, s.content) for s in srt.parse(store_path.read_text(encoding="utf-8"))]


def test_a_schema_1_store_is_upgraded_without_touching_its_words(tmp_path):
    db = tmp_path / "sessions.sqlite3"
    conn = sqlite3.connect(db, isolation_level=None)
    MIGRATIONS[0](conn)  # exactly what an older captioner wrote
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO sessions (id, started_at, sources) VALUES (1, '2026-01-01T00:00:00+00:00', 'system')")
    conn.execute("INSERT INTO words (session_id, source, seq, text, start_ms, end_ms, emitted_at_ms)"
                 " VALUES (1, 'system', 0, 'old', 0, 500, 600)")
    conn.close()
    store = SessionStore.open(db)
    assert int(store._conn.execute("PRAGMA user_version").fetchone()[0]) == SCHEMA_VERSION >= 2
    assert [x.text for x in store.session_words(1)] == ["old"] and store.session_gaps(1) == []
    store.apply(1, EngineUpdate(0, (), gap=(1.0, 2.0)))
    assert store.session_gaps(1) == [Gap(1.0, 2.0)]
    store.delete_session(1)  # the gap goes with its session
    assert store._conn.execute("SELECT count(*) FROM gaps").fetchone()[0] == 0
    store.close()


def test_a_gap_held_while_the_store_refuses_writes_is_stored_when_it_recovers(tmp_path):
    store = SessionStore.open(tmp_path / "sessions.sqlite3")
    rec = SessionRecorder.start(store)
    rec.retry_interval_s = 0.0
    first, skip, after = overloaded_updates()
    rec.apply(first)
    store._conn.execute("PRAGMA query_only = 1")  # SQLite itself refuses the writes
    rec.apply(skip)
    assert rec.store_problem and store.session_gaps(rec.session_id) == []
    assert rec.session_gaps() == [Gap(3.0, 9.0)]  # held in memory meanwhile
    store._conn.execute("PRAGMA query_only = 0")
    rec.apply(after)
    assert not rec.store_problem
    assert store.session_gaps(rec.session_id) == [Gap(3.0, 9.0)]
    assert [x.text for x in store.session_words(rec.session_id)] == ["Good", "morning.", "hello", "and", "welcome."]
    rec.close()
    store.close()


def test_sessions_show_prints_the_gap(tmp_path, capsys):
    from captioner import cli
    from captioner.storage.paths import AppPaths

    paths = AppPaths.default(tmp_path / "home")
    paths.ensure()
    store = SessionStore.open(paths.sessions_db)
    with SessionRecorder.start(store) as rec:
        for update in overloaded_updates():
            rec.apply(update)
    store.close()
    assert cli.run(["sessions", "show", str(rec.session_id)], paths) == 0
    out = capsys.readouterr().out
    assert "[00:00:00] Good morning. hello\n\n[00:00:03] [… 6.0 s not transcribed]\n\n[00:00:09] and welcome." in out
