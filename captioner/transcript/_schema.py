"""Schema and migrations of the session store (see ``store.py`` for the layout and why).

Migration ``i`` in :data:`MIGRATIONS` brings a database from ``PRAGMA user_version`` ``i`` to
``i + 1`` inside one transaction; a database newer than this code is refused, never downgraded.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from captioner.errors import StorageError
from captioner.storage.atomic import replace_file
from captioner.storage.paths import aside_path

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "check_version", "move_aside", "upgrade"]

logger = logging.getLogger(__name__)

_BASE_SCHEMA = """
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL,
    ended_at TEXT,
    duration_ms INTEGER,
    sources TEXT NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    provider TEXT NOT NULL DEFAULT '',
    language TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}',
    title TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sessions_started ON sessions(started_at);
CREATE TABLE words (
    id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    source TEXT NOT NULL,
    seq INTEGER NOT NULL,
    text TEXT NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL,
    emitted_at_ms INTEGER NOT NULL,
    speculative INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_id, source, seq)
);
"""

_FTS_SCHEMA = """
CREATE VIRTUAL TABLE words_fts USING fts5(text, content='words', content_rowid='id',
                                          tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER words_fts_insert AFTER INSERT ON words WHEN new.speculative = 0 BEGIN
    INSERT INTO words_fts(rowid, text) VALUES (new.id, new.text);
END;
CREATE TRIGGER words_fts_delete AFTER DELETE ON words WHEN old.speculative = 0 BEGIN
    INSERT INTO words_fts(words_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
"""


def _statements(script: str) -> list[str]:
    """Split a schema script into statements (``executescript`` would commit the transaction)."""
    out: list[str] = []
    current = ""
    for line in script.strip().splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    return out


def _migrate_1(conn: sqlite3.Connection) -> None:
    for statement in _statements(_BASE_SCHEMA):
        conn.execute(statement)
    try:
        conn.execute("SAVEPOINT fts")
        for statement in _statements(_FTS_SCHEMA):
            conn.execute(statement)
        conn.execute("RELEASE fts")
    except sqlite3.OperationalError as exc:
        conn.execute("ROLLBACK TO fts")
        conn.execute("RELEASE fts")  # "no such module: fts5": search falls back to LIKE
        logger.warning("SQLite has no FTS5 (%s); session search will be slower", exc)


_GAPS_SCHEMA = """
CREATE TABLE gaps (
    id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    source TEXT NOT NULL,
    start_ms INTEGER NOT NULL,
    end_ms INTEGER NOT NULL
);
CREATE INDEX gaps_session ON gaps(session_id);
"""


def _migrate_2(conn: sqlite3.Connection) -> None:
    """Schema 2: ``gaps``, the audio the engine skipped because it fell behind real time (a new
    table: the words and sessions of a schema-1 store are untouched and read as before)."""
    for statement in _statements(_GAPS_SCHEMA):
        conn.execute(statement)


_MARKS_SCHEMA = """
CREATE TABLE marks (
    id INTEGER PRIMARY KEY,
    session_id INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    at_ms INTEGER NOT NULL,
    note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX marks_session ON marks(session_id);
"""


def _migrate_3(conn: sqlite3.Connection) -> None:
    """Schema 3: ``marks``, the moments the user marked ("Mark this moment"); a new table, as 2's."""
    for statement in _statements(_MARKS_SCHEMA):
        conn.execute(statement)


# Migration i brings a store from schema i to i + 1 (run inside one transaction each).
MIGRATIONS = (_migrate_1, _migrate_2, _migrate_3)
SCHEMA_VERSION = len(MIGRATIONS)


def check_version(conn: sqlite3.Connection, path: Path) -> int:
    """The schema version of the open database; call it before changing anything in the file.

    Raises:
        sqlite3.DatabaseError: the file is not a SQLite database.
        StorageError: the database was written by a newer captioner.
    """
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise StorageError(
            f"the session store {path} was written by a newer captioner (schema {version}, this "
            f"version reads up to {SCHEMA_VERSION}); update captioner or move the file away"
        )
    return version


def upgrade(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the schema to :data:`SCHEMA_VERSION`, one migration per transaction."""
    version = check_version(conn, path)
    for index in range(version, SCHEMA_VERSION):
        conn.execute("BEGIN IMMEDIATE")
        try:
            MIGRATIONS[index](conn)
            conn.execute(f"PRAGMA user_version = {index + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        logger.info("session store %s upgraded to schema %d", path, index + 1)


def move_aside(path: Path) -> Path:
    """Rename a bad database (and its -wal/-shm) to ``<name>.corrupt-<UTC timestamp>``."""
    target = aside_path(path)
    try:
        replace_file(path, target)
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            if side.exists():
                replace_file(side, target.with_name(target.name + suffix))
    except OSError as exc:
        raise StorageError(
            f"the session store {path} is not a SQLite database and cannot be moved aside: "
            f"{exc.strerror or exc}"
        ) from exc
    return target
