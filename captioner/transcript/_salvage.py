"""What can still be read of a damaged session store (a file moved aside): its sessions, their words,
gaps and marks, and which sessions may have lost some of them.

Each table is read by its rows, not through its indexes (a damaged index loses nothing), in rowid
order through its B-tree, past a damaged page (:func:`readable_rows`); where the B-tree could not be
read whole, the rows on its leaf pages are read from the pages themselves
(:mod:`~captioner.transcript._pages`: a damaged interior page, a table's root above all, hides intact
leaves), known by their shape (each table's columns and their types) and kept only where the
B-tree did not give them. So one damaged page loses at most the rows on it.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from captioner.transcript._pages import LeafScan, scan_leaves

__all__ = ["Salvaged", "read_damaged", "readable_rows"]

Row = tuple[Any, ...]
Hole = tuple[int | None, int | None]
_NONE = type(None)


@dataclass(frozen=True)
class _Table:
    """One table as salvage reads it: its columns (after ``rowid``) and their stored types, one tuple
    of allowed types per value of a record (the rowid alias is stored as NULL)."""

    name: str
    columns: str
    shape: tuple[tuple[type, ...], ...]

    def fits(self, values: Sequence[Any]) -> bool:
        return len(values) == len(self.shape) and all(type(v) in t for v, t in zip(values, self.shape, strict=True))


_SESSIONS = _Table("sessions", "started_at, ended_at, duration_ms, sources, model, provider, language, settings, title",
                   ((_NONE,), (str,), (str, _NONE), (int, _NONE), (str,), (str,), (str,), (str,), (str,), (str,)))
_WORDS = _Table("words", "session_id, source, seq, text, start_ms, end_ms, emitted_at_ms, speculative",
                ((_NONE,), (int,), (str,), (int,), (str,), (int,), (int,), (int,), (int,)))
_GAPS = _Table("gaps", "session_id, source, start_ms, end_ms", ((_NONE,), (int,), (str,), (int,), (int,)))
_MARKS = _Table("marks", "session_id, at_ms, note", ((_NONE,), (int,), (int,), (str,)))


@dataclass
class Salvaged:
    """A damaged store's readable rows, by session.

    Attributes:
        sessions: ``(id, started_at, ended_at, duration_ms, sources, model, provider, language,
            settings, title)``, oldest first.
        words: session id -> ``(source, seq, text, start_ms, end_ms, emitted_at_ms, speculative)``
            in rowid order.
        gaps: session id -> ``(source, start_ms, end_ms)``.
        marks: session id -> ``(at_ms, note)``, in the order they were made.
        suspect: the sessions that may have lost rows on a damaged page.
        orphans: sessions whose rows were read but not the session itself (its page lost).
    """

    sessions: list[Row] = field(default_factory=list)
    words: dict[int, list[Row]] = field(default_factory=dict)
    gaps: dict[int, list[Row]] = field(default_factory=dict)
    marks: dict[int, list[Row]] = field(default_factory=dict)
    suspect: set[int] = field(default_factory=set)
    orphans: set[int] = field(default_factory=set)


def readable_rows(conn: sqlite3.Connection, table: str, columns: str) -> tuple[list[Row], list[Hole]]:
    """Every row of ``table`` that can still be read through its B-tree, in rowid order (``rowid,
    columns...``), and the damaged stretches met, each as the rowids read on either side of it (None:
    the table's start or end; ``[(None, None)]`` where not even its last rowid can be found). The
    table is read on from the last row read; where a damaged page stops the read, the first rowid
    past that page is found (a read that starts on the damaged page fails at once, one that starts
    past it does not: doubling the step, then halving it back) and the read goes on from there."""
    out: list[Row] = []
    holes: list[Hole] = []

    def starts(after: int) -> bool:
        try:
            conn.execute(f"SELECT rowid FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT 1", (after,)).fetchall()
            return True
        except sqlite3.DatabaseError:
            return False

    try:
        end = conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
    except sqlite3.DatabaseError:
        return out, [(None, None)]
    after, before = -1, None  # before: the hole being passed, its rowid before (None: the start)
    resumed = False
    while end is not None and after < end:
        try:
            for row in conn.execute(f"SELECT rowid, {columns} FROM {table} WHERE rowid > ? ORDER BY rowid", (after,)):
                if resumed:
                    holes.append((before, row[0]))  # the first row read past a damaged page
                    resumed = False
                out.append(row)
                after = row[0]
            break
        except sqlite3.DatabaseError:
            before = out[-1][0] if out else None  # the last row read before it
            bad, good = after, after + 1
            while not starts(good):
                bad, good = good, after + 2 * (good - after)
                if good >= end:
                    return out, [*holes, (before, None)]
            while good - bad > 1:  # the first start past the damaged page
                mid = (bad + good) // 2
                bad, good = (bad, mid) if starts(mid) else (mid, good)
            after, resumed = good, True
    if resumed:
        holes.append((before, None))
    return out, holes


class _Pages:
    """The damaged file's leaf pages, scanned once, when a table first needs them."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn, self._path = conn, path
        self._scan: LeafScan | None = None
        self._failed = False

    def rows(self, table: _Table, known: set[int]) -> tuple[list[Row], bool]:
        """``table``'s rows on the leaf pages whose rowid is not in ``known`` (shaped as
        :func:`readable_rows`'), and whether rows of it may be lost: a page reads as no page at all
        that is not the table's root, or the root does and no row of it was found (it was its only
        page); where the root alone was damaged, every leaf under it was read. The first page holds
        the header and the list of tables, never a row of ours: where it alone is lost (and with it
        which page is whose root), nothing of ours is."""
        if self._scan is None and not self._failed:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the log's pages into the file scanned
            try:
                self._scan = scan_leaves(self._path)
            except (OSError, ValueError):
                self._failed = True
        if self._scan is None:
            return [], True
        try:
            root = self._conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table.name,)).fetchone()[0]
        except (sqlite3.Error, TypeError):
            root = None
        found: dict[int, Row] = {}
        for _page, rowid, values in self._scan.rows:
            if rowid not in known and rowid not in found and table.fits(values):
                found[rowid] = (rowid, *values[1:])
        others = [page for page in self._scan.unreadable if page not in (root, 1)]  # 1: the header and schema
        return list(found.values()), bool(others) or (root in self._scan.unreadable and not found)


