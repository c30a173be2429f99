"""The composition root of the desktop app: settings, capture, engine, worker, store and UI, wired.

Together with ``commands/gui.py`` (which supplies the real engine, capture and model-install
functions) this is the only code that knows every part (STYLE.md principle 10). The engine and
capture come in as factories (:class:`EngineFactory`, :class:`CaptureFactory`), so tests swap
either without patching.

Flow of a session: :meth:`CaptionerApp.start_engine` starts a
:class:`~captioner.transcript.recorder.SessionRecorder` (a store session, plus the live SRT/VTT
file when ``transcripts.live_export`` asks for one) and a :class:`~captioner.worker.CaptionWorker`
in a ``QThread``; every ``update`` goes first through the recorder (one store transaction, then
the live file) and then onto the caption bar, so nothing painted is ever lost. Stopping (quit,
source/model/provider change) asks the worker to stop and waits for its ``finished`` signal
*asynchronously*; only then is the session ended (the live file completed) and the next step taken.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from PySide6.QtCore import QCoreApplication, QEventLoop, QObject, QRect, QThread, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QApplication

from captioner.core import EngineUpdate, Provider, Source, stream_sources
from captioner.engine.language import parse_languages
from captioner.engine.runtime import CONTEXTS_ROOM
from captioner.errors import CaptionerError, ModelError
from captioner.models.install import first_installed_pack, list_packs
from captioner.storage.disk import free_bytes
from captioner.storage.paths import AppPaths
from captioner.storage.settings import Settings, load_settings, save_settings, to_dict
from captioner.transcript.cues import CueOptions, Mark
from captioner.transcript.export import export_session, export_words, marked_notice, render_txt
from captioner.transcript.recorder import SessionRecorder
from captioner.transcript.store import SessionStore
from captioner.ui.caption_bar import CaptionBar
from captioner.ui.first_run import InstallFn
from captioner.ui.geometry import layout_key
from captioner.ui.hotkeys import GlobalHotkeys
from captioner.ui.icons import app_icon, paused_icon
from captioner.ui.model_measure import MeasureFn, ModelMeasurement
from captioner.ui.tray import TrayIcon, ask_save_path_dialog
from captioner.worker import CaptionWorker, CaptureLike, StreamLike

if TYPE_CHECKING:
    from captioner.engine.runtime import EngineInfo
    from captioner.ui.first_run import FirstRunDialog
    from captioner.ui.history_window import HistoryWindow
    from captioner.ui.settings_dialog import SettingsDialog

__all__ = ["CaptionerApp", "CaptureFactory", "EngineFactory", "EngineRun", "GuiOptions"]

logger = logging.getLogger(__name__)
_PREPARING = "preparing the NPU (first start)"  # the tray's state while the model compiles for the NPU

STOP_TIMEOUT_MS = 15_000  # give up waiting for the worker after this (committed words are stored)
END_NOW_S = 3.0  # the engine's wait when the system ends the process (Windows asks a hung app after 5 s)
NO_TRAY_HINT = ("this desktop has no system tray: right-click the caption bar for the menu; "
                "'captioner --toggle' (or the global shortcut) shows and hides the bar")
ACTION_NAMES = {"toggle": "shows/hides the captions", "pause": "pauses/resumes", "mark": "marks this moment"}


@dataclass(frozen=True, slots=True)
class GuiOptions:
    """Command-line options of the app (``captioner --help``).

    Attributes:
        source_file: replay this WAV file as the audio source (real-time pace) instead of devices.
        model: pack name or directory; overrides the setting for this run.
        provider: "auto", "qnn", "gpu" or "cpu"; overrides the setting for this run.
        minimized: start with the caption bar hidden (tray only).
        screenshot: when the app quits (``quit_after``, Quit, ``captioner --quit``), render the
            caption bar to this PNG.
        quit_after: quit after this many seconds (0 = run until Quit).
    """

    source_file: Path | None = None
    model: str | None = None
    provider: Provider | None = None
    minimized: bool = False
    screenshot: Path | None = None
    quit_after: float = 0.0


@dataclass(frozen=True, slots=True)
class EngineRun:
    """What one engine run is made of.

    Attributes:
        streams: the engine stream of each source.
        provider: label of the provider running the graphs ("QNN-HTP", "CPU", ...).
        provider_summary: one line with the fallbacks and their reasons (for the log).
        model: pack name.
        warning: shown as a tray message when not empty (a forced provider could not be used).
        info: the engine's provider state now (``Transcriber.info``): why a provider failed when the
            rounds' provider changes mid-session; None when the engine cannot say.
        language: the language the streams decode: a code, or "auto" (detected by a multilingual
            pack; an English-only pack runs as "en"); "" when the engine does not say.
        prepare: readies the engine's graphs (``prepare(progress)``, ``progress(done, total)`` per
            graph compiled); the worker calls it in its thread once the capture has opened and
            decodes the audio heard meanwhile (:class:`~captioner.worker.CaptionWorker`); None:
            nothing to ready.
        prepare_first: ``prepare`` compiles the model for the NPU (``Runtime.compile_pending``:
            minutes on a first start): the worker runs it before the capture opens, the bar and the
            tray say so with the graphs compiled.
    """

    streams: Mapping[Source, StreamLike]
    provider: str
    provider_summary: str
    model: str
    warning: str = ""
    info: Callable[[], EngineInfo] | None = None
    language: str = ""
    prepare: Callable[[Callable[[int, int], None]], None] | None = None
    prepare_first: bool = False


class EngineFactory(Protocol):
    """Builds the engine streams for ``sources`` from ``settings`` (may raise CaptionerError)."""

    def __call__(self, settings: Settings, sources: tuple[Source, ...], paths: AppPaths) -> EngineRun: ...


# Returns a *function* that opens a fresh capture (the worker calls it in its thread, again on resume).
CaptureFactory = Callable[[Settings], tuple[Callable[[], CaptureLike], tuple[Source, ...]]]


class CaptionerApp(QObject):
    """The running application.

    Args:
        paths: application directories (``CAPTIONER_HOME`` respected by the caller).
        options: command-line options.
        engine_factory: builds the engine streams for a run.
        capture_factory: builds the capture opener for a run.
        install_model, import_model: the first-run dialog's work functions (see
            :class:`~captioner.ui.first_run.FirstRunDialog`); None disables it.
        ask_save_path: where to save an export (default: a file dialog).
        measure_models: Settings → Model → "Measure on this computer…" (``captioner models choose``'s
            measurement, :mod:`~captioner.ui.model_measure`); None hides the button.

    Signals:
        state_changed(str): the worker's state ("preparing", "starting", "listening", "paused",
            "ended", "stopped").
    """

    state_changed = Signal(str)

    def __init__(
        self,
        paths: AppPaths,
        options: GuiOptions,
        *,
        engine_factory: EngineFactory,
        capture_factory: CaptureFactory,
        install_model: InstallFn | None = None,
        import_model: InstallFn | None = None,
        ask_save_path: Callable[[str, str], str | None] = ask_save_path_dialog,
        measure_models: MeasureFn | None = None,
    ) -> None:
        super().__init__()
        self.paths = paths.ensure()
        self.options = options
        self._engine_factory = engine_factory
        self._capture_factory = capture_factory
        self._install_model = install_model
        self._import_model = import_model
        self._first_run: FirstRunDialog | None = None
        self.settings, warnings = load_settings(paths.settings_file)
        self.settings = self._with_overrides(self.settings)
        self._startup_warnings = list(warnings)
        self._store_problem = ""  # why the session store could not be opened ("" when it was)
        self._settings_problem = ""  # why the last save of the settings failed ("" when it did not)
        self._reading_store: SessionStore | None = None  # the history read as it stands (a full disk)
        self.disk_store = self._open_store()
        self.recorder: SessionRecorder | None = None  # the current (or last) session
        self._live_warnings_shown = 0
        self.save_session = self.settings.transcripts.save_sessions
        self.paused = False
        self._thread: QThread | None = None
        # workers that did not stop within STOP_TIMEOUT_MS (stuck in a native call: an NPU compile, a
        # hung driver): never deleted while they run, since Qt aborts the process for a QThread
        # destroyed while running; the process leaves without them (``abandoned_engine``)
        self._abandoned: list[tuple[QThread, CaptionWorker]] = []
        self._worker: CaptionWorker | None = None
        self._skip_told = False  # the "skipping" tray message was shown this session
        self._after_stop: list[Callable[[], object]] = []
        self._quitting = False
        self._finished = False  # _finish_quit ran: nothing of the app's is open
        self._store_error_shown = False
        self._store_problem_shown = False  # the store refuses writes and the user was told
        self._engine_info: Callable[[], EngineInfo] | None = None
        self._cache_told = ""  # the NPU cache's problem the tray has said (said once while it lasts)
        self._history: HistoryWindow | None = None
        self._settings_dialog: SettingsDialog | None = None
        self._measurement = ModelMeasurement(measure_models, self) if measure_models is not None else None
        self._resume_after_measuring = False
        if self._measurement is not None:
            self._measurement.progress.connect(self._on_measure_progress)
            self._measurement.done.connect(self._on_measured)
            self._measurement.failed.connect(self._on_measure_failed)
            self._measurement.finished.connect(self._on_measure_finished)
        self.provider = ""
        self.language = ""  # the run's language: a code or "auto"
        self._heard: dict[str, float] = {}  # language -> seconds of input decoded in it, this session

        self.hotkeys = GlobalHotkeys(self)
        self.hotkeys.triggered.connect(self._on_hotkey)

        self.bar = CaptionBar(self.settings.captions, self._labels())
        self.tray = TrayIcon(app_icon(), paused_icon(), ask_save_path=ask_save_path, export_dir=self._export_dir(),
                             dialogs_without_tray=QGuiApplication.platformName() not in ("offscreen", "minimal"))
        self.bar.set_menu(self.tray.menu)  # right click on the bar: the tray's menu (there may be no tray)
        self.tray.status_changed.connect(lambda text: self.bar.setToolTip(f"captioner — {text}"))
        self._connect_ui()

    # ------------------------------------------------------------ construction
    def _with_overrides(self, settings: Settings) -> Settings:
        engine = settings.engine
        if self.options.model:
            engine = dataclasses.replace(engine, model=self.options.model)
        if self.options.provider:
            engine = dataclasses.replace(engine, provider=self.options.provider)
        return dataclasses.replace(settings, engine=engine)

    def _open_store(self) -> SessionStore:
        try:
            store = SessionStore.open(self.paths.sessions_db)
        except CaptionerError as exc:  # sessions kept in memory, each written to the export folder when it ends
            self._store_problem = str(exc)
            self._startup_warnings.append(f"{exc}; sessions are kept in memory and written to "
                                          f"{self._export_dir()} when captioning stops")
            return SessionStore.in_memory()
        self._startup_warnings += store.warnings
        days = self.settings.transcripts.retention_days
        if days:
            removed = store.purge_older_than(days)
            if removed:
                logger.info("removed %d sessions older than %d days", removed, days)
        return store

    @property
    def store(self) -> SessionStore:
        """The store of the current (or last) session: the disk store, or memory ("don't save")."""
        return self.disk_store if self.recorder is None else self.recorder.store

    @property
    def session_id(self) -> int | None:
        """Id of the current (or last) session in :attr:`store`; None before the first one."""
        return None if self.recorder is None else self.recorder.session_id

    def _labels(self) -> dict[str, str]:
        t = self.settings.transcripts
        return {"mic": t.label_mic, "system": t.label_system}

    def _export_dir(self) -> Path:
        return Path(self.settings.transcripts.export_dir or self.paths.exports)

    def _connect_ui(self) -> None:
        t = self.tray
        t.toggle_captions_requested.connect(self.toggle_captions)
        t.pause_toggled.connect(self.set_paused)
        t.source_chosen.connect(lambda s: self.update_settings(
            dataclasses.replace(self.settings, audio=dataclasses.replace(self.settings.audio, source=s))))
        t.model_chosen.connect(lambda m: self.update_settings(
            dataclasses.replace(self.settings, engine=dataclasses.replace(self.settings.engine, model=m))))
        t.provider_chosen.connect(lambda p: self.update_settings(
            dataclasses.replace(self.settings, engine=dataclasses.replace(self.settings.engine, provider=p))))
        t.save_requested.connect(self.save_transcript)
        t.copy_requested.connect(self.copy_transcript)
        t.mark_requested.connect(self.mark_moment)
        t.open_folder_requested.connect(self.open_transcripts_folder)
        t.history_requested.connect(self.show_history)
        t.settings_requested.connect(self.show_settings)
        t.dont_save_toggled.connect(lambda on: self.set_save_session(not on))
        t.click_through_toggled.connect(lambda on: self.update_settings(
            dataclasses.replace(self.settings, captions=dataclasses.replace(self.settings.captions,
                                                                            click_through=on))))
        t.install_requested.connect(self.show_first_run)
        t.measure_requested.connect(self.measure_models)
        t.set_can_measure(self._measurement is not None)
        t.quit_requested.connect(self.quit)
        self.bar.geometry_changed.connect(self._on_bar_geometry_changed)
        self.bar.dock_changed.connect(lambda d: self.update_settings(
            dataclasses.replace(self.settings, captions=dataclasses.replace(self.settings.captions, dock=d))))
        app = cast(QGuiApplication | None, QGuiApplication.instance())
        if app is not None:
            app.screenAdded.connect(lambda _s: self._on_screens_changed())
            app.screenRemoved.connect(lambda _s: self._on_screens_changed())

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        """Show the tray (and the bar), then start captioning, or offer a model when none is installed."""
        self._sync_tray()
        self.tray.show()
        logger.info("tray: available=%s visible=%s geometry=%s",
                    self.tray.tray.isSystemTrayAvailable(), self.tray.tray.isVisible(),
                    self.tray.tray.geometry().getRect())
        self.bar.restore(self.settings.window)
        self.bar.set_both_mode(len(stream_sources(self.settings.audio.source, self.settings.audio.mix_both)) > 1)
        if not self.options.minimized:
            self.bar.show()
        self.tray.set_captions_visible(self.bar.isVisible())
        self._start_hotkeys()
        if not self.tray.available:
            logger.warning("%s", NO_TRAY_HINT)
        for w in self._startup_warnings:
            self.tray.show_error("captioner", w)
        if self.options.quit_after > 0:
            QTimer.singleShot(int(self.options.quit_after * 1000), self._on_quit_after_timeout)
        if not self._installed_models() and not self.settings.engine.model:
            QTimer.singleShot(0, self.show_first_run)
            self.tray.set_status(state="no model installed")
            return
        self.start_engine()

    def _start_hotkeys(self) -> None:
        problem = self.hotkeys.start()
        keys = ", ".join(f"{text} {ACTION_NAMES[action]}" for action, text in self.hotkeys.active.items())
        if keys:
            logger.info("global shortcuts: %s", keys)
        if problem:
            logger.info("%s", problem)

    def _on_hotkey(self, action: str) -> None:
        logger.info("global shortcut: %s", action)
        if action == "toggle":
            self.toggle_captions()
        elif action == "pause":
            self.set_paused(not self.paused)
        elif action == "mark":
            self.mark_moment()

    def _installed_models(self) -> list[str]:
        return [p.name for p in list_packs(self.paths) if p.pack is not None]

    def _sync_tray(self) -> None:
        s = self.settings
        self.tray.set_source(s.audio.source)
        self.tray.set_provider_choice(s.engine.provider)
        self.tray.set_click_through(s.captions.click_through)
        self.tray.set_dont_save(not self.save_session)
        self.tray.set_paused(self.paused)
        first = first_installed_pack(self.paths)  # what runs when no model is set
        self.tray.set_models(self._installed_models(), s.engine.model or (first.name if first else ""))
        self.tray.set_export_dir(self._export_dir())

    # ----------------------------------------------------------------- engine
    @property
    def running(self) -> bool:
        """True while a worker thread runs."""
        return self._thread is not None

    def start_engine(self) -> bool:
        """Build capture + engine for the current settings and start the worker; False on failure."""
        if self.running or self._quitting:
            return False
        try:
            open_capture, sources = self._capture_factory(self.settings)
            engine_run = self._engine_factory(self.settings, sources, self.paths)
        except CaptionerError as exc:
            self.tray.set_status(state="stopped")
            title = "Model problem" if isinstance(exc, ModelError) else "Cannot start captioning"
            self.tray.show_error(title, str(exc))
            return False
        self.provider = engine_run.provider
        self._engine_info = engine_run.info
        self.language, self._heard = engine_run.language, {}
        self.tray.set_status(language="detecting" if self.language == "auto" else self.language)
        if engine_run.warning:
            self.tray.show_error("Provider fell back", engine_run.warning)
        self._begin_session(sources, engine_run)
        worker = CaptionWorker(open_capture, engine_run.streams, paused=self.paused, prepare=engine_run.prepare,
                               prepare_first=engine_run.prepare_first)
        thread = QThread()
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        for signal, slot in self._worker_slots(worker):
            signal.connect(slot)
        worker.finished.connect(thread.quit)
        thread.finished.connect(self._on_thread_finished)
        self._worker, self._thread = worker, thread  # held until finished (buzz #423)
        self._skip_told = False
        self.tray.set_status(state="starting", provider=engine_run.provider, lag_s=0.0, lag_state="ok")
        self.bar.set_lag(0.0, "ok")
        self.bar.set_both_mode(len(sources) > 1)
        thread.start()
        logger.info("captioning %s with %s on %s", "+".join(sources), engine_run.model, engine_run.provider_summary)
        return True

    def _begin_session(self, sources: tuple[Source, ...], engine_run: EngineRun) -> None:
        store = self.disk_store if self.save_session else SessionStore.in_memory()
        language = engine_run.language or self.settings.engine.language
        source_file = self.options.source_file
        title = source_file.name if source_file is not None else ""  # a replayed file names its session
        try:
            self.recorder = self._start_recorder(store, sources, engine_run.model, engine_run.provider,
                                                 language, title)
        except CaptionerError as exc:  # the store cannot even begin a session (disk full, read-only)
            self.recorder = self._start_recorder(SessionStore.in_memory(), sources, engine_run.model,
                                                 engine_run.provider, language, title)
            self.recorder.export_reason = str(exc)  # exported to the export folder when it ends
            self.tray.show_error("Transcript not being saved",
                                 f"{exc}. Captions go on; this session is kept in memory and exported when "
                                 "captioning stops.")

    def _start_recorder(self, store: SessionStore, sources: tuple[Source, ...], model: str, provider: str,
                        language: str, title: str = "") -> SessionRecorder:
        """Begin a session in ``store``, with the live subtitle file when the settings ask for one.

        A session kept in memory ("don't save") writes no live file: nothing of it reaches the disk.
        """
        t = self.settings.transcripts
        live_path = self._live_path(t.live_export) if t.live_export != "none" and store is self.disk_store else None
        self._live_warnings_shown = 0
        snapshot = to_dict(self.settings)
        if not (language == "auto" and parse_languages(snapshot["engine"]["language"])[1]):  # the languages spoken stay
            snapshot["engine"]["language"] = language  # what ran: "en" for "auto" on an English-only pack
        recorder = SessionRecorder.start(store, sources=sources, model=model, provider=provider,
                                         language=language, settings=snapshot, title=title,
                                         live_path=live_path, options=CueOptions.from_config(t),
                                         fallback_dirs=[self._export_dir()])
        if store is self.disk_store and self._store_problem:  # no store on disk: exported when it ends
            recorder.export_reason = self._store_problem
        if recorder.live is not None:
            logger.info("live subtitles: %s", recorder.live.path)
        self._show_live_warnings(recorder)
        return recorder

    def _live_path(self, fmt: str) -> Path:
        """``live-YYYY-MM-DD_HH-MM-SS.srt`` (local start time) in the export folder, never an existing file."""
        folder = self._export_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            logger.debug("cannot create %s (the live file will say why)", folder, exc_info=True)
        stem = "live-" + time.strftime("%Y-%m-%d_%H-%M-%S")
        path, n = folder / f"{stem}.{fmt}", 1
        while path.exists():
            n += 1
            path = folder / f"{stem}-{n}.{fmt}"
        return path

    def _show_live_warnings(self, recorder: SessionRecorder) -> None:
        """Show each new live-file problem once (the recording itself goes on)."""
        for message in recorder.warnings[self._live_warnings_shown:]:
            self.tray.show_error("Live subtitles", message)
        self._live_warnings_shown = len(recorder.warnings)

    def stop_engine(self, then: Callable[[], object] | None = None) -> None:
        """Ask the worker to stop; ``then`` runs after it finished and the session was ended."""
        if then is not None:
            self._after_stop.append(then)
        if not self.running:
            self._run_after_stop()
            return
        assert self._worker is not None
        if not self._worker.stopping:
            self._worker.request_stop()
            stopping = self._worker
            QTimer.singleShot(STOP_TIMEOUT_MS, lambda: self._on_stop_timeout(stopping))

    def _on_stop_timeout(self, worker: CaptionWorker) -> None:
        """``worker`` was asked to stop ``STOP_TIMEOUT_MS`` ago: if it still runs, leave it. Only
        that worker: after a restart (a setting changed) the next one runs by then, and must go on."""
        if self.running and self._worker is worker:
            assert self._thread is not None
            logger.error("the engine did not stop within %d ms; leaving it", STOP_TIMEOUT_MS)
            self._thread.finished.disconnect(self._on_thread_finished)
            for signal, slot in self._worker_slots(worker):
                signal.disconnect(slot)  # nothing it says later belongs to this session or the next
            self._abandoned.append((self._thread, worker))
            # when it returns at last, its engine (the model's sessions: hundreds of MB) is let go,
            # not held until the app quits: a restart (another model or source) abandons one too
            self._thread.finished.connect(self._on_abandoned_finished)
            self._end_session(delete=False)

    def _on_abandoned_finished(self) -> None:
        """An abandoned worker's thread ended: it and its worker (with the engine) are released."""
        thread = self.sender()
        if not any(t is thread for t, _ in self._abandoned):
            return
        assert isinstance(thread, QThread)
        thread.wait()  # ``finished`` comes just before the thread's last instruction
        self._abandoned = [(t, w) for t, w in self._abandoned if t is not thread]
        thread.deleteLater()

    def _worker_slots(self, worker: CaptionWorker) -> list[tuple[Any, Callable[..., None]]]:
        """What the app hears from a worker: (signal, slot), connected at its start."""
        return [(worker.update, self._on_worker_update), (worker.lag, self._on_worker_lag),
                (worker.error, self._on_worker_error), (worker.audio_event, self._on_worker_event),
                (worker.status, self._on_worker_status), (worker.progress, self._on_prepare_progress)]

    @property
    def abandoned_engine(self) -> bool:
        """A worker left running at its stop timeout still runs: the process must exit without
        destroying its thread (``os._exit`` after the event loop; ``commands/gui.py``)."""
        self._abandoned = [(t, w) for t, w in self._abandoned if t.isRunning()]
        return bool(self._abandoned)

    def _on_thread_finished(self) -> None:
        self._end_session(delete=True)

    def _end_session(self, delete: bool) -> None:
        """The worker finished (``delete``: its thread is deleted) or was left running: end the
        session with the words it committed, then run what waited for the stop."""
        thread, self._thread, self._worker = self._thread, None, None
        if thread is None:
            return
        if delete:
            thread.deleteLater()
        if self.recorder is not None:
            try:  # a session begun with "auto" keeps the language(s) detected, the most heard first
                self.recorder.close(language=", ".join(self._heard_languages()) if self.language == "auto" else "")
            except CaptionerError as exc:
                self.tray.show_error("Transcript not saved", str(exc))
            if self.recorder.fallback_export is not None:
                self.tray.show_error("Transcript saved elsewhere",
                                     f"The session store could not be written ({self.recorder.unsaved_reason}); "
                                     f"this session was exported to {self.recorder.fallback_export} (and .txt); "
                                     "History → Import… adds it to the history later.")
            self._show_live_warnings(self.recorder)
            logger.info("session %d ended", self.recorder.session_id)
        self._run_after_stop()

    def _heard_languages(self) -> list[str]:
        return sorted(self._heard, key=lambda code: -self._heard[code])

    def _run_after_stop(self) -> None:
        todo, self._after_stop = self._after_stop, []
        for fn in todo:
            fn()

    def restart_engine(self) -> None:
        """Stop, then start again with the current settings (source/model/provider changed)."""
        self.stop_engine(then=self.start_engine)

    # ----------------------------------------------------------- worker slots
    def _on_worker_update(self, update: EngineUpdate) -> None:
        if self.recorder is not None:
            try:
                self.recorder.apply(update)  # stored (and written to the live file) before it is painted
            except (CaptionerError, ValueError) as exc:
                if not self._store_error_shown:
                    self._store_error_shown = True
                    self.tray.show_error("Transcript not saved", str(exc))
            if len(self.recorder.warnings) > self._live_warnings_shown:
                self._show_live_warnings(self.recorder)
            self._show_store_problem(self.recorder)
        self.bar.apply_update(update)
        stats = update.stats
        if stats is not None and stats.provider and stats.provider != self.provider:
            self._on_provider_changed(stats.provider)
        if stats is not None and stats.bucket > 0 and stats.language and self.language == "auto":
            before = self._heard_languages()[:1]
            self._heard[stats.language] = self._heard.get(stats.language, 0.0) + stats.input_s
            heard = self._heard_languages()
            if heard[:1] != before:
                logger.info("language detected: %s", heard[0])
            self.tray.set_status(language=f"{', '.join(heard)} (detected)")

    def _show_store_problem(self, recorder: SessionRecorder) -> None:
        """Tell the user once when the store starts refusing writes, and once when it takes them again."""
        problem = recorder.store_problem
        if problem and not self._store_problem_shown:
            self._store_problem_shown = True
            self.tray.show_error("Transcript not being saved",
                                 f"{problem}. Captions go on; the words are kept in memory and saved as soon "
                                 "as the disk can be written again (or exported when captioning stops).")
        elif not problem and self._store_problem_shown:
            self._store_problem_shown = False
            self.tray.show_info("Transcript saved again", "The session store can be written again; every "
                                "word held in memory is saved.")

    def _on_provider_changed(self, provider: str) -> None:
        """The rounds run on another provider: the last one failed mid-session (runtime.Runtime.run).
        Tell the user once, with the reason, and show the new provider in the tooltip."""
        old, self.provider = self.provider, provider
        info = self._engine_info() if self._engine_info is not None else None
        failure = next((a for a in reversed(info.fallbacks) if a.mid_session and a.label == old), None) \
            if info is not None else None
        if failure is not None:
            self.tray.show_error(f"{old} failed", f"{old} failed: {failure.reason} — captioning goes on on {provider}.")
            self.tray.set_status(provider=f"{provider} ({old} failed)")
        else:
            self.tray.set_status(provider=provider)
        if self.recorder is not None:
            try:
                self.recorder.store.set_provider(self.recorder.session_id, provider)
            except CaptionerError as exc:
                logger.warning("the session's provider could not be recorded: %s", exc)

    def _on_worker_status(self, state: str) -> None:
        logger.info("captioning state: %s", state)
        self.tray.set_status(state=_PREPARING if state == "preparing" else state)
        if state == "preparing":  # a first NPU start: minutes, before the capture opens
            self.bar.set_lag(0.0, "preparing")
            if not self._tell_cache_problem():
                self.tray.show_info("Preparing the NPU", "The first start with this model compiles it for the NPU. "
                                    "This takes a few minutes, once; captions start when it is done.")
        elif state == "starting":  # the worker readies the engine: the bar says captions are coming
            self.bar.set_lag(0.0, "starting")
        elif state in ("listening", "paused", "ended", "stopped"):  # nothing waits for the engine yet
            self.bar.set_lag(0.0, "ok")
            self.tray.set_status(lag_s=0.0, lag_state="ok")
            if state == "listening":  # the compile is over: found there where the cache failed
                self._tell_cache_problem()
        self.state_changed.emit(state)

    def _tell_cache_problem(self) -> bool:
        """Say once, in the tray, that the NPU's compiled model cannot be kept on disk (a full disk, a
        folder the QNN plugin cannot read: ``EngineInfo.cache_problem``), so every start compiles it
        again for minutes, with "free some disk space" where the disk is short; True where said."""
        problem = self._engine_info().cache_problem if self._engine_info is not None else ""
        if not problem or problem == self._cache_told:
            return False
        self._cache_told = problem
        free = free_bytes(self.paths.cache)
        room = " Free some disk space there." if free is not None and free < CONTEXTS_ROOM else ""
        self.tray.show_error("The NPU compiles at every start",
                             f"The model compiled for the NPU cannot be saved in {self.paths.cache} ({problem}), so "
                             f"each start compiles it again, which takes minutes; captions go on on the NPU.{room}")
        return True

    def _on_prepare_progress(self, done: int, total: int) -> None:
        """``done`` of ``total`` graphs compiled for the NPU: on the bar's badge and in the tray."""
        self.bar.set_preparing(done, total)
        self.tray.set_status(state=f"{_PREPARING}: {done} of {total} graphs")

    def _on_worker_lag(self, lag_s: float, state: str) -> None:
        """The worker's lag after a round and its state ("ok", "slower", "behind", "skipping": the
        bounded-lag rule of ``engine/overload.py``): on the bar's badge and in the tray (with the
        step in force); the first skip of a session also gets a tray message (the transcript marks
        each skipped span; a smaller model, measured by ``captioner models choose``, may keep up)."""
        self.bar.set_lag(lag_s, state)
        step = self._worker.step_s if self._worker is not None else None
        self.tray.set_status(lag_s=lag_s, lag_state=state, step_s=step)
        if state == "skipping" and not self._skip_told:
            self._skip_told = True
            every = f", even with captions every {step:g} s," if step else ""
            self.tray.show_info("Captions are behind — skipping",
                                f"This computer cannot keep up with the audio right now{every} so some audio is "
                                "skipped to keep captions current. The transcript marks each gap with […]. "
                                "If this happens often, a smaller model may keep up: 'captioner models choose' "
                                "measures the installed ones on this computer (Settings → Model to change).")

    def _on_worker_error(self, exc: CaptionerError) -> None:
        self.tray.show_error("captioner", str(exc))

    def _on_worker_event(self, event) -> None:
        if event.kind != "overflow":
            self.tray.show_error("Audio", event.message)
        else:
            logger.warning("%s", event.message)

    # ---------------------------------------------------------------- intents
    def toggle_captions(self) -> None:
        """Show or hide the caption bar (tray left click)."""
        self.bar.setVisible(not self.bar.isVisible())
        self.tray.set_captions_visible(self.bar.isVisible())

    def show_captions(self) -> None:
        """Show the bar (a second start of the app asks for this)."""
        self.bar.show()
        self.bar.raise_()
        self.tray.set_captions_visible(True)

    def set_paused(self, paused: bool) -> None:
        """Pause (capture stopped, nothing runs) or resume."""
        self.paused = paused
        self.tray.set_paused(paused)
        if self._worker is not None:
            self._worker.set_paused(paused)
        self.tray.set_status(state="paused" if paused else "listening")

    def update_settings(self, new: Settings) -> None:
        """Apply new settings live, save them, and restart the engine if capture or model changed."""
        old, self.settings = self.settings, new
        if new.captions != old.captions:
            self.bar.set_style(new.captions)
        if new.transcripts != old.transcripts:
            self.bar.set_labels(self._labels())
        self.bar.set_both_mode(len(stream_sources(new.audio.source, new.audio.mix_both)) > 1)
        self._save_settings()
        self._sync_tray()
        if (new.audio, new.engine) != (old.audio, old.engine) and (self.running or self._installed_models()):
            self.restart_engine()

    def _save_settings(self, *, repeat_quietly: bool = False) -> None:
        """Save the settings; a failure is told in the tray, except, with ``repeat_quietly`` (the
        bar moved), the same failure told already (a full disk: once, not after every move)."""
        try:
            save_settings(self.settings, self.paths.settings_file)
        except CaptionerError as exc:
            if not (repeat_quietly and self._settings_problem == str(exc)):
                self.tray.show_error("Settings not saved", str(exc))
            self._settings_problem = str(exc)
        else:
            self._settings_problem = ""

    def _on_bar_geometry_changed(self, rect: QRect) -> None:
        window = dict(self.settings.window)
        window[layout_key()] = (rect.x(), rect.y(), rect.width(), rect.height())
        self.settings = dataclasses.replace(self.settings, window=window)
        self._save_settings(repeat_quietly=True)

    def _on_screens_changed(self) -> None:
        self.bar.restore(self.settings.window)

    def save_transcript(self, fmt: str, path: str) -> Path | None:
        """Export the current session's committed words to ``path``."""
        if self.session_id is None:
            self.tray.show_error("Nothing to save", "No session has been recorded yet.")
            return None
        options = CueOptions.from_config(self.settings.transcripts)
        try:
            if self.recorder is not None and not self.recorder.flush():  # the store refuses: words held back
                out = export_words(self.recorder.session_words(), Path(path), fmt,  # type: ignore[arg-type]
                                   options=options, session=self.store.get_session(self.session_id).to_json())
            else:
                out = export_session(self.store, self.session_id, Path(path), fmt,  # type: ignore[arg-type]
                                     options=options)
        except CaptionerError as exc:
            self.tray.show_error("Transcript not saved", str(exc))
            return None
        self.tray.show_info("Transcript saved", str(out))
        return out

    def mark_moment(self, note: str = "") -> Mark | None:
        """Mark this moment of the session (the audio just heard): a bookmark in its transcript,
        said on the bar's badge ("★ marked 12:34") where the eyes are, since the shortcut is
        pressed in another window; returns the mark."""
        if self.session_id is None or self.recorder is None or self._worker is None:
            self.tray.show_error("Nothing to mark", "No session is being captioned.")
            return None
        try:
            mark = self.recorder.store.add_mark(self.session_id, self._worker.audio_clock_s(), note)
        except CaptionerError as exc:
            self.tray.show_error("Not marked", str(exc))
            return None
        self.bar.show_notice(marked_notice(mark, note=False))
        return mark

    def copy_transcript(self) -> str | None:
        """Put the current session's text on the clipboard, as a TXT export writes it, with the
        words the bar shows dimmed too (what was just said); returns the text."""
        if self.session_id is None or self.recorder is None:
            self.tray.show_error("Nothing to copy", "No session has been recorded yet.")
            return None
        shown = self.recorder.session_words(include_speculative=True)
        words = [dataclasses.replace(w, speculative=False) for w in shown]
        options = CueOptions.from_config(self.settings.transcripts)
        two = len({w.source for w in words}) > 1
        labels = {"mic": options.label_mic, "system": options.label_system} if two else {}
        text = render_txt(words, labels=labels).rstrip("\n")
        if not text:
            self.tray.show_error("Nothing to copy", "No words have been captioned yet.")
            return None
        QGuiApplication.clipboard().setText(text)
        self.tray.show_info("Transcript copied", f"{len(text.split())} words on the clipboard")
        return text

    def open_transcripts_folder(self) -> None:
        """Open the export folder in the file manager."""
        folder = self._export_dir()
        folder.mkdir(parents=True, exist_ok=True)
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))

    def set_save_session(self, save: bool) -> None:
        """"Don't save this session": move the running session between disk and memory.

        Moved to memory, the session leaves the disk store and its live file is removed; moved
        back to disk, it gets a new live file (when the settings ask for one) with the words so far.
        Its title, gaps and marks go with it.
        """
        if save == self.save_session:
            return
        self.save_session = save
        self.tray.set_dont_save(not save)
        if self.recorder is None or not self.running:
            return
        old = self.recorder
        info = old.store.get_session(old.session_id)
        target = self.disk_store if save else SessionStore.in_memory()
        new = self._start_recorder(target, info.sources, info.model, info.provider, info.language, info.title)
        words = old.session_words(include_speculative=True)  # held-back words too (store refusing writes)
        gaps = old.session_gaps()
        for source in info.sources:
            own = tuple(w for w in words if w.source == source)
            if own:
                new.apply(EngineUpdate(0, own, source=source))
            for gap in (g for g in gaps if g.source == source):
                new.apply(EngineUpdate(0, (), source=source, gap=(gap.start, gap.end)))
        try:
            for mark in old.store.session_marks(old.session_id):
                new.store.add_mark(new.session_id, mark.at, mark.note)
        except CaptionerError as exc:  # the words moved; a mark the old store cannot give is lost, said
            self.tray.show_error("Marks not moved", str(exc))
        old.discard()
        if old.store is not self.disk_store:
            old.store.close()
        self.recorder = new
        logger.info("session now %s", "saved" if save else "kept in memory only")

    def show_history(self) -> None:
        """Open the history window."""
        from captioner.ui.history_window import HistoryWindow

        if self._history is None:
            self._history = HistoryWindow(self._history_store(),
                                          cue_options=CueOptions.from_config(self.settings.transcripts),
                                          export_dir=self._export_dir())
            self._history.error.connect(lambda e: self.tray.show_error("History", str(e)))
        self._history.refresh()
        self._history.show()
        self._history.raise_()

    def _history_store(self) -> SessionStore:
        """The store the History window shows: the session store, or, where it could not be opened
        at start (a full disk), the file read as it stands (:meth:`SessionStore.open_for_reading`),
        so the sessions saved before are still there to read, search and export."""
        if not self._store_problem:
            return self.disk_store
        if self._reading_store is None:
            try:
                self._reading_store = SessionStore.open_for_reading(self.paths.sessions_db)
            except CaptionerError:
                return self.disk_store
        return self._reading_store

    def show_settings(self) -> None:
        """Open the settings dialog; edits apply live, Cancel restores the previous settings."""
        from captioner.ui.settings_dialog import SettingsDialog

        if self._settings_dialog is not None:
            self._settings_dialog.raise_()
            return
        dialog = SettingsDialog(self.settings, self._installed_models(), can_measure=self._measurement is not None)
        dialog.settings_changed.connect(lambda s: self._preview_settings(s))
        dialog.measure_requested.connect(self._start_measuring)
        self._settings_dialog = dialog

        def done(result: int) -> None:
            self._settings_dialog = None
            if self._measurement is not None:
                self._measurement.stop()  # its results have nowhere to go
            if result:
                self.update_settings(dataclasses.replace(dialog.current_settings(), window=self.settings.window))
            else:
                self.bar.set_style(self.settings.captions)  # undo the live preview
            dialog.deleteLater()

        dialog.finished.connect(done)
        dialog.show()

    def measure_models(self) -> None:
        """The tray's "Measure models on this computer…": the settings dialog at its Model tab,
        measuring with the settings as they are."""
        from captioner.ui.settings_dialog import SECTIONS

        self.show_settings()
        dialog = self._settings_dialog
        if dialog is not None:
            dialog.tabs.setCurrentIndex(list(SECTIONS).index("engine"))
            self._start_measuring(dialog.current_settings())

    def _start_measuring(self, settings: Settings) -> None:
        """Measure the installed models with the settings being edited; captions pause meanwhile (the
        measurement needs the computer to itself, and the live engine would slow it down)."""
        if self._measurement is None or self._measurement.running:
            return
        self._resume_after_measuring = not self.paused
        self.set_paused(True)
        self._measurement.start(settings)
        if self._settings_dialog is not None:
            self._settings_dialog.show_measuring("Measuring the installed models …")

    def _on_measure_progress(self, line: str) -> None:
        if self._settings_dialog is not None:
            self._settings_dialog.show_measuring(line[:1].upper() + line[1:])

    def _on_measured(self, report: str, chosen: str | None) -> None:
        logger.info("models measured:\n%s", report)
        if self._settings_dialog is not None:
            self._settings_dialog.show_measured(report, chosen)

    def _on_measure_failed(self, message: str) -> None:
        logger.warning("measuring the models failed: %s", message)
        if self._settings_dialog is not None:
            self._settings_dialog.show_measure_failed(message)

    def _on_measure_finished(self) -> None:
        if self._resume_after_measuring and not self._quitting:
            self.set_paused(False)
        self._resume_after_measuring = False

    def _preview_settings(self, settings: Settings) -> None:
        """Live preview of caption changes while the dialog is open (saved only on OK)."""
        self.bar.set_style(settings.captions)

    def show_first_run(self) -> None:
        """Offer to install a model (no model installed, or from the tray)."""
        from captioner.ui.first_run import FirstRunDialog

        if self._install_model is None or self._import_model is None or self._first_run is not None:
            return
        dialog = FirstRunDialog(self._install_model, self._import_model)
        self._first_run = dialog
        if dialog.exec() and dialog.installed:
            self.update_settings(dataclasses.replace(
                self.settings, engine=dataclasses.replace(self.settings.engine, model=dialog.installed)))
            if not self.running:
                self.start_engine()
        elif not self.running:
            self.tray.show_error("No speech model",
                                 "captioner needs a model: right-click the caption bar (or the tray icon) and "
                                 "use “Model and provider → Install a model…”, or run 'captioner models install base'.")
        self._first_run = None
        dialog.deleteLater()

    # ------------------------------------------------------------------- quit
    def on_instance_message(self, command: str) -> None:
        """A second start of the app sent ``command`` ("show", "quit", "toggle", "pause" or "mark",
        the last with an optional note after a space: ``captioner --mark "decision"``)."""
        command, _, note = command.partition(" ")
        if command == "show":
            self.show_captions()
        elif command == "quit":
            self.quit()
        elif command == "toggle":
            self.toggle_captions()
        elif command == "pause":
            self.set_paused(not self.paused)
        elif command == "mark":
            self.mark_moment(note)

    def _on_quit_after_timeout(self) -> None:
        logger.info("--quit-after: %.1f s are up", self.options.quit_after)
        self.quit()

    def quit(self) -> None:
        """Stop the engine (keeping every committed word), end the session, then leave the event loop.

        With ``--screenshot`` the caption bar is rendered to the PNG first, as it is shown.
        """
        if self._quitting:
            return
        self._begin_quit()
        self.stop_engine(then=self._finish_quit)

    def end_now(self, timeout_s: float = END_NOW_S) -> None:
        """Quit at once, for a process that ends when this returns: Windows' log-off or shutdown (Qt
        emits ``aboutToQuit`` inside ``WM_ENDSESSION``'s handler; :mod:`captioner.ui.system_end`).
        The engine stops and its last words are stored (the events that carry them delivered here),
        the session ends and the settings are saved, waiting at most ``timeout_s`` for the engine
        (then the session ends with the words committed). After a quit that finished, nothing to do."""
        if self._finished:
            return
        if not self._quitting:
            self._begin_quit(measurement_wait_s=1.0)  # Windows asks about an app still busy after 5 s
        thread, worker = self._thread, self._worker
        if thread is not None and worker is not None:
            worker.request_stop()
            deadline = time.monotonic() + timeout_s
            while self._thread is thread and time.monotonic() < deadline:
                QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)  # its words, its end
                time.sleep(0.005)
            if self._thread is thread:
                logger.error("the engine did not stop within %.1f s of the end of the system's session", timeout_s)
                self._on_stop_timeout(worker)
        if not self._finished:
            self._finish_quit()

    def _begin_quit(self, measurement_wait_s: float = 5.0) -> None:
        """What a quit does before the engine stops: nothing new starts, dialogs and the measurement go
        (waited for ``measurement_wait_s``: it ends after its round in progress)."""
        self._quitting = True
        if self._settings_dialog is not None:
            self._settings_dialog.reject()  # its edits were not asked for; it must not outlive the app
        if self._measurement is not None:
            self._measurement.stop()
            if not self._measurement.wait(measurement_wait_s):
                logger.warning("the models' measurement did not stop in time")
        if self.options.screenshot is not None:
            ok = self.bar.render_png(self.options.screenshot)
            logger.info("screenshot %s: %s", self.options.screenshot, "saved" if ok else "FAILED")
        self.tray.set_status(state="quitting")

    def _finish_quit(self) -> None:
        self._finished = True
        self.hotkeys.stop()
        self._save_settings()
        self.tray.hide()
        self.bar.close()
        if self.store is not self.disk_store:
            self.store.close()
        self.disk_store.close()
        if self._reading_store is not None:
            self._reading_store.close()
        app = QApplication.instance()
        if app is not None:
            app.quit()
