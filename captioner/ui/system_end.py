"""The system asks the app to end: a signal, or Windows ending the user's session.

* SIGTERM (log-out or shutdown on Linux and macOS, ``kill``), SIGINT (Ctrl-C in the terminal that
  started the app) and SIGHUP (that terminal closed) quit the app as its tray's Quit does: the engine
  stops, its last words are stored and the session ends. Python runs a signal's handler only between
  bytecodes, and Qt's event loop runs none while it waits, so without help a signal did nothing until
  the next timer (Ctrl-C was ignored) or, for SIGTERM, killed the process with the session not ended.
  The signal's byte on a socket (``signal.set_wakeup_fd``), watched by a ``QSocketNotifier``, wakes
  the loop and the handler runs.
* Windows' log-off and shutdown send no signal: Qt answers ``WM_ENDSESSION`` by emitting
  ``aboutToQuit`` from inside that message's handler, and Windows ends the process as soon as the
  handler returns (qtbase's ``qwindowscontext.cpp``: "since the process will be killed immediately
  quit() has no real effect"). What must be kept is kept inside ``aboutToQuit``, before it returns:
  the app connects :meth:`~captioner.app.CaptionerApp.end_now` to it.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
from collections.abc import Callable
from types import FrameType

from PySide6.QtCore import QObject, QSocketNotifier, QTimer

from captioner.core import END_SIGNALS

logger = logging.getLogger(__name__)

__all__ = ["QuitOnSignals"]


class QuitOnSignals(QObject):
    """Until :meth:`close`: SIGTERM, SIGINT and SIGHUP call ``quit`` from the event loop. Main thread only
    (Python's rule for signal handlers)."""

    def __init__(self, quit: Callable[[], object], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._quit = quit
        self._reader, self._writer = socket.socketpair()
        for end in (self._reader, self._writer):
            end.setblocking(False)
        self._wakeup = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        self._notifier = QSocketNotifier(self._reader.fileno(), QSocketNotifier.Type.Read, self)
        self._notifier.activated.connect(self._drain)  # Python runs: the handler runs first
        self._previous: dict[int, object] = {}
        for name in END_SIGNALS:  # those this platform has
            number = getattr(signal, name, None)
            if number is not None:
                self._previous[number] = signal.signal(number, self._on_signal)

    def _on_signal(self, number: int, _frame: FrameType | None) -> None:
        logger.info("%s: quitting", signal.Signals(number).name)
        QTimer.singleShot(0, self._quit)  # from the loop, not from inside whatever code the signal cut into

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while self._reader.recv(64):
                pass

    def close(self) -> None:
        """Restore the signals' earlier handlers and the wakeup fd."""
        for number, handler in self._previous.items():
            signal.signal(number, handler)  # type: ignore[arg-type]
        self._previous.clear()
        signal.set_wakeup_fd(self._wakeup)
        self._notifier.setEnabled(False)
        self._reader.close()
        self._writer.close()
