"""Reading a SQLite file's table leaf pages directly (the salvage of a store whose B-tree is damaged),
checked against SQLite reading the same file."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from captioner.transcript._pages import scan_leaves

VALUES = [None, 0, 1, -1, 127, -128, 300, -40000, 2**23 + 5, -(2**31), 2**40 + 3, -(2**47), 2**62, -(2**63),
          0.5, -1e300, "", "word", " naïve café 東京 🙂", b"", b"\x00\xffbytes"]


def _table(path: Path, rows: int, *, page_size: int = 4096, encoding: str = "UTF-8") -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA page_size = {page_size}")
    conn.execute(f"PRAGMA encoding = '{encoding}'")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a, b, c)")
    conn.executemany("INSERT INTO t (a, b, c) VALUES (?, ?, ?)",
                     [(VALUES[i % len(VALUES)], VALUES[(3 * i + 1) % len(VALUES)], f"row {i}") for i in range(rows)])
    conn.execute("INSERT INTO t (id, a, b, c) VALUES (-7, 'negative rowid', NULL, ?)", ("x" * 6000,))  # overflows
    conn.commit()
    try:
        conn.execute("SELECT count(*) FROM dbstat").fetchone()
    except sqlite3.OperationalError:
        pytest.skip("this SQLite has no dbstat table to say which pages hold what")
    finally:
        conn.close()


@pytest.mark.parametrize(("page_size", "encoding"), [(4096, "UTF-8"), (512, "UTF-16le"), (65536, "UTF-16be")])
def test_every_row_on_the_leaf_pages_reads_as_sqlite_reads_it(tmp_path: Path, page_size: int, encoding: str) -> None:
    path = tmp_path / "t.sqlite3"
    _table(path, 2000, page_size=page_size, encoding=encoding)
    conn = sqlite3.connect(path)
    expected = {row[0]: row[1:] for row in conn.execute("SELECT id, id, a, b, c FROM t")}
    leaves = {row[0] for row in conn.execute("SELECT pageno FROM dbstat WHERE name = 't' AND pagetype = 'leaf'")}
    overflow = {row[0] for row in conn.execute("SELECT pageno FROM dbstat WHERE pagetype = 'overflow'")}
    conn.close()
    assert bool(overflow) == (page_size < 8192)  # the 6000-byte row spills to overflow pages there
    scan = scan_leaves(path)
    found = {rowid: (rowid, *values[1:]) for _, rowid, values in scan.rows if len(values) == 4}
    assert found == expected  # every value of every type, the rowid alias stored as NULL, a negative rowid, a
    assert {page for page, _, values in scan.rows if len(values) == 4} <= leaves  # record read from its overflow
    assert scan.unreadable == []  # every page accounted for


@pytest.mark.parametrize("header", ["kept", "lost"])
def test_damaged_and_freed_pages_give_no_rows(tmp_path: Path, header: str) -> None:
    """Rows deleted stay deleted though their freed pages still hold them (a SQLite built without
    secure delete, as on Windows): the freelist is skipped, found from the header or, where the first
    page is lost too, by the shape of its trunk pages."""
    path = tmp_path / "t.sqlite3"
    _table(path, 3000)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA secure_delete = OFF")
    conn.execute("DELETE FROM t WHERE id > 1500")
    conn.commit()
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] > 0
    kept = {row[0] for row in conn.execute("SELECT id FROM t")}
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    leaf = conn.execute("SELECT pageno FROM dbstat WHERE name = 't' AND pagetype = 'leaf' ORDER BY pageno").fetchone()[0]
    overflow = {row[0] for row in conn.execute("SELECT pageno FROM dbstat WHERE pagetype = 'overflow'")}
    conn.close()
    assert b"row 2999" in path.read_bytes()  # a deleted row, on a freed page
    damaged = {root, leaf} | ({1} if header == "lost" else set())
    with open(path, "r+b") as f:
        for page in damaged:
            f.seek((page - 1) * 4096)
            f.write(random.Random(page).randbytes(4096))
    scan = scan_leaves(path)
    found = {rowid for _, rowid, values in scan.rows if len(values) == 4}
    assert found < kept and len(kept - found) < 100  # the damaged leaf's rows only; no deleted row back
    # the damaged pages; and the overflow page of a record on the damaged leaf, if it was there
    assert damaged <= set(scan.unreadable) <= damaged | overflow


@pytest.mark.parametrize("page_size", [512, 1024, 4096, 8192, 65536])
def test_a_lost_first_page_leaves_the_page_size_to_be_found(tmp_path: Path, page_size: int) -> None:
    """The header (page size, encoding, freelist) is on the first page: where that is damaged, the
    page size is the one the other pages show, and every row on them is read as before."""
    path = tmp_path / "t.sqlite3"
    _table(path, 2000, page_size=page_size)
    conn = sqlite3.connect(path)
    expected = {row[0]: row[1:] for row in conn.execute("SELECT id, id, a, b, c FROM t")}
    conn.close()
    with open(path, "r+b") as f:
        f.write(random.Random(page_size).randbytes(page_size))
    scan = scan_leaves(path)
    assert {rowid: (rowid, *values[1:]) for _, rowid, values in scan.rows if len(values) == 4} == expected
    assert scan.unreadable == [1]


@pytest.mark.parametrize("content", [b"", b"not a database" * 100, b"SQLite format 3\x00\x00\x07" + b"\x00" * 200])
def test_a_file_without_a_header_says_so(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.sqlite3"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"two pages|page size"):
        scan_leaves(path)
