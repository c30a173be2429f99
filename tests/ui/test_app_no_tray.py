"""The app for a new user (issue 26): the detected language in the bar's tooltip and the session, the
tray's menu on the bar's right click, a second start's --toggle/--pause, the shortcuts' syntax."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtGui import QContextMenuEvent
from PySide6.QtWidgets import QApplication

from captioner.app import CaptionerApp, EngineRun, GuiOptions
from captioner.storage.paths import AppPaths
from captioner.transcript.store import SessionStore
from captioner.ui.hotkeys import parse_hotkey
from tests.ui.fakes import FakeCapture, FakeStream


class GermanStream(FakeStream):
    """The fake engine's rounds, decoded in German (``language="auto"`` detected ``de``)."""

    def step(self):
        update = super().step()
        if update is not None and update.stats is not None:
            update = dataclasses.replace(update, stats=dataclasses.replace(update.stats, bucket=3, language="de",
                                                                           input_s=0.1))
        return update


def make_app(qtbot, tmp_path, stream=FakeStream, language="auto", **options) -> CaptionerApp:
    def capture_factory(settings):
        return (lambda: FakeCapture(n_blocks=6, finite=False)), ("system",)

    def engine_factory(settings, sources, paths):
        return EngineRun({s: stream(s) for s in sources}, "FAKE-CPU", "FAKE-CPU", "fake-pack", language=language)

    app = CaptionerApp(AppPaths.default(tmp_path / "home"), GuiOptions(model="fake-pack", **options),
                       engine_factory=engine_factory, capture_factory=capture_factory)
    qtbot.addWidget(app.bar)
    return app


def quit_and_wait(qtbot, app) -> None:
    app.quit()
    qtbot.waitUntil(lambda: not app.running, timeout=10_000)


def test_the_detected_language_is_in_the_tooltips_and_kept_with_the_session(qtbot, tmp_path) -> None:
    app = make_app(qtbot, tmp_path, GermanStream)
    app.start()
    qtbot.waitUntil(lambda: "language de (detected)" in app.bar.toolTip(), timeout=10_000)
    assert "language de (detected)" in app.tray.tray.toolTip()
    sid = app.session_id
    quit_and_wait(qtbot, app)
    with SessionStore.open(app.paths.sessions_db) as store:
        info = store.get_session(sid)
        assert info.language == "de" and info.to_json()["settings"]["engine"]["language"] == "auto"


def test_a_fixed_language_is_shown_as_it_is(qtbot, tmp_path) -> None:
    app = make_app(qtbot, tmp_path, language="en")
    app.start()
    qtbot.waitUntil(lambda: "language en" in app.bar.toolTip(), timeout=10_000)
    assert "detected" not in app.bar.toolTip()
    sid = app.session_id
    quit_and_wait(qtbot, app)
    with SessionStore.open(app.paths.sessions_db) as store:  # what ran, not the setting's "auto"
        assert store.get_session(sid).to_json()["settings"]["engine"]["language"] == "en"


def test_a_replayed_file_names_its_session(qtbot, tmp_path) -> None:
    wav = tmp_path / "meeting-2026-11-25.wav"
    app = make_app(qtbot, tmp_path, source_file=wav)
    app.start()
    sid = app.session_id
    quit_and_wait(qtbot, app)
    with SessionStore.open(app.paths.sessions_db) as store:
        assert store.get_session(sid).title == wav.name


def test_right_click_on_the_bar_opens_the_apps_menu(qtbot, tmp_path) -> None:
    app = make_app(qtbot, tmp_path)
    app.start()
    assert app.bar.isVisible()
    event = QContextMenuEvent(QContextMenuEvent.Reason.Mouse, QPoint(20, 10), app.bar.mapToGlobal(QPoint(20, 10)))
    QApplication.sendEvent(app.bar, event)
    qtbot.waitUntil(app.tray.menu.isVisible, timeout=5000)
    assert app.tray.actions["quit"] in app.tray.menu.actions()
    app.tray.menu.hide()
    app.tray.actions["show"].trigger()  # "Hide captions"
    assert not app.bar.isVisible()
    quit_and_wait(qtbot, app)


def test_a_second_start_toggles_the_bar_and_pauses(qtbot, tmp_path) -> None:
    app = make_app(qtbot, tmp_path)
    app.start()
    app.on_instance_message("toggle")
    assert not app.bar.isVisible()
    app.on_instance_message("toggle")
    assert app.bar.isVisible()
    app.on_instance_message("pause")
    assert app.paused and app.tray.actions["pause"].isChecked()
    app.on_instance_message("pause")
    assert not app.paused
    quit_and_wait(qtbot, app)


def test_hotkey_syntax() -> None:
    assert parse_hotkey("Ctrl+Alt+C") == (frozenset({"ctrl", "alt"}), "c")
    assert parse_hotkey("shift+super+F9") == (frozenset({"shift", "super"}), "f9")
    for bad in ("C", "Ctrl+Alt+Space", "Hyper+C", "Ctrl+F30"):
        with pytest.raises(ValueError, match="not a shortcut"):
            parse_hotkey(bad)
