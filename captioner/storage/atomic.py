"""Atomic file replacement: readers see the old file or the new one, never half of either.

Used for settings, exports and reports. The temporary file is created in the target's folder (same
file system, so the rename is atomic) with user-only permissions, written, fsynced and renamed; the
folder is fsynced after so the rename survives a power cut (POSIX).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

__all__ = ["replace_atomically"]

logger = logging.getLogger(__name__)


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (the seam tests use to simulate a full disk)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable (POSIX); a no-op where directories cannot be opened (Windows)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``.

    Raises:
        OSError: the folder is missing or read-only, the disk is full, or the target is a folder;
            the target is then untouched and the temporary file removed.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(path))
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(path.parent)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                logger.warning("could not remove the temporary file %s", tmp, exc_info=True)
