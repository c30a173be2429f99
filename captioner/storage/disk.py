"""Why a write failed, in words a person can act on: a full disk said as such.

SQLite reports a full disk as "disk I/O error" when it cannot grow its shared-memory file, and a
pack build as the ``OSError`` of whichever file was being written: the free space on the disk is
what tells the person what to do.
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["FULL_BYTES", "free_bytes", "write_problem"]

FULL_BYTES = 1 << 20  # a disk with less free space than this is said to be full


def free_bytes(path: Path) -> int | None:
    """Free bytes on the disk holding ``path`` (its nearest existing folder); None where it cannot be told."""
    path = Path(path)
    folder = next((p for p in (path, *path.parents) if p.exists()), path)
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def write_problem(exc: BaseException, path: Path, *, needed: int = FULL_BYTES) -> str:
    """``exc``'s reason, followed by "the disk is full (N KB free)" where the disk holding ``path``
    has less than ``needed`` bytes free (or "not enough free space" with the MB free)."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    free = free_bytes(path)
    if free is None or free >= needed:
        return reason
    if free < FULL_BYTES:
        return f"{reason}: the disk is full ({free // 1024} KB free)"
    return f"{reason}: not enough free disk space ({free // 2**20} MB free)"
