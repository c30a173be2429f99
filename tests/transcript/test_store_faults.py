"""The session store stops taking writes in the middle of a session (issue 16, "faults").

The refusals are SQLite's own, on the recorder's real connection: ``PRAGMA max_page_count`` at the
file's current size gives the real ``database or disk is full`` (SQLITE_FULL) and ``PRAGMA
query_only`` the real ``attempt to write a readonly database``; raising the limit or clearing the
flag makes the store writable again. Where this machine lets the tests mount a tmpfs (root), a real
full file system is used as well: the store on a 16 MiB tmpfs filled up by another file, then freed.
Every committed word must end up in the store once and in order (or, when the store never recovers,
in the fallback export).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from itertools import islice
from pathlib import Path

import pytest

from captioner.core import EngineUpdate
from captioner.errors import StorageError
from captioner.transcript.recorder import SessionRecorder
from captioner.transcript.store import SessionStore

from ._streams import engine_like_updates, replay

SOURCES = ("system", "mic")


def _committed(state: dict) -> dict:
    return {src: [(w.text, w.start, w.end) for w in words if not w.speculative] for src, words in state.items()}


def _stored(store: SessionStore, session_id: int) -> dict:
    out: dict = {}
    for w in store.session_words(session_id):
        out.setdefault(w.source, []).append((w.text, w.start, w.end))
    return out


def _refuse(store: SessionStore, how: str) -> None:
    conn = store._conn  # the recorder's own connection: SQLite refuses the writes itself
    if how == "full":
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")
    else:
        conn.execute("PRAGMA query_only = 1")


def _allow(store: SessionStore, how: str) -> None:
    conn = store._conn
    if how == "full":
        conn.execute("PRAGMA max_page_count = 1073741823")
    else:
        conn.execute("PRAGMA query_only = 0")


@pytest.mark.parametrize("how", ["full", "readonly"])
def test_words_held_while_the_store_refuses_are_written_when_it_recovers(tmp_path: Path, how: str) -> None:
    """200 updates of two sources; the store refuses writes from update 60 to 140: the recorder never
    raises, says why once, holds the words, and writes them at the first update after recovery."""
    updates = list(islice(engine_like_updates(7, SOURCES), 200))
    store = SessionStore.open(tmp_path / "sessions.sqlite3")
    rec = SessionRecorder.start(store, sources=SOURCES)
    rec.retry_interval_s = 0.0
    problems = set()
    for i, update in enumerate(updates):
        if i == 60:
            _refuse(store, how)
        if i == 140:
            _allow(store, how)
        rec.apply(update)
        if 60 <= i < 140:
            problems.add(rec.store_problem)
            if i == 139:
                assert rec.held_words > 20
        elif i >= 140:
            assert rec.store_problem == "" and rec.held_words == 0  # written at the first chance
    (problem,) = problems - {""}  # (the first updates may still fit the file's free pages)
    assert ("database or disk is full" if how == "full" else "readonly database") in problem
    rec.close()
    assert rec.fallback_export is None
    assert _stored(store, rec.session_id) == _committed(replay(updates))
    assert store.get_session(rec.session_id).ended_at is not None
    assert store.integrity_check() == "ok"
    store.close()


def test_a_store_still_refusing_at_the_end_exports_the_session_to_the_fallback_folder(tmp_path: Path) -> None:
    """The store never recovers: at close the whole session (stored words and held words) is exported
    as JSON and text to the fallback folder, and nothing is lost."""
    updates = list(islice(engine_like_updates(11, SOURCES), 120))
    store = SessionStore.open(tmp_path / "sessions.sqlite3")
    rec = SessionRecorder.start(store, sources=SOURCES, fallback_dirs=[tmp_path / "exports"])
    rec.retry_interval_s = 0.0
    for i, update in enumerate(updates):
        if i == 50:
            _refuse(store, "full")
        rec.apply(update)
    assert rec.session_words() and rec.held_words > 0
    rec.close()
    path = rec.fallback_export
    assert path is not None and path.parent == tmp_path / "exports" and path.suffix == ".json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    exported: dict = {}
    for w in doc["words"]:
        exported.setdefault(w["source"], []).append((w["text"], w["start"], w["end"]))
    assert exported == _committed(replay(updates))
    assert doc["session"]["id"] == rec.session_id and doc["session"]["ended_at"]
    assert path.with_suffix(".txt").read_text(encoding="utf-8").strip()
    store.close()


@pytest.mark.parametrize("refuses", [False, True])
def test_the_language_heard_is_recorded_at_close_or_goes_with_the_export(tmp_path: Path, refuses: bool) -> None:
    """``close(language=...)``: a session begun with "auto" keeps the language(s) heard, in the store
    or, where the store refuses by then, in the exported file; a refusal there costs nothing else
    (before, the commands set it on the store themselves, and a refusing store raised before the
    session was closed and its held words exported)."""
    store = SessionStore.open(tmp_path / "sessions.sqlite3")
    rec = SessionRecorder.start(store, sources=("system",), language="auto", fallback_dirs=[tmp_path / "out"])
    rec.retry_interval_s = 0.0
    updates = list(islice(engine_like_updates(5), 30))
    for i, update in enumerate(updates):
        if refuses and i == 20:  # words held from here: the session goes to a file at close
            _refuse(store, "readonly")
        rec.apply(update)
    rec.close(duration_ms=9000, language="de, en")
    if refuses:
        doc = json.loads(rec.fallback_export.read_text(encoding="utf-8"))
        assert doc["session"]["language"] == "de, en" and doc["session"]["duration_ms"] == 9000
    else:
        info = store.get_session(rec.session_id)
        assert rec.fallback_export is None and info.language == "de, en" and info.duration_ms == 9000
    store.close()


def test_a_store_that_cannot_begin_the_session_keeps_it_in_memory_and_exports_it(tmp_path: Path) -> None:
    """``start_or_keep`` (the commands' way in): a store that opens but refuses to begin a session
    (SQLite's own read-only refusal) is closed, the session is kept in memory, and :meth:`close`
    writes it to the fallback folder; with a store that takes it, the session is the store's."""
    path = tmp_path / "sessions.sqlite3"

    def read_only() -> SessionStore:
        store = SessionStore.open(path)
        _refuse(store, "readonly")
        return store

    rec = SessionRecorder.start_or_keep(read_only, sources=SOURCES, fallback_dirs=[tmp_path / "out"])
    assert rec.store.path is None and "readonly database" in rec.export_reason
    updates = list(islice(engine_like_updates(3, SOURCES), 40))
    for update in updates:
        rec.apply(update)
    rec.store.add_mark(rec.session_id, 1.5, "the budget")  # marked meanwhile (listen's Enter)
    rec.close(duration_ms=61_500)
    assert rec.fallback_export is not None and rec.fallback_export.parent == tmp_path / "out"
    doc = json.loads(rec.fallback_export.read_text(encoding="utf-8"))
    exported: dict = {}
    for w in doc["words"]:
        exported.setdefault(w["source"], []).append((w["text"], w["start"], w["end"]))
    assert exported == {src: ws for src, ws in _committed(replay(updates)).items() if ws}
    assert [(m["at"], m["note"]) for m in doc["marks"]] == [(1.5, "the budget")]
    assert doc["session"]["ended_at"] and doc["session"]["duration_ms"] == 61_500  # an ended session
    assert "the budget" in rec.fallback_export.with_suffix(".txt").read_text(encoding="utf-8")
    with SessionStore.open(path) as store:
        assert store.list_sessions() == []
    rec = SessionRecorder.start_or_keep(lambda: SessionStore.open(path), sources=SOURCES)
    assert rec.store.path == path and rec.export_reason == ""
    rec.close()
    rec.store.close()


def test_held_words_survive_retractions_of_stored_words(tmp_path: Path) -> None:
    """A retraction that reaches past the held words into the stored ones is kept as such."""
    from captioner.core import Word

    def w(text: str, t: float, spec: bool = False) -> Word:
        return Word(text, t, t + 0.2, t, "system", spec)

    store = SessionStore.open(tmp_path / "s.sqlite3")
    rec = SessionRecorder.start(store)
    rec.retry_interval_s = 0.0
    rec.apply(EngineUpdate(0, (w("a", 0), w("b", 1), w("c?", 2, True))))
    _refuse(store, "readonly")
    rec.apply(EngineUpdate(2, (w("B", 1), w("c", 2))))  # retracts the speculative word and a stored one
    rec.apply(EngineUpdate(0, (w("d", 3), w("e?", 4, True))))
    rec.apply(EngineUpdate(1, (w("e", 4),)))
    assert [x.text for x in rec.session_words()] == ["a", "B", "c", "d", "e"]
    _allow(store, "readonly")
    assert rec.flush()
    rec.close()
    assert [x.text for x in store.session_words(rec.session_id)] == ["a", "B", "c", "d", "e"]
    store.close()


# -- a real full file system -------------------------------------------------------------------

_CHILD = """
import json, os, sys
from itertools import islice
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from transcript._streams import engine_like_updates, replay
from captioner.transcript.recorder import SessionRecorder
from captioner.transcript.store import SessionStore

mnt = Path(sys.argv[1])
updates = list(islice(engine_like_updates(3, ("system", "mic")), 400))
store = SessionStore.open(mnt / "sessions.sqlite3", sync_interval_s=0)
rec = SessionRecorder.start(store, sources=("system", "mic"), fallback_dirs=[mnt])
rec.retry_interval_s = 0.0
filler = mnt / "filler"
held_max, problem = 0, ""
for i, update in enumerate(updates):
    if i == 100:  # another program fills the disk
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"x" * 4096)
        except OSError:
            pass
        os.close(fd)
    if i == 300:
        filler.unlink()  # ... and frees it again
    rec.apply(update)
    held_max = max(held_max, rec.held_words)
    problem = problem or rec.store_problem
recovered = rec.store_problem == "" and rec.held_words == 0
rec.close()
stored = {}
for w in store.session_words(rec.session_id):
    stored.setdefault(w.source, []).append([w.text, w.start, w.end])
want = {s: [[w.text, w.start, w.end] for w in ws if not w.speculative] for s, ws in replay(updates).items()}
print(json.dumps({"equal": stored == want, "held_max": held_max, "problem": problem, "recovered": recovered,
                  "fallback": str(rec.fallback_export), "words": sum(len(v) for v in want.values())}))
store.close()
"""


@pytest.fixture
def tiny_fs(small_disk) -> Path:
    """A 16 MiB file system (a tmpfs: root only)."""
    return small_disk.mount("16m")


def test_a_really_full_disk_mid_session_loses_no_word(tiny_fs: Path) -> None:
    """The store on a 16 MiB file system that another file fills up mid-session, then frees: every
    committed word is in the store once and in order (run in a child so that the store's files are
    closed before the file system is unmounted)."""
    tests = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tiny_fs), str(tests)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print("full disk:", result)
    assert "full" in result["problem"]  # the disk really filled up
    assert result["held_max"] > 0 and result["recovered"]
    assert result["fallback"] == "None" and result["equal"]


def test_a_disk_filling_up_in_the_middle_of_a_live_cue_leaves_a_file_that_parses(tmp_path: Path, monkeypatch) -> None:
    """The write that meets the full disk took half a cue: it is cut off again, so the live file
    holds whole cues only, and the recording goes on."""
    import srt

    store = SessionStore.in_memory()
    rec = SessionRecorder.start(store, live_path=tmp_path / "l.srt")
    real_write = os.write
    budget = {"left": None}

    def filling_disk(fd: int, data) -> int:
        if rec.live is not None and fd == rec.live._fd and budget["left"] is not None:
            if budget["left"] <= 0:
                raise OSError(28, "No space left on device")
            n = min(len(data), budget["left"])
            budget["left"] -= n
            return real_write(fd, bytes(data[:n]))
        return real_write(fd, data)

    monkeypatch.setattr("captioner.transcript.live.os.write", filling_disk)
    updates = list(islice(engine_like_updates(5), 120))
    for i, update in enumerate(updates):
        if i == 60:
            budget["left"] = 7  # the disk has 7 bytes left: the next cue is written in part
        rec.apply(update)
    rec.close()
    assert rec.live is None and "No space left" in rec.warnings[0]
    text = (tmp_path / "l.srt").read_text(encoding="utf-8")
    cues = list(srt.parse(text))  # whole cues only
    assert cues and text.endswith("\n\n")
    assert _stored(store, rec.session_id) == _committed(replay(updates))  # the store has every word


def test_a_store_on_a_really_full_disk_is_refused_in_words_and_left_as_it_is(tiny_fs: Path, small_disk) -> None:
    """An existing store on a file system with no room left (SQLite cannot create its write-ahead
    log's files: "disk I/O error"): a clear error that says the disk is full, the file left where it
    was (before: renamed ``.corrupt-`` and the history gone from the app), and every session there
    once there is room again."""
    path = tiny_fs / "sessions.sqlite3"
    with SessionStore.open(path) as store:
        sid = store.begin_session()
        for update in islice(engine_like_updates(7), 20):
            store.apply(sid, update)
        want = [w.text for w in store.session_words(sid)]
    filler = small_disk.fill(tiny_fs)
    assert shutil.disk_usage(tiny_fs).free < 65536
    before = path.read_bytes()
    with pytest.raises(StorageError, match="the disk is full") as caught:
        SessionStore.open(path)
    print("full disk at open:", caught.value)
    assert path.read_bytes() == before and not list(tiny_fs.glob("*.corrupt-*"))
    filler.unlink()
    with SessionStore.open(path) as store:
        assert store.warnings == [] and [w.text for w in store.session_words(sid)] == want


def test_an_import_cut_off_half_way_leaves_nothing_and_can_be_made_again(tmp_path: Path) -> None:
    """A process that dies in the middle of ``sessions import`` (its words written, its marks not yet)
    leaves no part of the session: a part would stand in the history as the session (its start,
    title and number of words) with its marks lost, and the import made again would be refused as
    a copy of it."""
    db = tmp_path / "sessions.sqlite3"
    child = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from pathlib import Path
from captioner.core import Word
from captioner.transcript.cues import Mark
from captioner.transcript.store import SessionStore
store = SessionStore.open(Path({str(db)!r}))
if sys.argv[1] == "die":
    SessionStore.add_mark = lambda *a, **k: os._exit(9)  # killed between the words and the marks
words = [Word(f"w{{i}}", i * 0.5, i * 0.5 + 0.4) for i in range(300)]
sid = store.import_session({{"started_at": "2026-01-02T03:04:05+00:00", "title": "Call", "sources": ["system"],
                            "ended_at": "2026-01-02T03:06:35+00:00"}}, words, marks=[Mark(12.0, "the answer")])
print(sid)
"""
    died = subprocess.run([sys.executable, "-c", child, "die"], capture_output=True, text=True)
    assert died.returncode == 9, died.stderr
    with SessionStore.open(db) as store:
        assert store.list_sessions() == []
    again = subprocess.run([sys.executable, "-c", child, "live"], capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout.strip() == "1", again.stderr
    with SessionStore.open(db) as store:
        (info,) = store.list_sessions()
        assert (info.title, info.word_count, info.ended_at) == ("Call", 300, "2026-01-02T03:06:35+00:00")
        assert [(m.at, m.note) for m in store.session_marks(1)] == [(12.0, "the answer")]
