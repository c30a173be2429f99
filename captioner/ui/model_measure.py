"""Settings → Model → "Measure on this computer…": the app's measurement run on a thread of its own.

The measuring itself (every installed pack captioning real speech live, the rule that chooses) is
``captioner models choose``'s (``commands/_choose.py``, :mod:`captioner.bench.model_choice`); the
composition root hands it in as a :data:`MeasureFn`, so this layer knows no engine. It takes about
25 s per pack: :class:`ModelMeasurement` runs it on a daemon thread and reports back with signals,
which Qt delivers on the UI thread. A stop asked meanwhile (the dialog closed, the app quitting)
ends it after the round in progress, and it reports nothing but ``finished``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from captioner.errors import CaptionerError
from captioner.storage.settings import Settings

__all__ = ["MeasureFn", "ModelMeasurement"]

logger = logging.getLogger(__name__)

# (settings as edited, progress line callback, stop flag) -> (the report's text, the chosen pack or None)
MeasureFn = Callable[[Settings, Callable[[str], None], Callable[[], bool]], tuple[str, str | None]]


class ModelMeasurement(QObject):
    """Runs a :data:`MeasureFn` in the background, one at a time.

    Signals:
        progress(str): a line of progress (the pack being measured).
        done(str, object): the report's text and the chosen pack's name (None: none keeps up).
        failed(str): why it could not run (no pack installed, ...).
        finished(): after any of them, or after a stop (then alone).
    """

    progress = Signal(str)
    done = Signal(str, object)
    failed = Signal(str)
    finished = Signal()

    def __init__(self, fn: MeasureFn, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._fn = fn
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """A measurement is under way."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, settings: Settings) -> bool:
        """Measure with ``settings``; False (and nothing started) while one is running."""
        if self.running:
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(settings,), name="captioner-measure", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Ask the running measurement to end after its current round (results are dropped)."""
        self._stop.set()

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the thread to end; True when it has (or none ran)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
        return not self.running

    def _run(self, settings: Settings) -> None:
        try:
            report, chosen = self._fn(settings, self.progress.emit, self._stop.is_set)
            if not self._stop.is_set():
                self.done.emit(report, chosen)
        except Exception as exc:  # whatever it was, the dialog must hear of it
            if not self._stop.is_set():  # a stop ends the measurement by raising: not a failure
                if not isinstance(exc, CaptionerError):
                    logger.exception("measuring the models failed")
                self.failed.emit(str(exc) or type(exc).__name__)
        finally:
            self.finished.emit()
