"""The session store: every session and its words in SQLite, written as they are shown.

Layout (``PRAGMA user_version`` = schema version, upgraded by :data:`_MIGRATIONS`):

* ``sessions``: id, started_at (UTC ISO 8601 wall time), ended_at, duration_ms (audio clock),
  sources ("system", "mic" or "mic,system"), model, provider, language, settings (JSON snapshot),
  title.
* ``words``: (session_id, source, seq) -> text, start_ms, end_ms, emitted_at_ms, speculative.
  ``seq`` counts the words of one source in emission order from 0; retraction deletes the highest
  ``seq`` values, so the rows of a source are always ``0..n-1``.
* ``words_fts``: an FTS5 index over committed words (when SQLite has FTS5; else ``LIKE``).
* ``gaps`` (schema 2): (session_id, source, start_ms, end_ms), audio the engine skipped undecoded
  because it fell behind real time (``EngineUpdate.gap``); exports show a gap marker there.
* ``marks`` (schema 3): (session_id, at_ms, note), the moments the user marked; exports and the
  history show them.

Durability: WAL journal. Each :meth:`SessionStore.apply` is one transaction, so a killed process
loses nothing that returned from ``apply`` (SQLite has written it to the WAL in the OS's cache).
For power loss or an OS crash (a laptop running out of battery mid-meeting) the WAL must also be
fsynced; doing that at every commit (``synchronous=FULL``) caps a bulk insert at the disk's fsync
rate (~3 000 words/s here), and plain ``NORMAL`` only syncs at checkpoints (megabytes, i.e. hours
of text, apart). So the store commits with ``NORMAL`` and switches a commit to ``FULL`` whenever
``sync_interval_s`` (1 s) has passed since the last synced commit: power loss costs at most the
last second of text, a killed process nothing; at the engine's real pace (one update per ~2 s per
source) every commit is synced. Session begin/end and deletions always sync.

Files are created with user-only permissions (0600; SQLite gives ``-wal``/``-shm`` the mode of the
database). A file that is not a SQLite database, or whose pages fail SQLite's quick check at open
(a bad sector, a torn write: ~0.1 s for 37 MB, half a million words), is renamed aside
(``sessions.sqlite3.corrupt-<timestamp>``), a new store is started with every session that can still
be read from it (by its rows, not its indexes: a damaged index loses nothing, any other damaged page only
the rows on it, a damaged interior page nothing: the rows are read from the leaf pages it hid,
:mod:`~captioner.transcript._salvage`), and a warning says how many; any other failure to open (a full disk, a lock)
leaves the file as it is and raises :class:`StorageError`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from captioner.core import SOURCES, EngineUpdate, Source, Word
from captioner.errors import StorageError
from captioner.storage.disk import write_problem
from captioner.transcript._pages import SQLITE_HEADER
from captioner.transcript._salvage import read_damaged
from captioner.transcript._schema import SCHEMA_VERSION, check_version, move_aside, upgrade
from captioner.transcript.cues import Gap, Mark, merge_sources, normalize_text

__all__ = ["MAX_NOTE", "MAX_TITLE", "SCHEMA_VERSION", "SearchHit", "SessionInfo", "SessionStore", "StoreImport", "is_store_file",
           "mark_note", "phrase_at", "search_terms", "session_title"]

logger = logging.getLogger(__name__)

MAX_TITLE = 200  # characters of a session's title
MAX_NOTE = 500  # characters of a marked moment's note


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One recorded session.

    Attributes:
        id: store-assigned id.
        started_at, ended_at: UTC ISO 8601 wall time; ``ended_at`` is None while recording (or
            after a crash).
        duration_ms: audio-clock length (end of the last word when not given at the end); None while
            recording; for a session that never ended and is not recorded by this store (a crash),
            the end of its last stored word, as far as its captions went (None without words).
        sources: the sources captured.
        model, provider, language: what transcribed it.
        settings: JSON snapshot of the settings used.
        title: user title ("" = none).
        word_count: the words :meth:`SessionStore.session_words` gives: committed (non-speculative)
            ones, and every stored word of a session that never ended and is not recorded by
            this store (a crash).
    """

    id: int
    started_at: str
    ended_at: str | None
    duration_ms: int | None
    sources: tuple[Source, ...]
    model: str
    provider: str
    language: str
    settings: str
    title: str
    word_count: int

    def to_json(self) -> dict[str, Any]:
        """The metadata as a JSON-ready dict (the settings snapshot parsed)."""
        try:
            settings = json.loads(self.settings)
        except ValueError:
            settings = {}
        return {
            "id": self.id,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_ms": self.duration_ms,
            "sources": list(self.sources),
            "model": self.model,
            "provider": self.provider,
            "language": self.language,
            "title": self.title,
            "settings": settings,
        }


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A place in a session where the searched text was said.

    Attributes:
        session_id, source: where.
        seq: index of the first matching word in its source's words.
        start_ms, end_ms: audio-clock span of the match.
        context: the match with a few words around it.
    """

    session_id: int
    source: Source
    seq: int
    start_ms: int
    end_ms: int
    context: str


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _fold(text: str) -> str:
    """Case- and punctuation-insensitive form of a word for phrase matching."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def session_title(text: str, *, cut: bool = False) -> str:
    """A session's title as stored: one line, spaces collapsed; with ``cut``, one longer than
    :data:`MAX_TITLE` characters is shortened (ending "…"), as a file's name is.

    Raises:
        StorageError: it is longer than :data:`MAX_TITLE` characters (without ``cut``).
    """
    title = " ".join(text.split())
    if len(title) > MAX_TITLE and cut:
        return title[: MAX_TITLE - 1] + "…"
    if len(title) > MAX_TITLE:
        raise StorageError(f"a session's title is at most {MAX_TITLE} characters; this one has {len(title)}")
    return title


