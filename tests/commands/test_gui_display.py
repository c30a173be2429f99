"""No display (issue 26, item 5): one clear line and exit 2 instead of Qt's abort (exit 134); a bad
``--mark`` note is refused the same way, before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys

from captioner.commands.gui import display_problem


def test_display_problem_is_said_only_on_linux_without_a_display() -> None:
    assert display_problem("linux", {}) is not None
    assert display_problem("linux", {"DISPLAY": ":0"}) is None
    assert display_problem("linux", {"WAYLAND_DISPLAY": "wayland-0"}) is None
    assert display_problem("linux", {"QT_QPA_PLATFORM": "offscreen"}) is None
    assert display_problem("win32", {}) is None


def test_the_app_without_a_display_says_so_in_one_line(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["CAPTIONER_HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-m", "captioner"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("captioner: error: no display found"), done.stderr
    assert "captioner transcribe FILE" in done.stderr and "xvfb-run captioner" in done.stderr


def test_a_marks_note_too_long_is_refused_before_anything_starts(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env["CAPTIONER_HOME"] = str(tmp_path / "home")
    done = subprocess.run([sys.executable, "-m", "captioner", "--mark", "x" * 501], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr == "captioner: error: a mark's note is at most 500 characters; this one has 501\n"
