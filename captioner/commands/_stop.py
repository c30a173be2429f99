"""How a command is stopped: Ctrl-C, and as Ctrl-C, SIGTERM (``kill``, ``timeout``, a service manager),
SIGHUP (its terminal closed) and the reader of its words going away (:class:`OutputClosed`).

Python raises KeyboardInterrupt for SIGINT only; SIGTERM ended the process where it stood, so
``transcribe`` wrote none of its exports and ``listen`` and ``transcribe`` left the session not ended,
its last words lost. With these handlers every stop takes the Ctrl-C path: the words shown are
kept, exported and the session ended. The app replaces them with its own (``ui/system_end.py``).
"""

from __future__ import annotations

import signal
from types import FrameType

from captioner.core import END_SIGNALS

__all__ = ["OutputClosed", "ignore_stops", "stop_as_ctrl_c"]

STOP_SIGNALS = tuple(name for name in END_SIGNALS if name != "SIGINT")  # Python makes SIGINT Ctrl-C itself


class OutputClosed(KeyboardInterrupt):
    """Nothing reads the command's words any more (``| head`` has its lines, a ``| tee`` that the
    same Ctrl-C ended: :attr:`~captioner.commands._printer.Console.gone`): a stop, taken as Ctrl-C's
    path, so the words so far are kept, exported and the session ended."""


def _interrupt(_number: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def stop_as_ctrl_c() -> None:
    """SIGTERM and SIGHUP raise KeyboardInterrupt, as SIGINT does, where they still have their
    default action (a signal a parent chose to ignore stays ignored). Main thread only."""
    for name in STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None and signal.getsignal(number) is signal.SIG_DFL:
            signal.signal(number, _interrupt)


def ignore_stops() -> None:
    """From here on no stop interrupts: what is being saved after the first one must not be lost to a
    second."""
    for name in END_SIGNALS:
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, signal.SIG_IGN)