def mark_note(text: str) -> str:
    """A marked moment's note as stored: one line, spaces collapsed.

    Raises:
        StorageError: it is longer than :data:`MAX_NOTE` characters.
    """
    note = " ".join(text.split())
    if len(note) > MAX_NOTE:
        raise StorageError(f"a mark's note is at most {MAX_NOTE} characters; this one has {len(note)}")
    return note


def search_terms(text: str) -> list[str]:
    """The searched words of ``text`` as :func:`phrase_at` compares them (case and punctuation
    folded away; words of punctuation alone dropped)."""
    return [t for t in (_fold(w) for w in text.split()) if t]


def phrase_at(words: Sequence[str], i: int, terms: Sequence[str]) -> bool:
    """The search's one matching rule: ``terms`` (:func:`search_terms`) were said from ``words[i]``
    on (``words`` as said, any case and punctuation). One term matches inside a word; several match
    as a phrase whose first term may end a word and whose last may begin one ("new york" finds
    "New York," and "renew Yorkshire", not "York, new")."""
    n = len(terms)
    if n == 0 or i + n > len(words):
        return False
    window = [_fold(w) for w in words[i : i + n]]
    if n == 1:
        return terms[0] in window[0]
    return window[0].endswith(terms[0]) and window[1:-1] == list(terms[1:-1]) and window[-1].startswith(terms[-1])


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000)) if seconds == seconds and abs(seconds) != float("inf") else 0


class _Damaged(sqlite3.DatabaseError):
    """``PRAGMA quick_check`` found damaged pages in a file whose header and list of sessions read."""


def _corrupt(exc: sqlite3.DatabaseError) -> bool:
    """SQLite says the file itself is bad: not a database, or malformed (``SQLITE_NOTADB``,
    ``SQLITE_CORRUPT``; the extended codes keep the primary one in their low byte), or its pages
    failed the quick check."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, _Damaged) or (code is not None and (code & 0xFF) in (sqlite3.SQLITE_NOTADB,
                                                                              sqlite3.SQLITE_CORRUPT))


def is_store_file(path: Path) -> bool:
    """``path`` is a session store rather than a JSON export: SQLite's header, or a store's name (a
    damaged one kept aside, ``sessions.sqlite3.corrupt-…``, may have lost its header)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return False  # the JSON reader says why
    return head == SQLITE_HEADER or ".sqlite3" in Path(path).name


@dataclass(frozen=True, slots=True)
class StoreImport:
    """One session of another store file (:meth:`SessionStore.import_store`).

    Attributes:
        title: its title ("" where its own record was lost).
        session_id: its id in this store; None where it was not imported.
        words: its words read.
        whole: every row of it was read (not where it may have had rows on a damaged page).
        problem: why it was not imported ("" where it was).
    """

    title: str
    session_id: int | None
    words: int
    whole: bool
    problem: str = ""


