"""Enter marks this moment in ``captioner listen``: the terminal's lines, read on a real pseudo-terminal
(the listen itself, with a real PulseAudio capture and engine, is tests/audio/test_audio_pulse.py)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from captioner.commands._keys import MarkKeys

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")


def _wait(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_each_enter_on_a_terminal_is_a_mark_with_the_note_typed_before_it_and_echo_is_off_meanwhile() -> None:
    import pty
    import termios

    master, slave = pty.openpty()
    terminal = os.fdopen(slave, "r", encoding="utf-8")
    try:
        assert termios.tcgetattr(slave)[3] & termios.ECHO  # a terminal echoes what is typed
        keys = MarkKeys(terminal)
        assert keys.active
        assert not termios.tcgetattr(slave)[3] & termios.ECHO  # not while listening: captions stay whole
        assert termios.tcgetattr(slave)[3] & termios.ICANON  # a line is still a line
        before = time.monotonic()
        os.write(master, b"\n")
        os.write(master, "decision  taken, \u00e9t\u00e9\n".encode())
        got: list[tuple[float, str]] = []
        _wait(lambda: bool(got.extend(keys.take())) or len(got) == 2)
        assert [note for _, note in got] == ["", "decision taken, \u00e9t\u00e9"]
        assert before <= got[0][0] <= got[1][0] <= time.monotonic()
        assert keys.take() == []
        keys.close()
        assert termios.tcgetattr(slave)[3] & termios.ECHO  # the terminal as it was
        keys.close()  # twice is harmless
    finally:
        os.close(master)
        terminal.close()


def test_a_pipe_is_not_read() -> None:
    """A service or a script that pipes into ``listen`` keeps its stdin: nothing is read from it."""
    read, write = os.pipe()
    with os.fdopen(read, "r") as pipe, os.fdopen(write, "w") as writer:
        keys = MarkKeys(pipe)
        writer.write("not for captioner\n")
        writer.flush()
        time.sleep(0.2)
        assert not keys.active and keys.take() == []
        assert pipe.readline() == "not for captioner\n"  # still there for whoever reads it
