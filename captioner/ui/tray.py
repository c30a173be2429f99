"""The tray icon and its menu: every user intent of the running app, sent out as a signal.

The tray knows nothing about the engine or the store; ``app.py`` connects the signals to what
they mean and calls the ``set_*`` methods to keep the menu and the tooltip in step with the
state. A left click toggles the caption bar; errors appear as tray messages.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QAction, QActionGroup, QIcon
from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox, QSystemTrayIcon

__all__ = ["EXPORT_FORMATS", "PROVIDERS", "SOURCES", "TrayIcon"]

logger = logging.getLogger(__name__)

EXPORT_FORMATS = {"srt": "SubRip (*.srt)", "vtt": "WebVTT (*.vtt)", "txt": "Text (*.txt)", "json": "JSON (*.json)"}
SOURCES = {"system": "System audio", "mic": "Microphone", "both": "Both (kept apart)"}
PROVIDERS = {"auto": "Automatic (NPU → GPU → CPU)", "qnn": "NPU (QNN)", "gpu": "GPU", "cpu": "CPU"}

AskSavePath = Callable[[str, str], "str | None"]  # (format, suggested path) -> chosen path or None


def ask_save_path_dialog(fmt: str, suggested: str) -> str | None:
    """Ask for an export file name with the platform's save dialog; None when cancelled."""
    path, _ = QFileDialog.getSaveFileName(None, "Save transcript", suggested, EXPORT_FORMATS[fmt])
    if not path:
        return None
    if not Path(path).suffix:
        path += f".{fmt}"
    return path


