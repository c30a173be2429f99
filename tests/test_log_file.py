"""The log file on a full disk: said once, the command's own output left clean.

``/dev/full`` is the real device that fails every write with ENOSPC, as a full disk does; the log
file is made a link to it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_CHILD = """
import logging, sys
from pathlib import Path
from captioner.__main__ import setup_logging
from captioner.storage.paths import AppPaths
setup_logging(AppPaths.default(sys.argv[1]), verbose=False)
for i in range(5):
    logging.getLogger("captioner.test").info("record %d", i)
logging.getLogger("captioner.test").warning("a warning for the person")
print("done")
"""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="/dev/full is Linux's")
def test_a_log_file_that_cannot_be_written_is_said_once_and_left_alone(tmp_path: Path) -> None:
    from captioner.storage.paths import AppPaths

    home = tmp_path / "home"
    logs = AppPaths.default(str(home)).logs
    logs.mkdir(parents=True)
    (logs / "captioner.log").symlink_to("/dev/full")
    done = subprocess.run([sys.executable, "-c", _CHILD, str(home)], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])))
    assert done.returncode == 0 and done.stdout == "done\n", done
    assert "Logging error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (f"captioner: cannot write the log file {logs / 'captioner.log'} (No space left on device); "
                        "not logging to it any more")
    assert lines[1:] == ["WARNING: a warning for the person"]  # stderr's own handler goes on


def test_a_log_file_another_captioner_holds_open_on_windows_is_written_on_unrotated(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """Windows refuses to rename a file another process has open (the app and a command both log to
    captioner.log), so the rotation at 2 MB fails there (``os.rename``: PermissionError, winerror 32,
    played here); the log goes on in the same file, rotation off for this process, nothing said on
    stderr and no record lost."""
    import logging
    import logging.handlers

    from captioner.__main__ import _LogFile

    path = tmp_path / "captioner.log"
    handler = _LogFile(path, maxBytes=200, backupCount=3, encoding="utf-8")
    tries = []

    def held_open(src, dst):
        tries.append(src)
        exc = PermissionError(13, "The process cannot access the file because it is being used by another process")
        exc.winerror = 32  # type: ignore[attr-defined]
        raise exc

    monkeypatch.setattr(logging.handlers.os, "rename", held_open)
    log = logging.getLogger("captioner.test.rotation")
    log.propagate = False
    log.addHandler(handler)
    try:
        for i in range(20):
            log.warning("record %02d %s", i, "x" * 40)
    finally:
        log.removeHandler(handler)
        handler.close()
    assert len(tries) == 1 and not handler.broken  # tried once, then written on
    text = path.read_text(encoding="utf-8")
    assert [line.split()[1] for line in text.splitlines()] == [f"{i:02d}" for i in range(20)]
    assert [p.name for p in tmp_path.iterdir()] == ["captioner.log"]
