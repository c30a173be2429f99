"""Session store: transactional retract-then-append per source, search, retention, bad files."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import sqlite3
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from captioner import cli
from captioner.core import EngineUpdate, Word
from captioner.errors import StorageError
from captioner.storage.paths import AppPaths
from captioner.transcript._schema import SCHEMA_VERSION
from captioner.transcript.cues import merge_sources
from captioner.transcript.store import SessionStore

from ._streams import engine_like_updates, replay


def W(text: str, start: float, end: float, source: str = "system", spec: bool = False) -> Word:
    return Word(text, start, end, 0.0, source, spec)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    s = SessionStore.open(tmp_path / "data" / "sessions.sqlite3")
    yield s
    s.close()


def test_retract_then_append_per_source(store: SessionStore) -> None:
    sid = store.begin_session(sources=("system", "mic"), model="tiny", provider="CPU", language="en")
    store.apply(sid, EngineUpdate(0, (W("one", 0, 0.4), W("two", 0.5, 0.9), W("tree", 1.0, 1.3, spec=True))))
    store.apply(sid, EngineUpdate(0, (W("hi", 0.2, 0.6, "mic"),), source="mic"))
    # a system retraction must not touch the mic words
    store.apply(sid, EngineUpdate(1, (W("three.", 1.0, 1.4),), source="system"))
    words = store.session_words(sid)
    assert [(w.text, w.source) for w in words] == [
        ("one", "system"),
        ("hi", "mic"),
        ("two", "system"),
        ("three.", "system"),
    ]
    assert words[1] == W("hi", 0.2, 0.6, "mic")
    with pytest.raises(ValueError, match="cannot retract 2 of 1 mic words"):
        store.apply(sid, EngineUpdate(2, (), source="mic"))
    assert len(store.session_words(sid)) == 4  # the failed update changed nothing


def test_speculative_words_are_stored_but_not_exported_or_searched(store: SessionStore) -> None:
    sid = store.begin_session()
    store.apply(sid, EngineUpdate(0, (W("solid", 0, 1), W("maybe", 1, 2, spec=True))))
    assert [w.text for w in store.session_words(sid)] == ["solid"]
    assert [w.speculative for w in store.session_words(sid, include_speculative=True)] == [False, True]
    assert store.search("maybe") == [] and len(store.search("solid")) == 1
    assert store.get_session(sid).word_count == 1


def test_a_session_that_never_ended_keeps_the_words_shown_last(tmp_path: Path) -> None:
    """A process killed before ``end_session`` leaves its last sentence speculative (waiting to be read
    again, or drafts): read by another store, those words are the session's last words, as final;
    the recording store itself, and an ended session, still give the final words only."""
    db = tmp_path / "sessions.sqlite3"
    words = (W("Closed", 0, 0.5), W("sentence.", 0.5, 1), W("Read", 1.2, 1.5, spec=True), W("again.", 1.5, 2, spec=True))
    with SessionStore.open(db) as recording:
        sid = recording.begin_session()
        recording.apply(sid, EngineUpdate(0, words))
        assert [w.text for w in recording.session_words(sid)] == ["Closed", "sentence."]
        assert recording.get_session(sid).word_count == 2
        ended = recording.begin_session()
        recording.apply(ended, EngineUpdate(0, words))
        recording.end_session(ended)
    with SessionStore.open(db) as later:  # the recording process is gone
        assert later.session_words(sid) == [dataclasses.replace(w, speculative=False) for w in words]
        assert later.session_words(sid, limit=3) == later.session_words(sid)[:3]
        assert [w.speculative for w in later.session_words(sid, include_speculative=True)] == [False, False, True, True]
        assert [w.text for w in later.session_words(sid, include_speculative=False)] == ["Closed", "sentence."]
        assert [w.text for w in later.session_words(ended)] == ["Closed", "sentence."]
        assert later.get_session(sid).word_count == 4 and later.get_session(ended).word_count == 2
        # its length is as far as its words go, and search finds its last words
        assert later.get_session(sid).duration_ms == 2000 and later.get_session(ended).duration_ms == 1000
        assert [(h.session_id, h.seq) for h in later.search("read again")] == [(sid, 2)]
        assert {h.session_id for h in later.search("sentence")} == {sid, ended}
    with SessionStore.open(db) as recording:
        live = recording.begin_session()
        recording.apply(live, EngineUpdate(0, words))
        assert recording.get_session(live).duration_ms is None
        assert [h.session_id for h in recording.search("again")] == [sid]  # its own drafts are not final yet


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(0, 60), two=st.booleans())
def test_store_equals_apply_update(tmp_path: Path, seed: int, n: int, two: bool) -> None:
    sources = ("system", "mic") if two else ("system",)
    updates = list(itertools.islice(engine_like_updates(seed, sources), n))
    with SessionStore.in_memory() as store:
        sid = store.begin_session(sources=sources)
        for update in updates:
            store.apply(sid, update)
        expected = merge_sources(w for ws in replay(updates).values() for w in ws)
        assert store.session_words(sid, include_speculative=True) == expected
        for spec, k in itertools.product((True, False, None), (0, 1, 5, 12)):  # the history's first words
            assert store.session_words(sid, include_speculative=spec, limit=k) == store.session_words(sid, include_speculative=spec)[:k]


def test_sessions_list_get_end_title_delete(store: SessionStore) -> None:
    a = store.begin_session(sources=("mic",), model="m1", settings={"engine": {"step_s": 2.0}})
    b = store.begin_session(sources=("mic", "system"), title="standup")
    store.apply(a, EngineUpdate(0, (W("x", 0, 3.25, "mic"),), source="mic"))
    store.end_session(a)
    info = store.get_session(a)
    assert info.ended_at is not None and info.duration_ms == 3250 and info.sources == ("mic",)
    assert info.to_json()["settings"] == {"engine": {"step_s": 2.0}}
    assert [s.id for s in store.list_sessions()] == [b, a]
    assert store.get_session(b).sources == ("mic", "system") and store.get_session(b).ended_at is None
    store.set_title(a, "renamed")
    assert store.get_session(a).title == "renamed"
    store.delete_session(a)
    assert [s.id for s in store.list_sessions()] == [b]
    assert store._query("SELECT count(*) FROM words")[0][0] == 0  # cascade
    with pytest.raises(StorageError, match="no session"):
        store.get_session(a)
    with pytest.raises(StorageError, match="no session"):
        store.delete_session(a)


def test_search_phrases(store: SessionStore) -> None:
    s1 = store.begin_session()
    store.apply(
        s1,
        EngineUpdate(
            0,
            tuple(
                W(t, i, i + 0.5)
                for i, t in enumerate(["We", "flew", "to", "New", "York,", "then", "Boston."])
            ),
        ),
    )
    s2 = store.begin_session(sources=("mic",))
    store.apply(
        s2,
        EngineUpdate(
            0,
            tuple(
                W(t, i, i + 0.5, "mic")
                for i, t in enumerate(["York,", "new", "is", "not", "it;", "Ünïcode", "wörds"])
            ),
            source="mic",
        ),
    )
    hits = store.search("new york")
    assert [(h.session_id, h.seq, h.start_ms, h.end_ms) for h in hits] == [(s1, 3, 3000, 4500)]
    assert "New York, then" in hits[0].context
    assert {h.session_id for h in store.search("YORK")} == {s1, s2}
    assert [h.session_id for h in store.search("wörds")] == [s2]
    assert [h.session_id for h in store.search("ston")] == [s1]  # inside a word: the LIKE fallback
    assert store.search("   ") == [] and store.search("chicago") == []
    assert store.has_fts


def test_retention_purge(store: SessionStore) -> None:
    now = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
    old = store.begin_session(started_at=(now - dt.timedelta(days=40)).isoformat(timespec="seconds"))
    store.apply(old, EngineUpdate(0, (W("old", 0, 1),)))
    store.end_session(old)
    recent = store.begin_session(started_at=(now - dt.timedelta(days=3)).isoformat(timespec="seconds"))
    active_old = store.begin_session(started_at=(now - dt.timedelta(days=90)).isoformat(timespec="seconds"))
    assert store.purge_older_than(0, now=now) == 0
    assert store.purge_older_than(30, now=now) == 1  # the one being recorded is kept
    assert {s.id for s in store.list_sessions()} == {recent, active_old}


def test_files_are_user_only(tmp_path: Path) -> None:
    path = tmp_path / "data" / "sessions.sqlite3"
    with SessionStore.open(path) as store:
        sid = store.begin_session()
        store.apply(sid, EngineUpdate(0, (W("private", 0, 1),)))
        names = sorted(p.name for p in path.parent.iterdir())
        assert names == ["sessions.sqlite3", "sessions.sqlite3-shm", "sessions.sqlite3-wal"]
        for p in path.parent.iterdir():
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
        assert store._query("PRAGMA journal_mode")[0][0] == "wal"
        assert store._query("PRAGMA user_version")[0][0] == SCHEMA_VERSION


def test_reopen_keeps_everything_and_continues_seq(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    with SessionStore.open(path) as store:
        sid = store.begin_session()
        store.apply(sid, EngineUpdate(0, (W("a", 0, 1), W("b", 1, 2))))
    with SessionStore.open(path) as store:
        assert store.warnings == []
        store.apply(sid, EngineUpdate(1, (W("c", 1, 2),)))
        assert [w.text for w in store.session_words(sid)] == ["a", "c"]
        assert store.integrity_check() == "ok"


@pytest.mark.parametrize(
    "content", [b"this is not a database at all" * 50, b"SQLite format 3\x00" + b"\xff" * 200]
)
def test_not_a_database_is_kept_and_a_new_store_used(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "sessions.sqlite3"
    path.write_bytes(content)
    with SessionStore.open(path) as store:
        assert len(store.warnings) == 1
        assert (
            "not a readable SQLite database" in store.warnings[0]
            and "kept as sessions.sqlite3.corrupt-" in store.warnings[0]
        )
        sid = store.begin_session()
        store.apply(sid, EngineUpdate(0, (W("fresh", 0, 1),)))
        assert [w.text for w in store.session_words(sid)] == ["fresh"]
    backups = list(tmp_path.glob("sessions.sqlite3.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == content


def _three_talks(path: Path) -> dict[str, list[int]]:
    """A store of three ended sessions of 300 words and a mark each; the leaf pages of the words
    table and of its (session, source, seq) index (SQLite's ``dbstat``)."""
    with SessionStore.open(path) as store:
        for n in range(3):
            sid = store.begin_session(sources=("system",), title=f"talk {n}", model="base", language="en")
            store.apply(sid, EngineUpdate(0, tuple(W(f" word{n}-{i}", i * 0.3, i * 0.3 + 0.2) for i in range(300))))
            store.add_mark(sid, 5.0, f"mark {n}")
            store.end_session(sid)
    conn = sqlite3.connect(path)
    try:
        pages = {name: [row[0] for row in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno", (name,))]
            for name in ("words", "sqlite_autoindex_words_1")}
        pages["root"] = [conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'words'").fetchone()[0]]
        return pages
    except sqlite3.OperationalError:
        pytest.skip("this SQLite has no dbstat table to find a page of the words")
    finally:
        conn.close()


def _damage(path: Path, page: int, data: bytes = b"\xa5" * 4096) -> None:
    """Overwrite one 4 KiB page of the file, as a bad sector or a torn write leaves it."""
    with open(path, "r+b") as f:
        f.seek((page - 1) * 4096)
        f.write(data)


@pytest.mark.parametrize("damaged", ["index", "words", "root", "last", "first"])
def test_a_store_with_a_damaged_page_is_moved_aside_and_read_back(tmp_path: Path, damaged: str) -> None:
    """A store whose header reads but one of its pages is damaged (SQLite's quick check finds it at
    open; before, it opened and every later read of words failed with "malformed", and a session
    closed in it was lost): the file is moved aside and every session that can still be read is
    read back into a new store, by its rows, not its index: a damaged index page loses nothing, a
    damaged page of words only the words on it, a damaged root of the words table nothing (its leaf
    pages are read themselves; before, every word was lost), nor a damaged first page (the header and
    the list of tables: the page size found from the pages; before, an empty store was started)."""
    path = tmp_path / "sessions.sqlite3"
    pages = _three_talks(path)
    leaves = ([1] if damaged == "first" else  # the header and the list of tables
              pages["sqlite_autoindex_words_1" if damaged == "index" else "words" if damaged == "last" else damaged])
    _damage(path, leaves[-1] if damaged == "last" else leaves[len(leaves) // 2])
    with SessionStore.open(path) as store:
        (warning,) = store.warnings
        assert ("file is not a database" if damaged == "first" else "database disk image is malformed") in warning
        assert "kept as sessions.sqlite3.corrupt-" in warning
        infos = store.list_sessions()
        assert [i.title for i in infos] == ["talk 2", "talk 1", "talk 0"]  # the order and metadata kept
        assert all(i.ended_at and i.model == "base" and i.language == "en" for i in infos)
        assert [store.session_marks(i.id)[0].note for i in infos] == ["mark 2", "mark 1", "mark 0"]
        texts = [[w.text for w in store.session_words(i.id)] for i in infos]
        counts = [len(t) for t in texts]
        assert store.integrity_check() == "ok"
    for n, words in zip((2, 1, 0), texts, strict=True):  # what was read is the talk's, in order
        said = [f" word{n}-{i}" for i in range(300)]
        assert words == [w for w in said if w in set(words)]
    if damaged in ("index", "root", "first"):
        assert warning.endswith("3 of its 3 sessions were read back whole into a new store")
        assert counts == [300, 300, 300]
    elif damaged == "last":  # the B-tree's rightmost page: not even its last rowid is found; the rest read
        assert warning.endswith("2 of its 3 sessions were read back whole into a new store, 1 in part "
                                "(what was on damaged pages lost)")
        assert counts[1:] == [300, 300] and 0 < counts[0] < 300 and texts[0][0] == " word2-0"
    else:
        assert warning.endswith("2 of its 3 sessions were read back whole into a new store, 1 in part "
                                "(what was on damaged pages lost)")
        assert sorted(counts)[1:] == [300, 300] and 150 < sorted(counts)[0] < 300  # one page's words lost
    assert len(list(tmp_path.glob("sessions.sqlite3.corrupt-*"))) == 1


def _delete_leaving_pages(path: Path, session_id: int) -> None:
    """Delete a session as a SQLite built without secure delete does (Windows' Python): its freed
    pages keep its rows (this machine's SQLite may zero them)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA secure_delete = OFF")
    conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
    conn.commit()
    conn.close()


def test_deleted_words_stay_deleted_when_a_damaged_store_is_read_from_its_pages(tmp_path: Path) -> None:
    """The pages of a deleted session keep its rows (SQLite frees them, it does not wipe them), and a
    session begun after it gets its number and its words' rowids again: reading the leaf pages of a
    store whose words root is damaged skips the freelist, so the new session's words come back and
    the deleted one's do not."""
    path = tmp_path / "sessions.sqlite3"
    pages = _three_talks(path)
    with SessionStore.open(path) as store:
        last = store.list_sessions()[0]
    _delete_leaving_pages(path, last.id)
    with SessionStore.open(path) as store:
        sid = store.begin_session(sources=("system",), title="after", model="base", language="en")
        assert sid == last.id  # its number again
        store.apply(sid, EngineUpdate(0, tuple(W(f" new-{i}", i * 0.3, i * 0.3 + 0.2) for i in range(40))))
        store.end_session(sid)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] > 0  # the deleted words' pages, not wiped
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'words'").fetchone()[0]
    conn.close()
    assert [root] == pages["root"] and b" word2-2" in path.read_bytes()  # the deleted words still in the file
    _damage(path, root)
    with SessionStore.open(path) as store:
        assert store.warnings[0].endswith("3 of its 3 sessions were read back whole into a new store")
        infos = store.list_sessions()
        assert [i.title for i in infos] == ["after", "talk 1", "talk 0"]
        assert [w.text for w in store.session_words(infos[0].id)] == [f" new-{i}" for i in range(40)]
        assert [len(store.session_words(i.id)) for i in infos[1:]] == [300, 300]


def _many_meetings(path: Path, n: int = 80) -> dict[str, dict[str, list[int]]]:
    """A store of ``n`` ended sessions of 20 words, a skipped span and a mark each, its sessions table
    several pages long (a settings snapshot with a long vocabulary each); each table's root and leaf
    pages (SQLite's ``dbstat``)."""
    with SessionStore.open(path) as store:
        for k in range(n):
            sid = store.begin_session(title=f"meeting {k}", model="base", language="en",
                                      settings={"engine": {"vocabulary": "Kubernetes, Grafana, " * 10}})
            store.apply(sid, EngineUpdate(0, tuple(W(f" w{k}-{i}", i * 0.5, i * 0.5 + 0.3) for i in range(20)),
                                          gap=(10.0, 11.0)))
            store.add_mark(sid, 1.0, f"note {k}")
            store.end_session(sid)
    conn = sqlite3.connect(path)
    try:
        return {name: {"root": [conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()[0]],
                       "leaf": [row[0] for row in conn.execute(
                           "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno", (name,))]}
                for name in ("sessions", "marks", "gaps")}
    except sqlite3.OperationalError:
        pytest.skip("this SQLite has no dbstat table to find a page of a table")
    finally:
        conn.close()


@pytest.mark.parametrize("damaged", ["sessions root", "sessions leaf", "marks root", "gaps root"])
def test_a_damaged_page_of_sessions_marks_or_gaps_loses_only_what_was_on_it(tmp_path: Path, damaged: str) -> None:
    """The list of sessions several pages long, its root damaged: every session back whole (its leaves
    read themselves); one of its leaves damaged: the sessions on that page are lost, said so, and the
    rest back whole. The one page of marks or of skipped spans damaged: every session back with its
    words, in part (before, reading a session's marks or spans failed and every session was lost)."""
    path = tmp_path / "sessions.sqlite3"
    pages = _many_meetings(path)
    table, kind = damaged.split()
    assert len(pages["sessions"]["leaf"]) >= 3 and pages["marks"]["leaf"] == pages["marks"]["root"]
    _damage(path, pages[table][kind][len(pages[table][kind]) // 2])
    with SessionStore.open(path) as store:
        (warning,) = store.warnings
        infos = store.list_sessions()
        back = {int(i.title.split()[1]): i for i in infos}
        for k, info in back.items():
            assert [w.text for w in store.session_words(info.id)] == [f" w{k}-{i}" for i in range(20)]
            assert (info.ended_at is not None, info.model, json.loads(info.settings)["engine"]["vocabulary"][:10]) == (
                True, "base", "Kubernetes")
            assert [m.note for m in store.session_marks(info.id)] == ([] if table == "marks" else [f"note {k}"])
            assert [(g.start, g.end) for g in store.session_gaps(info.id)] == ([] if table == "gaps" else [(10.0, 11.0)])
        assert store.integrity_check() == "ok"
    if damaged == "sessions root":
        assert warning.endswith("80 of its 80 sessions were read back whole into a new store") and len(back) == 80
    elif damaged == "sessions leaf":
        lost = 80 - len(back)
        assert 0 < lost < 40 and sorted(back) == [k for k in range(80) if k in back]
        assert f"{80 - lost} of its 80 sessions were read back whole into a new store; {lost} could not be read" in warning
    else:
        assert warning.endswith("0 of its 80 sessions were read back whole into a new store, 80 in part "
                                "(what was on damaged pages lost)") and len(back) == 80


def test_any_one_damaged_page_loses_at_most_the_words_on_it(tmp_path: Path) -> None:
    """Every page of a store damaged in turn (random bytes, as a torn write leaves it): two sources with
    retractions, a deleted session whose pages are free: no session deleted comes back, every session
    read back holds its own words of each source in order, none invented, at most one page of them
    lost, and the warning never calls a session whole that is not."""
    import random
    import re

    base = tmp_path / "base.sqlite3"
    said: dict[str, dict[str, list[str]]] = {}
    with SessionStore.open(base) as store:
        for n in range(3):
            sid = store.begin_session(sources=("system", "mic"), title=f"talk {n}")
            words: dict[str, list[str]] = {"system": [], "mic": []}
            for k in range(0, 150 + 100 * n, 10):
                for src in ("system", "mic"):
                    ws = tuple(W(f" {src[0]}{n}-{k + i}", (k + i) * 0.3, (k + i) * 0.3 + 0.2, src) for i in range(10))
                    store.apply(sid, EngineUpdate(0, ws, source=src))
                    words[src] += [w.text for w in ws]
                if k % 50 == 0:  # a retraction now and then
                    store.apply(sid, EngineUpdate(2, (W(f" r{n}-{k}", 1, 2), W(f" s{n}-{k}", 2, 3))))
                    words["system"][-2:] = [f" r{n}-{k}", f" s{n}-{k}"]
            store.add_mark(sid, 1.0, f"m{n}")
            store.end_session(sid)
            said[f"talk {n}"] = words
    _delete_leaving_pages(base, 2)  # "talk 1": its pages go on the freelist, their rows in them
    assert b"s1-149" in base.read_bytes()
    del said["talk 1"]
    pages = base.stat().st_size // 4096
    assert pages > 30
    for page in range(1, pages + 1):  # the first: the header (page size, freelist) and the schema lost
        path = tmp_path / f"p{page}" / "sessions.sqlite3"
        path.parent.mkdir()
        path.write_bytes(base.read_bytes())
        _damage(path, page, random.Random(page).randbytes(4096))
        with SessionStore.open(path) as store:
            warning = store.warnings[0] if store.warnings else ""
            back = {i.title: {src: [w.text for w in store.session_words(i.id) if w.source == src]
                              for src in ("system", "mic")} for i in store.list_sessions()}
        assert set(back) <= set(said), (page, warning)
        whole = 0
        for title, got in back.items():
            for src, words in got.items():
                assert words == [w for w in said[title][src] if w in set(words)], (page, title, src)
            whole += got == said[title]
            assert sum(len(said[title][s]) - len(got[s]) for s in got) < 150, (page, title)  # one page of words
        if found := re.search(r"(\d+) of its (\d+) sessions were read back whole", warning):
            assert int(found[1]) <= whole and int(found[2]) == 2, (page, warning)
        else:
            assert back == said, page  # no damage found: a free page, or one of the free space's


def test_sessions_a_full_disk_kept_out_of_a_salvage_are_imported_from_the_kept_file_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A salvage that cannot write a session (the disk full) keeps the damaged file aside and says how
    to read it again; ``sessions import`` on that file adds what is not in the history yet and says
    which sessions are there already."""
    paths = AppPaths.default(tmp_path / "home").ensure()
    pages = _three_talks(paths.sessions_db)
    _damage(paths.sessions_db, pages["root"][0])
    real = SessionStore.import_session

    def full_for_talk_1(self, session, words, gaps=(), marks=()):
        if session.get("title") == "talk 1":
            raise StorageError("cannot write the session store: the disk is full")
        return real(self, session, words, gaps, marks)

    monkeypatch.setattr(SessionStore, "import_session", full_for_talk_1)
    with SessionStore.open(paths.sessions_db) as store:
        (warning,) = store.warnings
        assert [i.title for i in store.list_sessions()] == ["talk 2", "talk 0"]
    (kept,) = paths.data.glob("sessions.sqlite3.corrupt-*")
    assert warning.endswith(f"2 of its 3 sessions were read back whole into a new store; 1 could not be read "
                            f"(to try again: History → Import… or captioner sessions import {kept})")
    monkeypatch.setattr(SessionStore, "import_session", real)  # room on the disk again
    assert cli.run(["sessions", "import", str(kept)], paths) == 1  # two of its sessions are here already
    out, err = capsys.readouterr()
    assert out.strip() == f"imported 'talk 1' from {kept} as session 3 (300 words; captioner sessions show 3)"
    assert err.count("this session is in the history already") == 2 and "'talk 0'" in err and "'talk 2'" in err
    with SessionStore.open(paths.sessions_db) as store:
        assert store.warnings == []
        assert {i.title: len(store.session_words(i.id)) for i in store.list_sessions()} == {
            "talk 0": 300, "talk 1": 300, "talk 2": 300}
        assert [m.note for m in store.session_marks(3)] == ["mark 1"]
    assert cli.run(["sessions", "import", str(kept)], paths) == 1  # again: nothing new, said per session
    assert capsys.readouterr().err.count("this session is in the history already") == 3


def _real_error(make) -> sqlite3.DatabaseError:
    try:
        make()
    except sqlite3.DatabaseError as exc:
        return exc
    raise AssertionError("SQLite raised nothing")


def _full_disk() -> None:
    """SQLite's own "database or disk is full" (SQLITE_FULL): a file allowed no more pages."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (x)")
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    conn.execute("INSERT INTO t VALUES (zeroblob(100000))")


def _locked(path: Path) -> None:
    """SQLite's own "database is locked" (SQLITE_BUSY): another connection holds the write lock."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        sqlite3.connect(path, timeout=0).execute("CREATE TABLE u (x)")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


@pytest.mark.parametrize("problem", ["full", "locked"])
def test_a_store_that_fails_to_open_for_another_reason_than_its_file_is_left_as_it_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, problem: str) -> None:
    """A full disk or a lock is not a bad file: moving the history aside for it would hide every
    session once the disk has room again. (Before, any such error renamed it ``.corrupt-``.)"""
    path = tmp_path / "sessions.sqlite3"
    with SessionStore.open(path) as store:
        sid = store.begin_session()
        store.apply(sid, EngineUpdate(0, (W("kept", 0, 1),)))
    before = path.read_bytes()
    error = _real_error(_full_disk if problem == "full" else lambda: _locked(tmp_path / "other.sqlite3"))
    assert error.sqlite_errorname == ("SQLITE_FULL" if problem == "full" else "SQLITE_BUSY")

    def failing(_path: Path) -> sqlite3.Connection:
        raise error

    monkeypatch.setattr(SessionStore, "_connect", staticmethod(failing))
    with pytest.raises(StorageError, match="cannot open the session store") as caught:
        SessionStore.open(path)
    assert str(error) in str(caught.value)
    assert path.read_bytes() == before and not list(tmp_path.glob("*.corrupt-*"))
    monkeypatch.undo()
    with SessionStore.open(path) as store:
        assert store.warnings == [] and [w.text for w in store.session_words(sid)] == ["kept"]


def test_newer_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StorageError, match="newer captioner"):
        SessionStore.open(path)
    assert path.read_bytes() == before and not list(tmp_path.glob("*.corrupt-*"))


def test_unwritable_location_is_a_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "data"
    blocker.write_text("a file where the folder should be")
    with pytest.raises(StorageError, match="cannot open the session store"):
        SessionStore.open(blocker / "sessions.sqlite3")


def test_in_memory_store_has_the_same_interface(tmp_path: Path) -> None:
    with SessionStore.in_memory() as store:
        sid = store.begin_session(sources=("mic",))
        store.apply(sid, EngineUpdate(0, (W("ephemeral", 0, 1, "mic"),), source="mic"))
        assert [w.text for w in store.session_words(sid)] == ["ephemeral"]
        assert store.search("ephemeral")[0].session_id == sid
        assert store.path is None
    assert list(tmp_path.iterdir()) == []


def test_bad_sources_are_rejected(store: SessionStore) -> None:
    with pytest.raises(ValueError, match="sources"):
        store.begin_session(sources=("speaker",))  # type: ignore[arg-type]


def test_a_title_is_one_line_and_a_long_one_is_cut_when_a_session_begins(store: SessionStore) -> None:
    from captioner.errors import StorageError
    from captioner.transcript.store import MAX_TITLE

    sid = store.begin_session(title="  a   file\nname.wav ")
    assert store.get_session(sid).title == "a file name.wav"
    long = store.begin_session(title="y" * 300 + ".wav")  # a file's name: the session still begins
    assert store.get_session(long).title == "y" * (MAX_TITLE - 1) + "…"
    with pytest.raises(StorageError, match="at most 200 characters"):
        store.set_title(sid, "z" * 201)  # what a person types is refused, not cut
    assert store.get_session(sid).title == "a file name.wav"