class SessionStore:
    """Sessions and their words in one SQLite database; safe to share between threads.

    Open with :meth:`open` (a file) or :meth:`in_memory` (the "don't save this session" mode:
    the same interface, nothing touches the disk, everything is gone when it is closed).

    The recording API: :meth:`begin_session` -> id, :meth:`apply` per ``EngineUpdate``,
    :meth:`end_session`. The reading API: :meth:`list_sessions`, :meth:`get_session`,
    :meth:`session_words`, :meth:`search`; and :meth:`delete_session`, :meth:`purge_older_than`.
    """

    def __init__(
        self, conn: sqlite3.Connection, path: Path | None, warnings: list[str], sync_interval_s: float = 1.0
    ) -> None:
        self._conn = conn
        self.sync_interval_s = sync_interval_s
        self._last_sync = -math.inf  # monotonic time of the last commit made with synchronous=FULL
        self._full = True  # the connection's current synchronous mode is FULL
        self.path = path
        self.warnings = warnings  # one sentence per problem met while opening
        self._lock = threading.RLock()
        self._counts: dict[tuple[int, str], int] = {}  # (session, source) -> rows
        self._active: set[int] = set()
        self._outer = False  # inside a transaction: the ones opened in it are part of it

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: Path, *, sync_interval_s: float = 1.0) -> SessionStore:
        """Open (or create) the store at ``path``.

        Args:
            path: the database file (``AppPaths.sessions_db``).
            sync_interval_s: fsync the log at least this often while recording (see module doc);
                0 = at every commit.

        A file that is not a SQLite database, or one that SQLite reports as malformed, is renamed
        aside and a new store is created; :attr:`warnings` says so. Any other failure (a full disk,
        a lock held too long, a folder it cannot write) leaves the file as it is: moving the
        user's history aside for a full disk would hide every session once there is room again.

        Raises:
            StorageError: the folder cannot be created or written, or the store was written by a
                newer captioner (schema too new).
        """
        path = Path(path)
        warnings: list[str] = []
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            conn = cls._connect(path)
        except sqlite3.DatabaseError as exc:
            if not _corrupt(exc):  # a full disk, a lock, a folder it cannot write: the file is not at fault
                raise StorageError(f"cannot open the session store {path}: {write_problem(exc, path.parent)}") from exc
            backup = move_aside(path)
            try:
                conn = cls._connect(path)
            except (sqlite3.Error, OSError) as exc2:
                raise StorageError(f"cannot create a new session store at {path}: {write_problem(exc2, path.parent)}") from exc2
            store = cls(conn, path, warnings, sync_interval_s)
            whole, part, lost = store._salvage(backup)
            if whole or part or lost:
                kept = (f"{whole} of its {whole + part + lost} sessions were read back whole into a new store"
                        + (f", {part} in part (what was on damaged pages lost)" if part else "")
                        + (f"; {lost} could not be read (to try again: History → Import… or captioner sessions import {backup})"
                           if lost else ""))
            else:
                kept = "a new, empty store was started"
            msg = f"the session store {path} is not a readable SQLite database ({exc}); it was kept as {backup.name}; {kept}"
            logger.warning("%s", msg)
            warnings.append(msg)
            return store
        except OSError as exc:
            raise StorageError(f"cannot open the session store {path}: {write_problem(exc, path.parent)}") from exc
        return cls(conn, path, warnings, sync_interval_s)

    def _salvage(self, damaged: Path) -> tuple[int, int, int]:
        """Read what can still be read of the ``damaged`` store (a file moved aside) into this one
        (:meth:`import_store`): ``(sessions read back whole, in part, lost)``, all 0 where nothing
        can be read (a file that is no database at all)."""
        outcomes = self.import_store(damaged)
        whole = sum(1 for o in outcomes if o.session_id is not None and o.whole)
        part = sum(1 for o in outcomes if o.session_id is not None and not o.whole)
        return whole, part, len(outcomes) - whole - part

    def import_store(self, path: Path) -> list[StoreImport]:
        """Add every session still readable in the session store file at ``path`` (a damaged store
        kept aside, a backup, another computer's) to this one, one at a time
        (:func:`~captioner.transcript._salvage.read_damaged`: by rows, not through the indexes; past
        a damaged page; from the leaf pages a damaged interior page hid). One outcome per session
        found, oldest first: imported (whole, or in part where rows of it may have been on a damaged
        page), or not, with why (the same session here already, a store that cannot be written, its
        own row lost with a damaged page: its words were read without it)."""
        found = read_damaged(path)
        outcomes: list[StoreImport] = []
        for row in found.sessions:
            sid, title, words = row[0], str(row[9]), 0
            try:
                info = self._info((*row, 0, 0, None)).to_json()  # no counts: the import counts its words
                own = sorted(found.words.get(sid, []), key=lambda r: (r[0], r[1]))  # by source, seq
                if info["ended_at"] is not None:
                    own = [r for r in own if not r[6]]  # an ended session's final words
                ws = merge_sources([Word(t, a / 1000, b / 1000, e / 1000, src) for src, _, t, a, b, e, _ in own])
                gaps = sorted((Gap(a / 1000, b / 1000, src) for src, a, b in found.gaps.get(sid, [])), key=lambda g: g.start)
                marks = sorted((Mark(at / 1000, note) for at, note in found.marks.get(sid, [])), key=lambda m: m.at)
                words = len(ws)
                new = self.import_session(info, ws, gaps, marks)
            except (StorageError, ValueError, TypeError) as exc:
                logger.info("session %d of the store %s could not be imported: %s", sid, path.name, exc)
                outcomes.append(StoreImport(title, None, words, False, str(exc)))
                continue
            outcomes.append(StoreImport(title, new, words, sid not in found.suspect))
        outcomes += [StoreImport("", None, 0, False, "its session's own record was on a damaged page")
                     for _ in sorted(found.orphans)]
        return outcomes

    @classmethod
    def open_for_reading(cls, path: Path) -> SessionStore:
        """:meth:`open`, or, where the store cannot be opened for writing (a full disk: SQLite cannot
        create its log's files), the file read as it stands (SQLite's ``immutable``: no log, no
        locks; words a running captioner has not folded into the file yet are not seen), a warning
        saying so in :attr:`warnings`. For the commands that only read: list, show, export, search.

        Raises:
            StorageError: as :meth:`open` where the file cannot be read either.
        """
        try:
            return cls.open(path)
        except StorageError as exc:
            try:
                conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?immutable=1", uri=True, check_same_thread=False)
                check_version(conn, path)
                conn.execute("SELECT count(*) FROM sessions").fetchone()
            except (sqlite3.Error, StorageError):
                raise exc from None
            msg = f"{exc}; read as the file stands (what a running captioner has not written into it yet is not shown)"
            logger.warning("%s", msg)
            return cls(conn, Path(path), [msg])

    @classmethod
    def in_memory(cls) -> SessionStore:
        """A store that lives only in memory (sessions the user chose not to save)."""
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA foreign_keys = ON")
        upgrade(conn, Path(":memory:"))
        return cls(conn, None, [])

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        if not path.exists():
            # Create the file ourselves so that it (and the -wal/-shm SQLite derives from it)
            # is user-only from the first byte.
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
        try:
            check_version(conn, path)  # before WAL mode rewrites the header of a file we must not touch
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            upgrade(conn, path)
            conn.execute("SELECT count(*) FROM sessions").fetchone()
            damage = conn.execute("PRAGMA quick_check(1)").fetchone()[0]  # every page read: ~0.1 s for 37 MB
            if damage != "ok":  # SQLite found it by reading; the header was fine
                raise _Damaged(f"database disk image is malformed: {damage.splitlines()[-1].strip()}")
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        """Close the database (a WAL checkpoint folds the log back into the file)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def has_fts(self) -> bool:
        """True when search uses the FTS5 index."""
        row = self._query("SELECT 1 FROM sqlite_master WHERE name = 'words_fts'")
        return bool(row)

    # -- recording -----------------------------------------------------------------------------

    def begin_session(
        self,
        *,
        sources: Sequence[Source] = ("system",),
        model: str = "",
        provider: str = "",
        language: str = "",
        settings: Mapping[str, Any] | None = None,
        title: str = "",
        started_at: str | None = None,
    ) -> int:
        """Start recording a session; returns its id.

        Args:
            sources: the sources that will be captured ("system", "mic" or both).
            model: the pack that transcribes it (for the history window).
            provider: the execution provider running it.
            language: the transcription language.
            settings: JSON-serialisable snapshot (``storage.settings.to_dict(settings)``).
            title: optional title (:func:`session_title`; a long one is cut: a file's name may be
                longer than a title, and a session must not fail to begin for it).
            started_at: UTC ISO 8601 time; default now.
        """
        title = session_title(title, cut=True)
        bad = [s for s in sources if s not in SOURCES]
        if bad or not sources:
            raise ValueError(f"sources must be a non-empty subset of {SOURCES}, not {tuple(sources)!r}")
        snapshot = json.dumps(dict(settings or {}), ensure_ascii=False, sort_keys=True)
        with self._transaction() as conn:
            cur = conn.execute(
                "INSERT INTO sessions (started_at, sources, model, provider, language, settings, title)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    started_at or _now_iso(),
                    ",".join(sorted(set(sources))),
                    model,
                    provider,
                    language,
                    snapshot,
                    title,
                ),
            )
            session_id = int(cur.lastrowid or 0)
        self._active.add(session_id)
        logger.info("recording session %d (%s)", session_id, ",".join(sources))
        return session_id

    def apply(self, session_id: int, update: EngineUpdate, *, gaps: Sequence[tuple[float, float]] = ()) -> None:
        """Apply one engine update to the words of ``update.source``: retract, then append; its
        ``gap`` (and ``gaps``, more skipped spans of the same source) become gap rows.

        One transaction: after this returns, the update is on disk; if the process dies inside
        it, none of it is.

        Raises:
            ValueError: the update retracts more words than the source has.
            StorageError: the database cannot be written (disk full, file gone).
        """
        spans = [*gaps, *([update.gap] if update.gap is not None else [])]
        if update.is_empty and not spans:
            return
        source = update.source
        with self._transaction(durable=False) as conn:
            count = self._count(conn, session_id, source)
            if update.retract < 0 or update.retract > count:
                raise ValueError(f"cannot retract {update.retract} of {count} {source} words")
            first = count - update.retract
            if update.retract:
                conn.execute(
                    "DELETE FROM words WHERE session_id = ? AND source = ? AND seq >= ?",
                    (session_id, source, first),
                )
            conn.executemany(
                "INSERT INTO words (session_id, source, seq, text, start_ms, end_ms, emitted_at_ms,"
                " speculative) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        session_id,
                        source,
                        first + i,
                        w.text,
                        _ms(w.start),
                        max(_ms(w.start), _ms(w.end)),
                        _ms(w.emitted_at),
                        int(w.speculative),
                    )
                    for i, w in enumerate(update.words)
                ],
            )
            conn.executemany(
                "INSERT INTO gaps (session_id, source, start_ms, end_ms) VALUES (?, ?, ?, ?)",
                [(session_id, source, _ms(a), max(_ms(a), _ms(b))) for a, b in spans],
            )
        self._counts[(session_id, source)] = first + len(update.words)

    def end_session(self, session_id: int, *, duration_ms: int | None = None) -> None:
        """Mark the session finished; ``duration_ms`` defaults to the end of its last word."""
        with self._transaction() as conn:
            if duration_ms is None:
                row = conn.execute(
                    "SELECT max(end_ms) FROM words WHERE session_id = ? AND speculative = 0", (session_id,)
                ).fetchone()
                duration_ms = int(row[0] or 0)
            conn.execute(
                "UPDATE sessions SET ended_at = ?, duration_ms = ? WHERE id = ?",
                (_now_iso(), duration_ms, session_id),
            )
        self._active.discard(session_id)

    def import_session(self, session: Mapping[str, Any], words: Sequence[Word], gaps: Sequence[Gap] = (),
                       marks: Sequence[Mark] = ()) -> int:
        """Add a whole, ended session, as a JSON export holds it (``session``: its metadata object;
        ``words``, ``gaps``, ``marks``: its contents): a session written to a file because the store
        could not take it, or one exported on another computer. Returns its id.

        Raises:
            StorageError: the same session is here already (the same start, title and number of
                words: its id is said), its sources are not ours, or the store cannot be written
                (then nothing of it is kept).
        """
        started = str(session.get("started_at") or _now_iso())
        title = session_title(str(session.get("title") or ""), cut=True)
        sources = tuple(session.get("sources") or sorted({w.source for w in words}) or ("system",))
        stray = sorted(({w.source for w in words} | {g.source for g in gaps}) - set(sources))
        if stray:
            raise StorageError(f"cannot import the session: it has {', '.join(stray)} words but its sources are "
                               f"{', '.join(sources)}")
        for (sid,) in self._query("SELECT id FROM sessions WHERE started_at = ? AND title = ?", (started, title)):
            if len(self.session_words(sid)) == len(words):
                raise StorageError(f"this session is in the history already: session {sid} "
                                   f"(captioner sessions show {sid})")
        sid = 0
        try:
            with self._transaction():  # all of it or nothing, even where the process dies half way
                sid = self.begin_session(sources=sources, model=str(session.get("model") or ""),
                                         provider=str(session.get("provider") or ""),
                                         language=str(session.get("language") or ""),
                                         settings=session.get("settings") or {}, title=title, started_at=started)
                for source in sources:
                    own = tuple(w for w in words if w.source == source)
                    spans = [(g.start, g.end) for g in gaps if g.source == source]
                    self.apply(sid, EngineUpdate(0, own, source=source), gaps=spans)
                for mark in marks:
                    self.add_mark(sid, mark.at, mark.note)
                duration = session.get("duration_ms")
                self.end_session(sid, duration_ms=int(duration) if isinstance(duration, (int, float)) else None)
                if session.get("ended_at"):
                    self._conn.execute("UPDATE sessions SET ended_at = ? WHERE id = ?", (str(session["ended_at"]), sid))
        except ValueError as exc:
            raise StorageError(f"cannot import the session: {exc}") from exc
        finally:
            self._active.discard(sid)
        return sid

    def set_provider(self, session_id: int, provider: str) -> None:
        """Record the provider a session runs on now (the last one failed mid-session)."""
        with self._transaction() as conn:
            conn.execute("UPDATE sessions SET provider = ? WHERE id = ?", (provider, session_id))

    def set_language(self, session_id: int, language: str) -> None:
        """Record the language(s) heard, e.g. ``"de"`` for a session begun with ``"auto"``."""
        with self._transaction() as conn:
            conn.execute("UPDATE sessions SET language = ? WHERE id = ?", (language, session_id))

    def set_title(self, session_id: int, title: str) -> str:
        """Name a session (``""``: no name); returns the title as stored: one line, spaces collapsed.

        Raises:
            StorageError: there is no session with this id, or the title is longer than
                :data:`MAX_TITLE` characters.
        """
        title = session_title(title)
        self.get_session(session_id)
        with self._transaction() as conn:
            conn.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id))
        return title

    def titled(self, text: str, *, limit: int = 100) -> list[SessionInfo]:
        """Sessions whose title says ``text`` (:func:`phrase_at`: "weekly" finds "Weekly sync",
        "sync 3" finds "Weekly sync 3 March"), newest first."""
        terms = search_terms(text)
        if not terms:
            return []
        rows = self._query(f"SELECT {self._SESSION_COLUMNS} FROM sessions s WHERE s.title != ''"
                           " ORDER BY s.started_at DESC, s.id DESC")
        found = []
        for info in (self._info(r) for r in rows):
            words = info.title.split()
            if any(phrase_at(words, i, terms) for i in range(len(words))):
                found.append(info)
                if len(found) >= limit:
                    break
        return found

    # -- reading -------------------------------------------------------------------------------

    _SESSION_FIELDS = (
        "s.id, s.started_at, s.ended_at, s.duration_ms, s.sources, s.model, s.provider, s.language,"
        " s.settings, s.title,"
    )
    _SESSION_COLUMNS = (
        _SESSION_FIELDS
        + " (SELECT count(*) FROM words w WHERE w.session_id = s.id AND w.speculative = 0),"
        " (SELECT count(*) FROM words w WHERE w.session_id = s.id),"
        " (SELECT max(end_ms) FROM words w WHERE w.session_id = s.id)"
    )

    def _info(self, row: Sequence[Any]) -> SessionInfo:
        sources = tuple(cast(Source, s) for s in str(row[4]).split(",") if s)  # validated when stored
        settled = row[2] is None and not self.recording(int(row[0]))  # as session_words reads it
        return SessionInfo(
            int(row[0]),
            row[1],
            row[2],
            row[12] if settled else row[3],
            sources,
            row[5],
            row[6],
            row[7],
            row[8],
            row[9],
            int(row[11] if settled else row[10]),  # type: ignore[arg-type]
        )

    def recording(self, session_id: int) -> bool:
        """True while this store records the session (begun here and not ended)."""
        return session_id in self._active

    def list_sessions(self, limit: int | None = None) -> list[SessionInfo]:
        """Sessions, newest first."""
        rows = self._query(
            f"SELECT {self._SESSION_COLUMNS} FROM sessions s ORDER BY s.started_at DESC, s.id DESC LIMIT ?",
            (-1 if limit is None else limit,),
        )
        return [self._info(r) for r in rows]

    def get_session(self, session_id: int) -> SessionInfo:
        """One session's metadata.

        Raises:
            StorageError: there is no session with this id.
        """
        rows = self._query(f"SELECT {self._SESSION_COLUMNS} FROM sessions s WHERE s.id = ?", (session_id,))
        if not rows:
            raise StorageError(f"there is no session {session_id} (see `captioner sessions list`)")
        return self._info(rows[0])

    def session_words(self, session_id: int, *, include_speculative: bool | None = None,
                      limit: int | None = None) -> list[Word]:
        """The session's words: each source in emission order, sources interleaved by start time.

        Times are the stored integer milliseconds as seconds. ``include_speculative``: True, every
        stored word with its flag; False, the final words only (exports never write speculative
        ones); None (the default), the session as it stands: the final words of a session that
        ended or that this store is recording, and every word of one that never ended and is not
        recorded here (its process was killed, or it is recording in another one), its speculative
        words as final: the words the captions showed last. Those are a closed sentence's words
        that a later decode might still have read again, and the open sentence's drafts; left out,
        a crash would lose the last sentence from every export.

        ``limit``: only the first this many (the history's list shows a session's first words; an
        hour is ten thousand of them, and reading them all for every listed session took seconds):
        at most ``limit`` of each source are read, through the ``(session_id, source, seq)`` index.
        """
        settle = include_speculative is None and not self.recording(session_id) and self._unended(session_id)
        final_only = "" if include_speculative or settle else " AND speculative = 0"
        select = ("SELECT text, start_ms, end_ms, emitted_at_ms, source, speculative FROM words"
                  f" WHERE session_id = ?{final_only}")
        if limit is None:
            rows = self._query(f"{select} ORDER BY source, seq", (session_id,))
        else:
            rows = [row for source in SOURCES
                    for row in self._query(f"{select} AND source = ? ORDER BY seq LIMIT ?", (session_id, source, limit))]
        words = [
            Word(text, start / 1000, end / 1000, emitted / 1000, source, bool(spec) and not settle)
            for text, start, end, emitted, source, spec in rows
        ]
        return merge_sources(words)[:limit]

    def _unended(self, session_id: int) -> bool:
        """True when the session exists and was never ended (``end_session``)."""
        return bool(self._query("SELECT 1 FROM sessions WHERE id = ? AND ended_at IS NULL", (session_id,)))

    def add_mark(self, session_id: int, at_s: float, note: str = "") -> Mark:
        """Mark a moment of a session (its audio clock, seconds); returns the mark as stored.

        Raises:
            StorageError: there is no session with this id, or the disk refuses the write.
        """
        self.get_session(session_id)
        mark = Mark(_ms(at_s) / 1000, mark_note(note))
        with self._transaction() as conn:
            conn.execute("INSERT INTO marks (session_id, at_ms, note) VALUES (?, ?, ?)",
                         (session_id, _ms(at_s), mark.note))
        logger.info("session %d: marked %.1f s", session_id, mark.at)
        return mark

    def set_mark_note(self, session_id: int, index: int, note: str) -> Mark:
        """Write the note of the session's ``index``-th marked moment (0: the first in time order,
        as :meth:`session_marks` gives them; ``""``: no note); returns the mark as stored.

        Raises:
            StorageError: there is no such session or mark, the note is longer than
                :data:`MAX_NOTE` characters, or the disk refuses the write.
        """
        note = mark_note(note)
        self.get_session(session_id)
        rows = self._query("SELECT id, at_ms FROM marks WHERE session_id = ? ORDER BY at_ms, id", (session_id,))
        if not 0 <= index < len(rows):
            raise StorageError(f"session {session_id} has {len(rows)} marked moments; there is no mark {index + 1}")
        mark_id, at_ms = rows[index]
        with self._transaction() as conn:
            conn.execute("UPDATE marks SET note = ? WHERE id = ?", (note, mark_id))
        return Mark(at_ms / 1000, note)

    def session_marks(self, session_id: int) -> list[Mark]:
        """The moments marked in the session, in time order."""
        rows = self._query("SELECT at_ms, note FROM marks WHERE session_id = ? ORDER BY at_ms, id", (session_id,))
        return [Mark(at / 1000, note) for at, note in rows]

    def session_gaps(self, session_id: int) -> list[Gap]:
        """The audio the engine skipped in the session (it fell behind real time), in time order."""
        rows = self._query(
            "SELECT start_ms, end_ms, source FROM gaps WHERE session_id = ? ORDER BY start_ms, source",
            (session_id,),
        )
        return [Gap(start / 1000, end / 1000, source) for start, end, source in rows]

    def search(self, text: str, *, limit: int = 100) -> list[SearchHit]:
        """Where the words of ``text`` were said, in that order (case and punctuation ignored).

        The words :meth:`session_words` gives: committed ones, and every stored word of a session
        that never ended and is not recorded here (a crash). FTS5 (committed words only) narrows
        the candidate sessions, a ``LIKE`` scan those speculative words; the phrase is then matched
        word by word, so "new york" finds "New York," but not "York, new".
        """
        raw = [w for w in text.split() if _fold(w)]
        terms = search_terms(text)
        if not terms:
            return []
        rare = max(raw, key=lambda w: len(_fold(w)))  # the longest term narrows the candidates best
        rows: list[Any] = []
        if self.has_fts:
            rows = self._query(
                "SELECT DISTINCT w.session_id FROM words_fts f JOIN words w ON w.id = f.rowid"
                " WHERE words_fts MATCH ? ORDER BY w.session_id DESC",
                ('"' + rare.replace('"', '""') + '"*',),
            )
        like = "%" + _fold(rare).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        if not rows:  # no FTS5, or a match inside a word (FTS matches whole tokens or prefixes)
            rows = self._query(
                "SELECT DISTINCT session_id FROM words WHERE speculative = 0 AND text LIKE ? ESCAPE '\\'",
                (like,),
            )
        cut_off = [  # sessions a crash cut off: their speculative words are their last words
            int(r[0])
            for r in self._query(
                "SELECT DISTINCT w.session_id FROM words w JOIN sessions s ON s.id = w.session_id"
                " WHERE s.ended_at IS NULL AND w.speculative = 1 AND w.text LIKE ? ESCAPE '\\'",
                (like,),
            )
            if not self.recording(int(r[0]))
        ]
        ids = sorted({int(r[0]) for r in rows} | set(cut_off), reverse=True)
        hits: list[SearchHit] = []
        for session_id in ids:
            hits += self._phrase_hits(session_id, terms, limit - len(hits))
            if len(hits) >= limit:
                break
        return hits

    def _phrase_hits(self, session_id: int, terms: list[str], limit: int) -> list[SearchHit]:
        """Where ``terms`` were said in the session, each source's words in order (:func:`phrase_at`)."""
        hits: list[SearchHit] = []
        n = len(terms)
        every = not self.recording(session_id) and self._unended(session_id)  # as session_words reads it
        for source in SOURCES:
            rows = self._query(
                "SELECT seq, text, start_ms, end_ms FROM words WHERE session_id = ? AND source = ?"
                " AND (speculative = 0 OR ?) ORDER BY seq",
                (session_id, source, int(every)),
            )
            said = [r[1] for r in rows]
            for i in range(len(rows) - n + 1):
                if not phrase_at(said, i, terms):
                    continue
                context = " ".join(normalize_text(r[1]) for r in rows[max(0, i - 5) : i + n + 5])
                hits.append(
                    SearchHit(session_id, source, rows[i][0], rows[i][2], rows[i + n - 1][3], context)
                )
                if len(hits) >= limit:
                    return hits
        return hits

    # -- deleting ------------------------------------------------------------------------------

    def delete_session(self, session_id: int) -> None:
        """Delete a session and its words.

        Raises:
            StorageError: there is no session with this id.
        """
        self.get_session(session_id)
        with self._transaction() as conn:
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        self._counts = {k: v for k, v in self._counts.items() if k[0] != session_id}
        logger.info("deleted session %d", session_id)

    def purge_older_than(self, days: int, *, now: dt.datetime | None = None) -> int:
        """Delete sessions that started more than ``days`` days ago (the retention setting).

        ``days <= 0`` keeps everything. Sessions this store is recording are never deleted.

        Returns:
            How many sessions were deleted.
        """
        if days <= 0:
            return 0
        cutoff = ((now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=days)).isoformat(timespec="seconds")
        with self._transaction() as conn:
            ids = [
                int(r[0])
                for r in conn.execute("SELECT id FROM sessions WHERE started_at < ?", (cutoff,)).fetchall()
                if int(r[0]) not in self._active
            ]
            conn.executemany("DELETE FROM sessions WHERE id = ?", [(i,) for i in ids])
        if ids:
            self._counts = {k: v for k, v in self._counts.items() if k[0] not in ids}
            logger.info("retention: deleted %d sessions older than %d days", len(ids), days)
        return len(ids)

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` result ("ok" when the file is sound)."""
        return "\n".join(str(r[0]) for r in self._query("PRAGMA integrity_check"))

    # -- internals -----------------------------------------------------------------------------

    def _count(self, conn: sqlite3.Connection, session_id: int, source: str) -> int:
        key = (session_id, source)
        if key not in self._counts:
            row = conn.execute(
                "SELECT count(*) FROM words WHERE session_id = ? AND source = ?", (session_id, source)
            ).fetchone()
            self._counts[key] = int(row[0])
        return self._counts[key]

    @contextlib.contextmanager
    def _transaction(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction; ``durable=False`` syncs only when ``sync_interval_s`` has passed.
        One opened inside another (by the same thread: the lock is held) is part of it: the outer
        one commits or rolls back the whole."""
        with self._lock:
            if self._outer:
                yield self._conn
                return
            full = durable or time.monotonic() - self._last_sync >= self.sync_interval_s
            try:
                if full != self._full and self.path is not None:
                    self._conn.execute(f"PRAGMA synchronous = {'FULL' if full else 'NORMAL'}")
                    self._full = full
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StorageError(f"cannot write the session store {self._where()}: {exc}") from exc
            self._outer = True
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                self._counts.clear()  # the cached counts may describe the rolled-back state
                if isinstance(exc, sqlite3.Error):
                    raise StorageError(f"cannot write the session store {self._where()}: {exc}") from exc
                raise
            finally:
                self._outer = False
            if full:
                self._last_sync = time.monotonic()

    def _rollback(self) -> None:
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            logger.debug("rollback failed", exc_info=True)

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StorageError(f"cannot read the session store {self._where()}: {exc}") from exc

    def _where(self) -> str:
        return str(self.path) if self.path else "(in memory)"
