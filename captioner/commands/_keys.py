"""Enter marks this moment: the lines typed in the terminal while ``captioner listen`` runs.

The app marks a moment with Ctrl+Alt+M; a person captioning in a terminal presses Enter, after
typing a note if they like ("decision", Enter). A daemon thread reads the terminal's lines and
keeps each with the monotonic time its Enter was read; the listen loop takes them between rounds
(:meth:`MarkKeys.take`) and turns that time into the session's audio clock.

Only a terminal is read: a pipe or a file on stdin (a service, a script, pytest) is left alone.
The terminal's echo is turned off while listening (the line discipline still collects a line; Enter
still ends it), so a note typed between caption lines does not break them: the note comes back in
the "★ marked" line. On POSIX through ``termios`` (ECHO off, ICANON on); on Windows through the
console's input mode (``SetConsoleMode``: ``ENABLE_ECHO_INPUT`` cleared, ``ENABLE_LINE_INPUT``
kept, which echo needs and which makes Enter end a line; a stdin that is no console, such as
mintty's pipe, is left as it is). The terminal's settings are restored by :meth:`close` (and at
exit).
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol, TextIO

__all__ = ["ConsoleModes", "MarkKeys"]

ENABLE_LINE_INPUT = 0x0002  # the Windows console's input modes (SetConsoleMode)
ENABLE_ECHO_INPUT = 0x0004


class ConsoleModes(Protocol):
    """The Windows console's input mode of a file descriptor (``GetConsoleMode``/``SetConsoleMode``)."""

    def get(self, fd: int) -> int | None:
        """The mode, or None where ``fd`` is no console."""
        ...

    def set(self, fd: int, mode: int) -> bool:
        """Set the mode; False where the console refused it."""
        ...


class _Win32Console:
    """:class:`ConsoleModes` through ``kernel32`` (Windows only)."""

    def __init__(self) -> None:
        import ctypes
        import msvcrt
        from ctypes import wintypes

        self._handle = msvcrt.get_osfhandle  # type: ignore[attr-defined]
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
        self._get = kernel32.GetConsoleMode
        self._get.argtypes = (wintypes.HANDLE, ctypes.POINTER(wintypes.DWORD))
        self._get.restype = wintypes.BOOL
        self._set = kernel32.SetConsoleMode
        self._set.argtypes = (wintypes.HANDLE, wintypes.DWORD)
        self._set.restype = wintypes.BOOL
        self._dword = wintypes.DWORD
        self._byref = ctypes.byref

    def get(self, fd: int) -> int | None:
        mode = self._dword()
        return int(mode.value) if self._get(self._handle(fd), self._byref(mode)) else None

    def set(self, fd: int, mode: int) -> bool:
        return bool(self._set(self._handle(fd), mode))


class MarkKeys:
    """Reads the lines typed in a terminal, each a request to mark the moment its Enter was read.

    Args:
        stdin: the terminal (``sys.stdin``); anything that is not a terminal reads nothing.
        clock: monotonic seconds (the time of each Enter).
        console: the Windows console's input modes (default there: ``kernel32``; elsewhere
            ``termios`` is used unless one is given).

    Attributes:
        active: a terminal is being read.
    """

    def __init__(self, stdin: TextIO, clock: Callable[[], float] = time.monotonic, *,
                 console: ConsoleModes | None = None) -> None:
        self._stdin = stdin
        self._clock = clock
        self._lines: queue.SimpleQueue[tuple[float, str]] = queue.SimpleQueue()
        self._saved: list | None = None  # the terminal's settings before echo was turned off (termios)
        self._console = console
        self._saved_mode: int | None = None  # the console's input mode before (Windows)
        try:
            self.active = stdin.isatty()
        except (AttributeError, ValueError, OSError):  # closed or replaced (pytest's capture)
            self.active = False
        if not self.active:
            return
        self._quiet()
        threading.Thread(target=self._read, name="captioner-mark-keys", daemon=True).start()

    def _quiet(self) -> None:
        """Echo off, line editing on."""
        if self._console is None and sys.platform == "win32":
            with contextlib.suppress(OSError, AttributeError):
                self._console = _Win32Console()
        if self._console is not None:
            self._quiet_console(self._console)
            return
        try:
            import termios
        except ImportError:
            return
        with contextlib.suppress(termios.error, OSError, ValueError):
            fd = self._stdin.fileno()
            self._saved = termios.tcgetattr(fd)
            quiet = termios.tcgetattr(fd)
            quiet[3] = (quiet[3] & ~termios.ECHO) | termios.ICANON  # lflags
            termios.tcsetattr(fd, termios.TCSANOW, quiet)
            atexit.register(self.close)

    def _quiet_console(self, console: ConsoleModes) -> None:
        """The Windows console's echo off, its line input on (echo needs it)."""
        with contextlib.suppress(OSError, ValueError):
            fd = self._stdin.fileno()
            mode = console.get(fd)
            if mode is None:  # not a console (a pipe that says it is a terminal)
                return
            if console.set(fd, (mode & ~ENABLE_ECHO_INPUT) | ENABLE_LINE_INPUT):
                self._saved_mode = mode
                atexit.register(self.close)

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in self._stdin:  # ends at end of input (Ctrl-D) or when stdin closes
                self._lines.put((self._clock(), " ".join(line.split())))

    def take(self) -> list[tuple[float, str]]:
        """The lines typed since the last call: (monotonic time of the Enter, the note, "" for none)."""
        taken = []
        while True:
            try:
                taken.append(self._lines.get_nowait())
            except queue.Empty:
                return taken

    def close(self) -> None:
        """Give the terminal its settings back (echo on again); idempotent."""
        mode, self._saved_mode = self._saved_mode, None
        if mode is not None and self._console is not None:
            with contextlib.suppress(OSError, ValueError):
                self._console.set(self._stdin.fileno(), mode)
        saved, self._saved = self._saved, None
        if saved is None:
            return
        import termios

        with contextlib.suppress(termios.error, OSError, ValueError):
            termios.tcsetattr(self._stdin.fileno(), termios.TCSANOW, saved)