def _read(conn: sqlite3.Connection, pages: _Pages, table: _Table) -> tuple[list[Row], list[Hole], bool]:
    """``table``'s rows (through its B-tree, then from its leaf pages where that failed), in rowid
    order, the holes the B-tree read met, and whether rows may be lost in them."""
    rows, holes = readable_rows(conn, table.name, table.columns)
    if not holes:
        return rows, holes, False
    found, lost = pages.rows(table, {row[0] for row in rows})
    return sorted(rows + found, key=lambda row: row[0]), holes, lost


def _word_suspects(rows: Sequence[Row], holes: Sequence[Hole], lost: bool) -> set[int]:
    """The sessions whose last words may be lost in the ``holes`` (``rows``: the word rows, in rowid
    order): the session before a jump of rowids across a hole (a page of words may be gone there; a
    retraction leaves such jumps too, so this errs towards "in part") and, where a leaf page may be
    lost, the last session read before a hole open at the table's end. A session's first or middle
    words lost show as a gap in its ``seq`` (:func:`read_damaged` checks), so only its end is judged
    here."""
    out: set[int] = set()
    for span, _before, after in _spans(rows, holes):
        out.update(x[1] for x, y in itertools.pairwise(span) if y[0] != x[0] + 1)
        if span and lost and after is None:
            out.add(span[-1][1])
    return out


def _spans(rows: Sequence[Row], holes: Sequence[Hole]) -> list[tuple[Sequence[Row], int | None, int | None]]:
    """Each hole's rows, from the row read before it to the row read after it (both included)."""
    rowids = [row[0] for row in rows]
    return [(rows[bisect.bisect_left(rowids, before) if before is not None else 0:
                  bisect.bisect_right(rowids, after) if after is not None else len(rows)], before, after)
            for before, after in holes]


def _row_suspects(rows: Sequence[Row], holes: Sequence[Hole], lost: bool, ids: Sequence[int]) -> set[int]:
    """The sessions that may have lost gaps or marks (rows without an order of their own within a
    session): every session from the one before a hole to the one after it where rows may be gone
    there (a jump of rowids across it, or a leaf page lost; to the first or last session where the
    hole is open)."""
    out: set[int] = set()
    for span, before, after in _spans(rows, holes):
        if lost or any(y[0] != x[0] + 1 for x, y in itertools.pairwise(span)):
            low = span[0][1] if span and before is not None else -(1 << 63)
            high = span[-1][1] if span and after is not None else 1 << 63
            out.update(sid for sid in ids if low <= sid <= high)
    return out


def read_damaged(path: Path) -> Salvaged:
    """Every row of the store at ``path`` that can still be read, by session (see the module doc).
    An empty :class:`Salvaged` where nothing can be (a file that is no database at all)."""
    out = Salvaged()
    try:
        conn = sqlite3.connect(path, check_same_thread=False)  # the copy aside: nothing else opens it
    except sqlite3.Error:
        return out
    try:
        pages = _Pages(conn, path)
        out.sessions, _holes, _lost = _read(conn, pages, _SESSIONS)  # a session lost is said by its rows
        ids = [row[0] for row in out.sessions]
        known = set(ids)
        words, holes, lost = _read(conn, pages, _WORDS)
        out.suspect |= _word_suspects(words, holes, lost)
        if lost:  # a session with no word read may have had them on a lost page
            out.suspect |= known - {row[1] for row in words}
        for table, into in ((_GAPS, out.gaps), (_MARKS, out.marks)):
            rows, holes, lost = _read(conn, pages, table)
            out.suspect |= _row_suspects(rows, holes, lost, ids)
            for row in rows:
                into.setdefault(row[1], []).append(row[2:])
        for row in words:
            out.words.setdefault(row[1], []).append(row[2:])
        out.orphans = (set(out.words) | set(out.gaps) | set(out.marks)) - known
        for sid, own in out.words.items():  # a source's seq runs 0..n-1; a gap is words lost
            seqs: dict[str, list[int]] = {}
            for source, seq, *_ in own:
                seqs.setdefault(source, []).append(seq)
            if any(sorted(s) != list(range(len(s))) for s in seqs.values()):
                out.suspect.add(sid)
        return out
    finally:
        conn.close()