class TrayIcon(QObject):
    """The system-tray icon, its menu and tooltip.

    Args:
        icon: the normal icon; ``paused_icon`` is shown while paused (defaults to ``icon``).
        ask_save_path: asks where to save an export (``(fmt, suggested) -> path | None``); the
            default shows a file dialog.
        export_dir: folder suggested by the save dialog.
        dialogs_without_tray: where the desktop has no tray, show errors in dialogs (the app on a
            real display; not on Qt's offscreen platform, where nobody would close them).

    Signals (intents; the app decides what they do):
        toggle_captions_requested(), pause_toggled(bool paused), source_chosen(str),
        model_chosen(str), provider_chosen(str), save_requested(str fmt, str path),
        copy_requested(), mark_requested(), open_folder_requested(), history_requested(), settings_requested(),
        dont_save_toggled(bool), click_through_toggled(bool), install_requested(), measure_requested()
        (measure the installed models: hidden until :meth:`set_can_measure`), quit_requested(); status_changed(str): the status line changed (the caption bar's tooltip).
    """

    toggle_captions_requested = Signal()
    pause_toggled = Signal(bool)
    source_chosen = Signal(str)
    model_chosen = Signal(str)
    provider_chosen = Signal(str)
    save_requested = Signal(str, str)
    copy_requested = Signal()
    mark_requested = Signal()
    open_folder_requested = Signal()
    history_requested = Signal()
    settings_requested = Signal()
    dont_save_toggled = Signal(bool)
    click_through_toggled = Signal(bool)
    install_requested = Signal()
    measure_requested = Signal()
    quit_requested = Signal()
    status_changed = Signal(str)

    def __init__(
        self,
        icon: QIcon,
        paused_icon: QIcon | None = None,
        *,
        ask_save_path: AskSavePath = ask_save_path_dialog,
        export_dir: Path | str = "",
        dialogs_without_tray: bool = False,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._dialogs_without_tray = dialogs_without_tray
        self._boxes: list[QMessageBox] = []  # error dialogs open now (held until closed)
        self._icon = icon
        self._paused_icon = paused_icon or icon
        self._ask = ask_save_path
        self._export_dir = Path(export_dir) if export_dir else Path.home()
        self._state = "starting"
        self._provider = ""
        self._lag_s = 0.0
        self._lag_state = "ok"
        self._step_s = 0.0
        self._language = ""
        self.tray = QSystemTrayIcon(icon, self)
        self.menu = QMenu()
        self.actions: dict[str, QAction] = {}
        self._build_menu()
        self.tray.setContextMenu(self.menu)
        self.tray.activated.connect(self._on_tray_activated)
        self._update_tooltip()

    def set_can_measure(self, can: bool) -> None:
        """Show "Measure models on this computer…" (the app can measure them)."""
        self.actions["measure"].setVisible(can)

    # ------------------------------------------------------------------ menu
    def _add(self, name: str, text: str, slot: Callable[..., None] | None = None, *,
             checkable: bool = False, menu: QMenu | None = None) -> QAction:
        action = QAction(text, self.menu)
        action.setCheckable(checkable)
        if slot is not None:
            (action.toggled if checkable else action.triggered).connect(slot)
        (menu or self.menu).addAction(action)
        self.actions[name] = action
        return action

    def _build_menu(self) -> None:
        status = self._add("status", "Starting…")
        status.setEnabled(False)
        self.menu.addSeparator()
        self._add("show", "Show captions", lambda _=False: self.toggle_captions_requested.emit(),
                  checkable=False)
        self._add("pause", "Pause", self.pause_toggled.emit, checkable=True)
        self._add("mark", "Mark this moment", lambda _=False: self.mark_requested.emit())
        self._add("click_through", "Click-through caption bar", self.click_through_toggled.emit,
                  checkable=True)

        source_menu = self.menu.addMenu("Source")
        group = QActionGroup(self)
        for key, text in SOURCES.items():
            a = self._add(f"source:{key}", text, checkable=True, menu=source_menu)
            a.triggered.connect(lambda _=False, k=key: self.source_chosen.emit(k))
            group.addAction(a)

        engine_menu = self.menu.addMenu("Model and provider")
        self._model_menu = engine_menu.addMenu("Model")
        self._model_group = QActionGroup(self)
        self._add("install", "Install a model…", lambda _=False: self.install_requested.emit(), menu=engine_menu)
        self._add("measure", "Measure models on this computer…", lambda _=False: self.measure_requested.emit(),
                  menu=engine_menu).setVisible(False)
        engine_menu.addSeparator()
        pgroup = QActionGroup(self)
        for key, text in PROVIDERS.items():
            a = self._add(f"provider:{key}", text, checkable=True, menu=engine_menu)
            a.triggered.connect(lambda _=False, k=key: self.provider_chosen.emit(k))
            pgroup.addAction(a)

        save_menu = self.menu.addMenu("Save transcript")
        for fmt in EXPORT_FORMATS:
            self._add(f"save:{fmt}", f"{fmt.upper()}…", lambda _=False, f=fmt: self._on_save(f),
                      menu=save_menu)
        self._add("copy", "Copy transcript", lambda _=False: self.copy_requested.emit())
        self._add("open_folder", "Open transcripts folder", lambda _=False: self.open_folder_requested.emit())
        self._add("dont_save", "Don't save this session", self.dont_save_toggled.emit, checkable=True)
        self.menu.addSeparator()
        self._add("history", "History…", lambda _=False: self.history_requested.emit())
        self._add("settings", "Settings…", lambda _=False: self.settings_requested.emit())
        self.menu.addSeparator()
        self._add("quit", "Quit", lambda _=False: self.quit_requested.emit())

    def _on_save(self, fmt: str) -> None:
        suggested = str(self._export_dir / f"captions.{fmt}")
        path = self._ask(fmt, suggested)
        if path:
            self.save_requested.emit(fmt, path)

    def _on_tray_activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason == QSystemTrayIcon.ActivationReason.Trigger:
            self.toggle_captions_requested.emit()

    # ------------------------------------------------------------------ state
    def show(self) -> None:
        """Show the icon in the tray."""
        self.tray.show()

    def hide(self) -> None:
        """Remove the icon from the tray."""
        self.tray.hide()

    def set_export_dir(self, path: Path | str) -> None:
        """Folder the save dialog suggests."""
        self._export_dir = Path(path)

    def set_captions_visible(self, visible: bool) -> None:
        """Keep the show/hide item's text in step with the caption bar."""
        self.actions["show"].setText("Hide captions" if visible else "Show captions")

    def set_paused(self, paused: bool) -> None:
        """Reflect pause/resume (without emitting ``pause_toggled`` again)."""
        a = self.actions["pause"]
        a.blockSignals(True)
        a.setChecked(paused)
        a.setText("Resume" if paused else "Pause")
        a.blockSignals(False)
        self.tray.setIcon(self._paused_icon if paused else self._icon)

    def _set_checked(self, name: str, checked: bool) -> None:
        a = self.actions.get(name)
        if a is not None:
            a.blockSignals(True)
            a.setChecked(checked)
            a.blockSignals(False)

    def set_click_through(self, on: bool) -> None:
        """Tick the click-through item."""
        self._set_checked("click_through", on)

    def set_dont_save(self, on: bool) -> None:
        """Tick "don't save this session"."""
        self._set_checked("dont_save", on)

    def set_source(self, source: str) -> None:
        """Tick the current audio source."""
        for key in SOURCES:
            self._set_checked(f"source:{key}", key == source)

    def set_provider_choice(self, provider: str) -> None:
        """Tick the provider the user asked for ("auto", "qnn", "gpu", "cpu")."""
        for key in PROVIDERS:
            self._set_checked(f"provider:{key}", key == provider)

    def set_models(self, names: Sequence[str], current: str) -> None:
        """List the installed model packs, ticking ``current``."""
        for a in self._model_group.actions():
            self._model_group.removeAction(a)
            self._model_menu.removeAction(a)
            self.actions.pop(f"model:{a.data()}", None)
            a.deleteLater()
        if not names:
            none = QAction("(no model installed)", self._model_menu)
            none.setEnabled(False)
            none.setData("")
            self._model_group.addAction(none)
            self._model_menu.addAction(none)
            return
        for name in names:
            a = QAction(name, self._model_menu)
            a.setCheckable(True)
            a.setChecked(name == current)
            a.setData(name)
            a.triggered.connect(lambda _=False, n=name: self.model_chosen.emit(n))
            self._model_group.addAction(a)
            self._model_menu.addAction(a)
            self.actions[f"model:{name}"] = a

    @property
    def available(self) -> bool:
        """The desktop has a system tray (many Linux desktops and Xvfb have none)."""
        return QSystemTrayIcon.isSystemTrayAvailable()

    def set_status(self, state: str | None = None, provider: str | None = None, lag_s: float | None = None,
                   lag_state: str | None = None, language: str | None = None, step_s: float | None = None) -> None:
        """Update the tooltip and the status line (state such as "listening", provider, language
        such as "de (detected)", lag and the lag state "ok", "slower", "behind" or "skipping" of
        the worker's lag rule, and the step in force, said while "slower")."""
        if step_s is not None:
            self._step_s = step_s
        if language is not None:
            self._language = language
        if state is not None:
            self._state = state
        if provider is not None:
            self._provider = provider
        if lag_s is not None:
            self._lag_s = lag_s
        if lag_state is not None:
            self._lag_state = lag_state
        self._update_tooltip()

    def status_text(self) -> str:
        """The one-line status shown in the tooltip and at the top of the menu."""
        parts = [self._state[:1].upper() + self._state[1:]]  # not capitalize(): "NPU" stays
        if self._provider:
            parts.append(f"on {self._provider}")
        if self._language:
            parts.append(f"language {self._language}")
        if self._lag_state == "skipping":
            parts.append(f"behind — skipping, lag {self._lag_s:.1f} s")
        elif self._lag_state == "behind":
            parts.append(f"behind, lag {self._lag_s:.1f} s")
        elif self._lag_state == "slower":
            parts.append(f"captions every {self._step_s:g} s to keep up, lag {self._lag_s:.1f} s")
        else:
            parts.append(f"lag {self._lag_s:.1f} s")
        return " · ".join(parts)

    def _update_tooltip(self) -> None:
        text = self.status_text()
        self.tray.setToolTip(f"captioner — {text}")
        self.actions["status"].setText(text)
        self.status_changed.emit(text)

    def show_error(self, title: str, message: str) -> None:
        """Show an error as a tray message (and log it); without a tray, in a dialog that does not
        block the app (``dialogs_without_tray``), since a tray message would be shown nowhere."""
        logger.warning("%s: %s", title, message)
        if self._dialogs_without_tray and not self.available:
            box = QMessageBox(QMessageBox.Icon.Warning, title, message, QMessageBox.StandardButton.Ok)
            box.setWindowModality(Qt.WindowModality.NonModal)
            box.finished.connect(lambda _r, b=box: self._close_box(b))
            self._boxes.append(box)
            box.show()
            return
        self.tray.showMessage(title, message, QSystemTrayIcon.MessageIcon.Warning, 8000)

    def _close_box(self, box: QMessageBox) -> None:
        if box in self._boxes:
            self._boxes.remove(box)
        box.deleteLater()

    def show_info(self, title: str, message: str) -> None:
        """Show an informational tray message."""
        logger.info("%s: %s", title, message)
        self.tray.showMessage(title, message, QSystemTrayIcon.MessageIcon.Information, 5000)
