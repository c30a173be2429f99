"""Enter marks this moment: the lines typed in the terminal while ``captioner listen`` runs.

The app marks a moment with Ctrl+Alt+M; a person captioning in a terminal presses Enter, after
typing a note if they like ("decision", Enter). A daemon thread reads the terminal's lines and
keeps each with the monotonic time its Enter was read; the listen loop takes them between rounds
(:meth:`MarkKeys.take`) and turns that time into the session's audio clock.

Only a terminal is read: a pipe or a file on stdin (a service, a script, pytest) is left alone.
On POSIX the terminal's echo is turned off while listening (the line discipline still collects a
line; Enter still ends it), so a note typed between caption lines does not break them: the note
comes back in the "★ marked" line. The terminal's settings are restored by :meth:`close` (and at
exit). On Windows the console echoes what is typed (there is no ``termios``).
"""

from __future__ import annotations

import atexit
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["MarkKeys"]


class MarkKeys:
    """Reads the lines typed in a terminal, each a request to mark the moment its Enter was read.

    Args:
        stdin: the terminal (``sys.stdin``); anything that is not a terminal reads nothing.
        clock: monotonic seconds (the time of each Enter).

    Attributes:
        active: a terminal is being read.
    """

    def __init__(self, stdin: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self._stdin = stdin
        self._clock = clock
        self._lines: queue.SimpleQueue[tuple[float, str]] = queue.SimpleQueue()
        self._saved: list | None = None  # the terminal's settings before echo was turned off
        try:
            self.active = stdin.isatty()
        except (AttributeError, ValueError, OSError):  # closed or replaced (pytest's capture)
            self.active = False
        if not self.active:
            return
        self._quiet()
        threading.Thread(target=self._read, name="captioner-mark-keys", daemon=True).start()

    def _quiet(self) -> None:
        """Echo off, line editing on (POSIX terminals)."""
        try:
            import termios
        except ImportError:  # Windows: the console echoes
            return
        with contextlib.suppress(termios.error, OSError, ValueError):
            fd = self._stdin.fileno()
            self._saved = termios.tcgetattr(fd)
            quiet = termios.tcgetattr(fd)
            quiet[3] = (quiet[3] & ~termios.ECHO) | termios.ICANON  # lflags
            termios.tcsetattr(fd, termios.TCSANOW, quiet)
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
        saved, self._saved = self._saved, None
        if saved is None:
            return
        import termios

        with contextlib.suppress(termios.error, OSError, ValueError):
            termios.tcsetattr(self._stdin.fileno(), termios.TCSANOW, saved)
