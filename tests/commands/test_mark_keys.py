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


class FakeConsole:
    """The Windows console's input modes as kernel32 keeps them: a new console has every input mode on
    but the window and virtual-terminal ones (processed 0x1, line 0x2, echo 0x4, mouse 0x10, insert
    0x20, quick edit 0x40, extended flags 0x80); a handle that is no console has none."""

    def __init__(self, console: bool = True) -> None:
        self.mode = 0x1F7 if console else None
        self.calls: list[tuple[str, int, int | None]] = []

    def get(self, fd: int) -> int | None:
        self.calls.append(("get", fd, self.mode))
        return self.mode

    def set(self, fd: int, mode: int) -> bool:
        self.calls.append(("set", fd, mode))
        self.mode = mode
        return True


def test_on_windows_the_consoles_echo_is_off_while_listening_and_lines_still_end_at_enter() -> None:
    import pty

    master, slave = pty.openpty()
    terminal = os.fdopen(slave, "r", encoding="utf-8")
    try:
        console = FakeConsole()
        keys = MarkKeys(terminal, console=console)
        assert keys.active
        assert console.mode == 0x1F7 & ~0x4 and console.mode & 0x2  # echo off, line input kept
        os.write(master, b"note\n")
        got: list[tuple[float, str]] = []
        _wait(lambda: bool(got.extend(keys.take())) or len(got) == 1)
        assert got[0][1] == "note"
        keys.close()
        keys.close()
        assert console.mode == 0x1F7 and [c[0] for c in console.calls] == ["get", "set", "set"]  # as it was, once
        assert {c[1] for c in console.calls} == {slave}

        elsewhere = FakeConsole(console=False)  # mintty: a pipe that says it is a terminal
        other = MarkKeys(terminal, console=elsewhere)
        other.close()
        assert [c[0] for c in elsewhere.calls] == ["get"]  # nothing set, nothing restored
    finally:
        os.close(master)
        terminal.close()
