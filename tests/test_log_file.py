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
