"""Rows read straight from the table leaf pages of a damaged SQLite file (the session store's salvage).

SQLite reaches a table's rows through its B-tree: where the damaged page is an interior page (a
table's root, written at every split), SQLite cannot reach the leaf pages under it though every one
of them is intact, and a store whose words table lost its root read back no word at all. The file
format (https://www.sqlite.org/fileformat2.html) lets the rows be read from the leaf pages
themselves, as SQLite's own recovery extension does (``.recover`` in its shell; Python's ``sqlite3``
does not have it): every page of type 0x0D (a table's leaf) that is not on the freelist (the pages of
deleted rows keep them), its cells' rowids and records decoded, a record that spills to overflow
pages read from them.

Only the main file is read: checkpoint its write-ahead log into it first (``PRAGMA wal_checkpoint``).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SQLITE_HEADER", "LeafScan", "scan_leaves"]

Value = None | int | float | str | bytes

SQLITE_HEADER = b"SQLite format 3\x00"  # a SQLite file's first 16 bytes
_TABLE_LEAF, _TABLE_INTERIOR, _INDEX_LEAF, _INDEX_INTERIOR = 0x0D, 0x05, 0x0A, 0x02
_PAGE_TYPES = (_TABLE_LEAF, _TABLE_INTERIOR, _INDEX_LEAF, _INDEX_INTERIOR)
_ENCODINGS = {1: "utf-8", 2: "utf-16-le", 3: "utf-16-be"}
_INT_SIZES = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


@dataclass
class LeafScan:
    """What :func:`scan_leaves` found.

    Attributes:
        rows: ``(page, rowid, values)`` of every cell of every table leaf page, in page order.
        unreadable: the pages that are no B-tree page (a bad type byte: a damaged page), not on the
            freelist and not an overflow page of a record read.
    """

    rows: list[tuple[int, int, tuple[Value, ...]]] = field(default_factory=list)
    unreadable: list[int] = field(default_factory=list)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """SQLite's variable-length integer at ``pos``: (value, the position after it); 1-9 bytes."""
    value = 0
    for i in range(8):
        byte = buf[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos + i + 1
    return (value << 8) | buf[pos + 8], pos + 9


def _record(payload: bytes, encoding: str) -> tuple[Value, ...]:
    """A record's values (its header of serial types, then their bytes); ValueError where it is not one."""
    size, pos = _varint(payload, 0)
    if not 0 < size <= len(payload):
        raise ValueError("bad record header")
    types: list[int] = []
    while pos < size:
        kind, pos = _varint(payload, pos)
        types.append(kind)
    values: list[Value] = []
    body = size
    for kind in types:
        if kind == 0:
            values.append(None)
        elif kind in _INT_SIZES:
            n = _INT_SIZES[kind]
            values.append(int.from_bytes(payload[body : body + n], "big", signed=True))
            body += n
        elif kind == 7:
            values.append(struct.unpack(">d", payload[body : body + 8])[0])
            body += 8
        elif kind in (8, 9):
            values.append(kind - 8)
        elif kind >= 12:
            n = (kind - 12) // 2
            data = payload[body : body + n]
            values.append(data.decode(encoding) if kind % 2 else data)
            body += n
        else:
            raise ValueError(f"serial type {kind}")
    if body != len(payload):
        raise ValueError("record length")
    return tuple(values)


def _freelist(data: mmap.mmap, page_size: int, pages: int, first: int | None) -> set[int]:
    """The pages on the freelist (its trunk pages and the leaves they list); as much as can be read.
    ``first``: the first trunk page, from the header; None where the header is lost: then every page
    shaped as a trunk is taken for one (its next trunk and its leaves all pages of the file, its
    first byte no B-tree page's type), so that the rows of deleted sessions stay deleted."""
    free: set[int] = set()
    trunks = [first] if first is not None else [n for n in range(2, pages + 1) if _trunk(data, page_size, pages, n)]
    for trunk in trunks:
        while 0 < trunk <= pages and trunk not in free:
            free.add(trunk)
            page = data[(trunk - 1) * page_size : trunk * page_size]
            count = min(int.from_bytes(page[4:8], "big"), page_size // 4 - 2)
            free.update(n for i in range(count) if 0 < (n := int.from_bytes(page[8 + 4 * i : 12 + 4 * i], "big")) <= pages)
            trunk = int.from_bytes(page[0:4], "big") if first is not None else 0
    return free


def _trunk(data: mmap.mmap, page_size: int, pages: int, number: int) -> bool:
    """Page ``number`` is shaped as a freelist trunk page: the next trunk 0 or a page, a count that
    fits, every page it lists a page of the file, once; not a B-tree page."""
    page = data[(number - 1) * page_size : number * page_size]
    count = int.from_bytes(page[4:8], "big")
    if page[0] in _PAGE_TYPES or int.from_bytes(page[0:4], "big") > pages or count > page_size // 4 - 2:
        return False
    listed = [int.from_bytes(page[8 + 4 * i : 12 + 4 * i], "big") for i in range(count)]
    return all(1 < n <= pages for n in listed) and len(set(listed)) == count


def _begins_page(data: mmap.mmap, at: int, size: int) -> bool:
    """A B-tree page of ``size`` bytes could begin at offset ``at``: a page type, its cell pointers
    after its header and inside the page, its content area and first free block there too."""
    head = data[at : at + 12]
    if len(head) < 12 or head[0] not in _PAGE_TYPES:
        return False
    cells, top = int.from_bytes(head[3:5], "big"), int.from_bytes(head[5:7], "big") or 65536
    start = (8 if head[0] in (_TABLE_LEAF, _INDEX_LEAF) else 12) + 2 * cells
    free = int.from_bytes(head[1:3], "big")
    if start > size or not (cells == 0 or start <= top <= size) or not (free == 0 or start <= free < size):
        return False
    pointers = data[at + start - 2 * cells : at + start]
    return all(start <= int.from_bytes(pointers[i : i + 2], "big") < size for i in range(0, 2 * cells, 2))


def _page_size(data: mmap.mmap) -> int:
    """The page size of a file whose header is lost: the largest at whose multiples about as many
    B-tree pages begin (:func:`_begins_page`) as at the best size. Every true page begins at a
    multiple of each size up to the true one, a page inside a page hardly ever looks like one, and at
    twice the true size only half of them are seen. ValueError where none is found."""
    counts = {size: sum(1 for n in range(2, len(data) // size + 1) if _begins_page(data, (n - 1) * size, size))
              for size in (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)}
    most = max(counts.values())
    if most == 0:
        raise ValueError("no page size fits its pages")
    return max(size for size, n in counts.items() if n >= 0.75 * most)


def _spilled(data: mmap.mmap, page_size: int, usable: int, pages: int, first: int, size: int
             ) -> tuple[bytes, list[int]] | None:
    """The ``size`` bytes of a record that went on to overflow pages from page ``first`` (each: the
    next page's number, then ``usable - 4`` bytes), and those pages; None where the chain leaves the
    file or loops."""
    out, chain, page = b"", [], first
    while len(out) < size:
        if not 0 < page <= pages or page in chain:
            return None
        chain.append(page)
        at = (page - 1) * page_size
        out += data[at + 4 : at + usable][: size - len(out)]
        page = int.from_bytes(data[at : at + 4], "big")
    return out, chain


def scan_leaves(path: Path) -> LeafScan:
    """Every row on the table leaf pages of the SQLite file at ``path`` (not through any B-tree); a
    record that spills to overflow pages is read from them.

    Where the first page is damaged (its header lost: page size, encoding, freelist), SQLite's
    defaults are taken (UTF-8, no reserved bytes), the page size that its pages show and the
    freelist trunks found by their shape.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is no SQLite file (under two pages, or no page size fits its pages).
    """
    with open(path, "rb") as f:
        if f.seek(0, 2) < 1024:
            raise ValueError("not a SQLite database: under two pages")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:  # a store may be large: pages on demand
            return _scan(data)


def _scan(data: mmap.mmap) -> LeafScan:
    page_size = int.from_bytes(data[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    header = data[:16] == SQLITE_HEADER and page_size >= 512 and not page_size & (page_size - 1)
    if not header:  # the first page is damaged: SQLite's defaults, the size the pages show
        page_size = _page_size(data)
    usable = page_size - data[20] if header else page_size
    encoding = _ENCODINGS.get(int.from_bytes(data[56:60], "big"), "utf-8") if header else "utf-8"
    pages = len(data) // page_size
    free = _freelist(data, page_size, pages, int.from_bytes(data[32:36], "big") if header else None)
    most, least = usable - 35, (usable - 12) * 32 // 255 - 23  # a table leaf cell's local payload bounds
    out = LeafScan()
    other: set[int] = set()  # overflow pages read, and pages of other B-trees
    for number in range(1, pages + 1):
        if number in free:
            continue
        page = data[(number - 1) * page_size : (number - 1) * page_size + usable]
        head = 100 if number == 1 else 0
        kind = page[head]
        if kind != _TABLE_LEAF:
            if kind in _PAGE_TYPES:
                other.add(number)
            continue
        other.add(number)
        cells = int.from_bytes(page[head + 3 : head + 5], "big")
        for i in range(min(cells, (usable - head - 8) // 2)):
            at = int.from_bytes(page[head + 8 + 2 * i : head + 10 + 2 * i], "big")
            try:
                size, pos = _varint(page, at)
                rowid, pos = _varint(page, pos)
                local = size if size <= most else (k if (k := least + (size - least) % (usable - 4)) <= most else least)
                if pos + local + (local < size) * 4 > usable:
                    continue  # a torn cell
                payload = page[pos : pos + local]
                if local < size:
                    spilled = _spilled(data, page_size, usable, pages, int.from_bytes(page[pos + local : pos + local + 4],
                                                                                      "big"), size - local)
                    if spilled is None:
                        continue
                    payload += spilled[0]
                    other.update(spilled[1])
                out.rows.append((number, rowid - (1 << 64) if rowid >= 1 << 63 else rowid,
                                 _record(payload, encoding)))
            except (IndexError, ValueError, UnicodeDecodeError, struct.error):
                continue
    out.unreadable = [n for n in range(1, pages + 1) if n not in free and n not in other]
    return out
