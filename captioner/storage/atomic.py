"""Atomic file replacement: readers see the old file or the new one, never half of either.

Used for settings, exports and reports. The temporary file is created in the target's folder (same
file system, so the rename is atomic) with user-only permissions, written, fsynced and renamed; the
folder is fsynced after so the rename survives a power cut (POSIX).

On Windows a rename over a file fails while another process holds it open without
``FILE_SHARE_DELETE``: Defender and the search indexer open a freshly written file to scan it, a
sync client (OneDrive) or an editor that just read it, for milliseconds. ``MoveFileExW`` then says
access denied (5), sharing violation (32) or lock violation (33), and a settings save or an export
failed for nothing. :func:`replace_file` tries again for up to about 1.3 s on those three only; a
real denial still fails, after that wait.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path

__all__ = ["replace_atomically", "replace_file"]

TRANSIENT_WINERRORS = frozenset({5, 32, 33})  # access denied, sharing violation, lock violation
RETRY_WAITS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64)  # then the error stands

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


def replace_file(src: str | Path, dst: str | Path) -> None:
    """``os.replace(src, dst)``, tried again while Windows says another process holds ``dst`` or
    ``src`` open (module docstring).

    Raises:
        OSError: as ``os.replace``, once the waits are spent or for any other error.
    """
    for wait in (*RETRY_WAITS_S, None):
        try:
            os.replace(src, dst)
            return
        except PermissionError as exc:
            if wait is None or getattr(exc, "winerror", None) not in TRANSIENT_WINERRORS:
                raise
            logger.debug("%s is held open by another program (%s); trying again", dst, exc)
            time.sleep(wait)


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
        replace_file(tmp, path)
        tmp = None
        _fsync_dir(path.parent)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                logger.warning("could not remove the temporary file %s", tmp, exc_info=True)
