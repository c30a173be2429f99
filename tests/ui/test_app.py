"""The composition root offscreen, with a scripted engine and capture: store, bar, tray intents, quit."""

from __future__ import annotations

import json

import pytest
import srt
from PySide6.QtCore import QCoreApplication

from captioner.app import CaptionerApp, EngineRun, GuiOptions
from captioner.storage.paths import AppPaths
from captioner.storage.settings import load_settings
from captioner.transcript.store import SessionStore
from captioner.ui import single_instance
from tests.ui.fakes import FakeCapture, FakeStream


def make_app(qtbot, tmp_path, n_blocks=6, measure_models=None, **options):
    paths = AppPaths.default(tmp_path / "home")
    captures = []

    def capture_factory(settings):
        sources = ("system", "mic") if settings.audio.source == "both" else (settings.audio.source,)

        def open_capture():
            captures.append(FakeCapture(sources=sources, n_blocks=n_blocks, finite=False))
            return captures[-1]

        return open_capture, sources

    def engine_factory(settings, sources, paths):
        return EngineRun({s: FakeStream(s) for s in sources}, "FAKE-CPU", "FAKE-CPU (requested auto)", "fake-pack")

    saved = tmp_path / "saved.srt"
    app = CaptionerApp(paths, GuiOptions(model="fake-pack", **options), engine_factory=engine_factory,
                       capture_factory=capture_factory, ask_save_path=lambda fmt, s: str(saved.with_suffix("." + fmt)),
                       measure_models=measure_models)
    qtbot.addWidget(app.bar)
    app.captures = captures
    app.saved = saved
    return app


def stored_words(app):
    return app.store.session_words(app.session_id)


def quit_and_wait(qtbot, app):
    app.tray.actions["quit"].trigger()
    qtbot.waitUntil(lambda: not app.running, timeout=10_000)


def test_words_reach_the_store_and_the_bar_and_quit_leaves_a_complete_session(qtbot, tmp_path):
    app = make_app(qtbot, tmp_path)
    app.start()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 5, timeout=10_000)
    assert app.bar.isVisible()
    qtbot.waitUntil(lambda: "system0" in " ".join(app.bar.visible_lines()), timeout=5000)
    assert "FAKE-CPU" in app.tray.tray.toolTip()
    sid = app.session_id
    quit_and_wait(qtbot, app)
    with SessionStore.open(app.paths.sessions_db) as store:
        info = store.get_session(sid)
        assert info.ended_at is not None
        words = store.session_words(sid)
    assert [w.text for w in words] == [f"system{i}" for i in range(6)]  # the speculative tail committed


def test_windows_ending_the_session_keeps_the_last_words_before_about_to_quit_returns(qtbot, tmp_path):
    """Windows' log-off or shutdown: Qt emits ``aboutToQuit`` inside ``WM_ENDSESSION``'s handler and the
    process ends as soon as it returns (qtbase's qwindowscontext.cpp), so no turn of the event loop
    comes after it: the engine's last words (the speculative tail committed by its finish), the
    session's end and the settings must be on disk when the signal returns."""
    from PySide6.QtWidgets import QApplication

    app = make_app(qtbot, tmp_path)
    qapp = QApplication.instance()
    qapp.aboutToQuit.connect(app.end_now)  # as commands/gui.py connects it
    try:
        app.start()
        qtbot.waitUntil(lambda: len(stored_words(app)) >= 5, timeout=10_000)
        sid = app.session_id
        app.paths.settings_file.unlink(missing_ok=True)  # the settings are saved as the app ends
        qapp.aboutToQuit.emit()  # what is on disk now is what the ended process leaves
        with SessionStore.open(app.paths.sessions_db) as store:
            info = store.get_session(sid)
            words = store.session_words(sid)
        assert info.ended_at is not None and not app.running
        assert words and [w.text for w in words] == [f"system{i}" for i in range(len(words))]
        assert not any(w.speculative for w in words)  # the tail the finish committed is there
        assert load_settings(app.paths.settings_file)[0] == app.settings
        qapp.aboutToQuit.emit()  # Qt emits it again when the loop ends after a normal quit: nothing to do
    finally:
        qapp.aboutToQuit.disconnect(app.end_now)


def test_save_srt_from_the_tray_writes_a_file_that_parses(qtbot, tmp_path):
    app = make_app(qtbot, tmp_path)
    app.start()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 5, timeout=10_000)
    app.tray.actions["save:srt"].trigger()
    subs = list(srt.parse(app.saved.read_text(encoding="utf-8")))
    assert subs and "system0" in subs[0].content
    app.tray.actions["save:json"].trigger()
    assert app.saved.with_suffix(".json").read_text(encoding="utf-8").lstrip().startswith("{")
    quit_and_wait(qtbot, app)


def test_source_change_restarts_with_a_new_session_in_both_mode(qtbot, tmp_path):
    app = make_app(qtbot, tmp_path)
    app.start()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 3, timeout=10_000)
    first = app.session_id
    app.tray.actions["source:both"].trigger()
    qtbot.waitUntil(lambda: app.session_id != first and app.running, timeout=10_000)
    qtbot.waitUntil(lambda: {w.source for w in stored_words(app)} == {"mic", "system"}, timeout=10_000)
    assert app.store.get_session(first).ended_at is not None
    assert load_settings(app.paths.settings_file)[0].audio.source == "both"
    qtbot.waitUntil(lambda: "You:" in " ".join(app.bar.visible_lines()), timeout=5000)
    quit_and_wait(qtbot, app)


def test_dont_save_moves_the_session_out_of_the_disk_store(qtbot, tmp_path):
    app = make_app(qtbot, tmp_path)
    app.start()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 3, timeout=10_000)
    app.tray.actions["dont_save"].trigger()
    assert app.store is not app.disk_store
    assert app.disk_store.list_sessions() == []
    assert len(stored_words(app)) >= 3  # still exportable from memory
    quit_and_wait(qtbot, app)
    with SessionStore.open(app.paths.sessions_db) as store:
        assert store.list_sessions() == []


def live_files(app):
    return sorted(app.paths.exports.glob("live-*"))


def test_live_subtitle_setting_writes_a_growing_file_that_follows_dont_save(qtbot, tmp_path):
    settings_file = AppPaths.default(tmp_path / "home").ensure().settings_file
    settings_file.write_text(json.dumps({"transcripts": {"live_export": "srt", "max_lines": 1,
                                                         "max_line_chars": 20}}))
    app = make_app(qtbot, tmp_path, n_blocks=40)
    app.start()
    qtbot.waitUntil(lambda: bool(live_files(app)) and live_files(app)[0].stat().st_size > 0, timeout=10_000)
    first, = live_files(app)
    assert first.suffix == ".srt" and app.recorder.live.path == first
    app.tray.actions["dont_save"].trigger()  # nothing of an unsaved session stays on disk
    assert live_files(app) == []
    app.tray.actions["dont_save"].trigger()  # saved again: a new live file with the words so far
    second, = live_files(app)
    assert second.stat().st_size > 0
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 20, timeout=10_000)
    sid = app.session_id
    quit_and_wait(qtbot, app)
    with SessionStore.open(app.paths.sessions_db) as store:
        words = [w.text for w in store.session_words(sid)]
    subs = list(srt.parse(second.read_text(encoding="utf-8")))
    assert [w for s in subs for w in s.content.split()] == words


def test_pause_and_click_through_from_the_tray(qtbot, tmp_path):
    app = make_app(qtbot, tmp_path)
    app.start()
    qtbot.waitUntil(lambda: bool(app.captures and app.captures[0].started), timeout=10_000)
    app.tray.actions["pause"].trigger()
    qtbot.waitUntil(lambda: app.captures[0].stopped >= 1, timeout=5000)
    assert "Paused" in app.tray.tray.toolTip()
    app.tray.actions["pause"].trigger()
    qtbot.waitUntil(lambda: len(app.captures) == 2, timeout=5000)
    app.tray.actions["click_through"].trigger()
    assert app.bar.style_settings.click_through and app.bar.isVisible()
    app.tray.actions["click_through"].trigger()  # the tray item is the way back
    assert not app.bar.style_settings.click_through
    quit_and_wait(qtbot, app)


def test_left_click_toggles_and_a_second_start_shows_the_bar(qtbot, tmp_path):
    app = make_app(qtbot, tmp_path, minimized=True)
    app.start()
    assert not app.bar.isVisible()
    app.tray.actions["show"].trigger()
    assert app.bar.isVisible()
    app.toggle_captions()
    assert not app.bar.isVisible()
    instance = single_instance.SingleInstance(single_instance.server_name(app.paths.data))
    assert instance.listen()
    instance.message.connect(app.on_instance_message)
    with qtbot.waitSignal(instance.message, timeout=5000):
        assert single_instance.send(instance.name, "show")
    assert app.bar.isVisible()
    instance.close()
    assert not single_instance.send(instance.name, "show")  # nobody listening any more
    quit_and_wait(qtbot, app)


def test_bar_geometry_is_saved_per_screen_layout(qtbot, tmp_path):
    app = make_app(qtbot, tmp_path)
    app.start()
    app.bar.geometry_changed.emit(app.bar.geometry())
    saved = load_settings(app.paths.settings_file)[0].window
    assert list(saved.values()) == [app.bar.geometry().getRect()]
    quit_and_wait(qtbot, app)


def test_quit_does_not_stop_the_test_application():
    assert QCoreApplication.instance() is not None


def test_settings_apply_live_and_save_on_ok(qtbot, tmp_path):
    from PySide6.QtWidgets import QApplication

    from captioner.ui.settings_dialog import SettingsDialog

    app = make_app(qtbot, tmp_path)
    app.start()
    app.tray.actions["settings"].trigger()
    dialog = next(w for w in QApplication.topLevelWidgets() if isinstance(w, SettingsDialog) and w.isVisible())
    dialog.editors[("captions", "lines")].setValue(5)
    assert app.bar.style_settings.lines == 5  # live preview
    assert load_settings(app.paths.settings_file)[0].captions.lines == 2  # saved only on OK
    dialog.accept()
    assert load_settings(app.paths.settings_file)[0].captions.lines == 5
    quit_and_wait(qtbot, app)


class ScriptedMeasurement:
    """A measure function that reports a line, then waits to be let go (or stopped): what the app does
    meanwhile is observable."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.asked = []
        self.stopped = False

    def __call__(self, settings, progress, stop):
        self.asked.append(settings)
        progress("measuring tiny.en (38 M parameters): …")
        while not self.release.wait(0.02):
            if stop():
                self.stopped = True
                raise RuntimeError("stopped")  # as the real one raises Cancelled
        return "model\ntiny.en keeps up\n\nThe largest model that keeps up here: tiny.en.", "tiny.en"


def _open_settings(app):
    app.tray.actions["settings"].trigger()
    assert app._settings_dialog is not None and app._settings_dialog.isVisible()
    return app._settings_dialog


def test_measuring_pauses_captions_and_selects_the_chosen_model(qtbot, tmp_path):
    measurement = ScriptedMeasurement()
    app = make_app(qtbot, tmp_path, measure_models=measurement)
    app.start()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 3, timeout=10_000)  # captioning
    dialog = _open_settings(app)
    dialog.editors[("engine", "step_s")].setValue(1.5)
    dialog.measure_button.click()
    qtbot.waitUntil(lambda: "Measuring tiny.en" in dialog.measure_report.text(), timeout=5000)
    assert app.paused and measurement.asked[0].engine.step_s == 1.5  # the settings as edited
    assert not dialog.measure_button.isEnabled()
    measurement.release.set()
    qtbot.waitUntil(lambda: not app.paused, timeout=5000)  # resumed
    assert dialog.current_settings().engine.model == "tiny.en" and "OK captions with it" in dialog.measure_report.text()
    dialog.accept()
    assert load_settings(app.paths.settings_file)[0].engine.model == "tiny.en"
    quit_and_wait(qtbot, app)


def test_the_trays_measure_opens_the_model_tab_measuring(qtbot, tmp_path):
    assert not make_app(qtbot, tmp_path / "a").tray.actions["measure"].isVisible()  # nothing to measure with
    measurement = ScriptedMeasurement()
    app = make_app(qtbot, tmp_path / "b", measure_models=measurement)
    assert app.tray.actions["measure"].isVisible()
    app.start()
    app.tray.actions["measure"].trigger()
    dialog = _open_settings(app)
    assert dialog.tabs.tabText(dialog.tabs.currentIndex()) == "Model"
    qtbot.waitUntil(lambda: bool(measurement.asked), timeout=5000)
    assert app.paused
    measurement.release.set()
    qtbot.waitUntil(lambda: dialog.measure_button.isEnabled() and not app.paused, timeout=5000)
    dialog.reject()
    quit_and_wait(qtbot, app)


def test_closing_the_dialog_stops_the_measurement_and_a_paused_app_stays_paused(qtbot, tmp_path):
    measurement = ScriptedMeasurement()
    app = make_app(qtbot, tmp_path, measure_models=measurement)
    app.start()
    app.set_paused(True)
    dialog = _open_settings(app)
    dialog.measure_button.click()
    qtbot.waitUntil(lambda: bool(measurement.asked), timeout=5000)
    dialog.reject()
    qtbot.waitUntil(lambda: measurement.stopped, timeout=5000)
    assert app._measurement.wait(5.0)
    QCoreApplication.processEvents()
    assert app.paused  # paused before: stays paused
    assert load_settings(app.paths.settings_file)[0].engine.model != "tiny.en"
    quit_and_wait(qtbot, app)


def test_quitting_while_measuring_stops_it(qtbot, tmp_path):
    measurement = ScriptedMeasurement()
    app = make_app(qtbot, tmp_path, measure_models=measurement)
    app.start()
    dialog = _open_settings(app)
    dialog.measure_button.click()
    qtbot.waitUntil(lambda: bool(measurement.asked), timeout=5000)
    quit_and_wait(qtbot, app)
    assert measurement.stopped and not app._measurement.running
    assert app._settings_dialog is None  # closed with the app (and deleted)


def test_history_opens_from_the_tray_with_the_recorded_session(qtbot, tmp_path):
    app = make_app(qtbot, tmp_path)
    app.start()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 3, timeout=10_000)
    from PySide6.QtWidgets import QApplication

    from captioner.ui.history_window import HistoryWindow

    app.tray.actions["history"].trigger()
    history = next(w for w in QApplication.topLevelWidgets() if isinstance(w, HistoryWindow) and w.isVisible())
    assert history.session_ids() == [app.session_id]
    history.close()
    quit_and_wait(qtbot, app)


def test_a_missing_model_is_a_tray_message_not_a_crash(qtbot, tmp_path):
    from captioner.errors import ModelError

    paths = AppPaths.default(tmp_path / "home")

    def engine_factory(settings, sources, paths):
        raise ModelError("no pack 'gone'; installed: none")

    app = CaptionerApp(paths, GuiOptions(model="gone"), engine_factory=engine_factory,
                       capture_factory=lambda s: ((lambda: FakeCapture()), ("system",)))
    qtbot.addWidget(app.bar)
    shown = []
    app.tray.show_error = lambda title, msg: shown.append((title, msg))
    app.start()
    assert not app.running
    assert shown == [("Model problem", "no pack 'gone'; installed: none")]
    assert "Stopped" in app.tray.tray.toolTip()
    quit_and_wait(qtbot, app)


def test_a_forced_provider_that_fell_back_is_a_tray_message(qtbot, tmp_path):
    paths = AppPaths.default(tmp_path / "home")

    def engine_factory(settings, sources, paths):
        return EngineRun({"system": FakeStream()}, "CPU", "CPU (requested qnn; QNN-HTP: no NPU)", "p",
                       warning="CPU (requested qnn; QNN-HTP: no NPU)")

    app = CaptionerApp(paths, GuiOptions(model="p", provider="qnn"), engine_factory=engine_factory,
                       capture_factory=lambda s: ((lambda: FakeCapture(finite=False)), ("system",)))
    qtbot.addWidget(app.bar)
    shown = []
    app.tray.show_error = lambda title, msg: shown.append((title, msg))
    app.start()
    assert ("Provider fell back", "CPU (requested qnn; QNN-HTP: no NPU)") in shown
    assert "on CPU" in app.tray.tray.toolTip()
    quit_and_wait(qtbot, app)


def test_overload_shows_skipping_on_the_bar_and_in_the_tray_once(qtbot, tmp_path):
    app = make_app(qtbot, tmp_path, n_blocks=80)  # 8 s at once: more than two 3 s steps waiting
    infos = []
    app.tray.show_info = lambda title, msg: infos.append((title, msg))
    app.start()
    qtbot.waitUntil(lambda: app.bar.lag_visible, timeout=10_000)
    assert app.bar.lag_text.startswith("behind — skipping")
    assert "behind — skipping" in app.tray.tray.toolTip()
    assert [t for t, _ in infos] == ["Captions are behind — skipping"]
    assert "even with captions every 3 s," in infos[0][1] and "'captioner models choose'" in infos[0][1]
    gaps = app.store.session_gaps(app.session_id)  # the skipped span is in the transcript
    assert len(gaps) == 1 and gaps[0].start == 0.0 and gaps[0].end >= 2.0
    app.set_paused(True)  # paused: nothing waits for the engine, the badge clears
    qtbot.waitUntil(lambda: not app.bar.lag_visible, timeout=5000)
    assert "behind" not in app.tray.tray.toolTip()
    quit_and_wait(qtbot, app)


def test_a_first_npu_start_says_what_it_compiles_and_captures_only_after(qtbot, tmp_path):
    """Where the model compiles for the NPU first (minutes), the bar's badge and the tray say so with
    the graphs compiled and a tray message explains it once; the capture opens only after it, so
    its 20 s ring cannot overflow meanwhile; then the captions come."""
    import threading

    halfway, finish = threading.Event(), threading.Event()
    opened = []
    paths = AppPaths.default(tmp_path / "home")
    streams = {}

    def capture_factory(settings):
        def open_capture():
            opened.append(finish.is_set())
            return FakeCapture(n_blocks=5, finite=False)
        return open_capture, ("system",)

    def prepare(progress):
        progress(1, 4)
        progress(2, 4)
        halfway.set()
        finish.wait(10)
        progress(4, 4)

    def engine_factory(settings, sources, paths):
        streams["system"] = FakeStream()
        return EngineRun(streams, "QNN-HTP", "QNN-HTP", "fake-pack", prepare=prepare, prepare_first=True)

    app = CaptionerApp(paths, GuiOptions(model="fake-pack"), engine_factory=engine_factory,
                       capture_factory=capture_factory)
    qtbot.addWidget(app.bar)
    told = []
    app.tray.show_info = lambda title, message: told.append(title)
    app.start()
    qtbot.waitUntil(lambda: app.bar.lag_text == "preparing the NPU (first start) · 2 of 4…", timeout=5000)
    assert halfway.is_set() and opened == [] and app.bar.visible_lines() == []
    assert "Preparing the NPU (first start): 2 of 4 graphs" in app.tray.status_text()
    assert told == ["Preparing the NPU"]
    finish.set()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 4, timeout=10_000)
    assert opened == [True] and not app.bar.lag_visible and "Listening" in app.tray.status_text()
    quit_and_wait(qtbot, app)


@pytest.mark.parametrize("known", ["while_compiling", "before"])
def test_an_npu_cache_that_cannot_be_saved_is_said_once_with_what_to_do(qtbot, tmp_path, known, monkeypatch):
    """The NPU's compiled model cannot be saved (a full disk; the runtime compiles in memory and says
    why in ``EngineInfo.cache_problem``): the tray says once that every start compiles again, where,
    and what to do, instead of "once"; found while compiling it comes when captions start, known
    before (the cache folder cannot be made) it replaces the "once" message."""
    import threading

    from captioner.engine.runtime import EngineInfo

    shown = threading.Event()  # the tray has said its first message: the compile goes on (it takes minutes)
    problem = {"why": "" if known == "while_compiling" else "its path has letters that the QNN plugin cannot read "
               "under code page 1252, and its disk keeps no short name for it"}
    full = known == "while_compiling"  # a full disk, found by the compile; else a folder the plugin cannot use
    monkeypatch.setattr("captioner.app.free_bytes", lambda path: 0 if full else 50 << 30)
    paths = AppPaths.default(tmp_path / "home")

    def capture_factory(settings):
        return (lambda: FakeCapture(n_blocks=5, finite=False)), ("system",)

    def prepare(progress):
        progress(1, 2)
        shown.wait(5)
        if known == "while_compiling":  # as the runtime finds it, mid-compile
            problem["why"] = "Failed to write context cache file."
        progress(2, 2)

    def engine_factory(settings, sources, paths):
        return EngineRun({"system": FakeStream()}, "QNN-HTP", "QNN-HTP", "fake-pack", prepare=prepare,
                         prepare_first=True, info=lambda: EngineInfo("qnn", "QNN-HTP", cache_problem=problem["why"]))

    app = CaptionerApp(paths, GuiOptions(model="fake-pack"), engine_factory=engine_factory,
                       capture_factory=capture_factory)
    qtbot.addWidget(app.bar)
    told: list[tuple[str, str]] = []
    app.tray.show_info = app.tray.show_error = lambda title, message: (told.append((title, message)), shown.set())
    app.start()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 4, timeout=10_000)
    titles = [t for t, _ in told]
    if known == "before":
        assert titles == ["The NPU compiles at every start"]
    else:
        assert titles == ["Preparing the NPU", "The NPU compiles at every start"]
    message = told[-1][1]
    assert str(paths.cache) in message and problem["why"] in message
    assert ("Free some disk space there" in message) == full and "once" not in message
    app.set_paused(True)
    qtbot.waitUntil(lambda: "Paused" in app.tray.status_text(), timeout=5000)
    app.set_paused(False)
    qtbot.waitUntil(lambda: "Listening" in app.tray.status_text(), timeout=5000)
    assert len(told) == len(titles)  # not again while the same problem lasts
    quit_and_wait(qtbot, app)


def test_after_a_restart_the_next_engine_outlives_the_last_ones_stop_timeout(qtbot, tmp_path, monkeypatch):
    """A setting that restarts the engine (here the source): the stop timeout armed for the engine
    that stopped must not take the next one for stuck. It did: 15 s after any such change the new
    engine was left running unheard and its session ended (seen on Xvfb: the language changed in
    Settings, the captions froze 15 s later)."""
    import dataclasses

    import captioner.app as app_module

    monkeypatch.setattr(app_module, "STOP_TIMEOUT_MS", 300)
    app = make_app(qtbot, tmp_path)
    app.start()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 3, timeout=10_000)
    first = app.session_id
    app.update_settings(dataclasses.replace(app.settings, audio=dataclasses.replace(app.settings.audio, source="mic")))
    qtbot.waitUntil(lambda: app.running and app.session_id != first, timeout=10_000)
    second = app.session_id
    qtbot.wait(900)  # three stop timeouts
    assert app.running and app.session_id == second and not app._abandoned
    with SessionStore.open(app.paths.sessions_db) as store:
        assert store.get_session(second).ended_at is None
    before = len(stored_words(app))
    with qtbot.waitSignal(app.state_changed, check_params_cb=lambda state: state == "paused", timeout=5000):
        app.set_paused(True)
    app.set_paused(False)  # a fresh capture: more words, heard by the session
    qtbot.waitUntil(lambda: len(stored_words(app)) > before, timeout=10_000)
    quit_and_wait(qtbot, app)
    assert not app.abandoned_engine


def test_an_engine_stuck_past_the_stop_timeout_is_left_running_not_destroyed(qtbot, tmp_path, monkeypatch):
    """Quitting while the engine is stuck in a native call (an NPU compile between two progress
    calls, a hung driver): after the stop timeout the session ends with what it committed, and the
    worker's thread is kept, not deleted while it runs (Qt aborts the process for that: a first NPU
    start quit on the emulator ended with SIGABRT); what it says afterwards reaches no session."""
    import threading

    import captioner.app as app_module

    monkeypatch.setattr(app_module, "STOP_TIMEOUT_MS", 300)
    release = threading.Event()
    paths = AppPaths.default(tmp_path / "home")

    def capture_factory(settings):
        return (lambda: FakeCapture(n_blocks=5, finite=False)), ("system",)

    def engine_factory(settings, sources, paths):
        return EngineRun({"system": FakeStream()}, "QNN-HTP", "QNN-HTP", "fake-pack",
                         prepare=lambda progress: release.wait(20), prepare_first=True)

    app = CaptionerApp(paths, GuiOptions(model="fake-pack"), engine_factory=engine_factory,
                       capture_factory=capture_factory)
    qtbot.addWidget(app.bar)
    app.start()
    qtbot.waitUntil(lambda: app.bar.lag_visible, timeout=5000)
    sid = app.session_id
    quit_and_wait(qtbot, app)
    assert app.abandoned_engine and app.tray.status_text().startswith("Quitting")
    with SessionStore.open(app.paths.sessions_db) as store:
        assert store.get_session(sid).ended_at is not None
    release.set()  # the native call returns: the thread ends by itself, its "stopped" reaches nobody
    qtbot.waitUntil(lambda: not app.abandoned_engine, timeout=5000)
    QCoreApplication.processEvents()
    assert app.tray.status_text().startswith("Quitting")


def test_an_engine_left_at_a_restart_is_released_when_it_returns(qtbot, tmp_path, monkeypatch):
    """A restart (another model or source) while the engine is stuck in a native call leaves that
    engine at the stop timeout and starts the next one; when the stuck call returns, the old
    worker's thread is deleted and its engine (the model's sessions: hundreds of MB) let go, not
    held until the app quits."""
    import gc
    import threading
    import weakref

    import captioner.app as app_module

    monkeypatch.setattr(app_module, "STOP_TIMEOUT_MS", 300)
    release = threading.Event()
    paths = AppPaths.default(tmp_path / "home")
    engines: list[weakref.ref] = []

    def capture_factory(settings):
        return (lambda: FakeCapture(n_blocks=5, finite=False)), ("system",)

    def engine_factory(settings, sources, paths):
        stream = FakeStream()
        engines.append(weakref.ref(stream))
        stuck = len(engines) == 1  # the first engine hangs in its compile; the next one is quick
        return EngineRun({"system": stream}, "QNN-HTP", "QNN-HTP", "fake-pack",
                         prepare=(lambda progress: release.wait(20)) if stuck else (lambda progress: None),
                         prepare_first=True)

    app = CaptionerApp(paths, GuiOptions(model="fake-pack"), engine_factory=engine_factory,
                       capture_factory=capture_factory)
    qtbot.addWidget(app.bar)
    app.start()
    qtbot.waitUntil(lambda: app.bar.lag_visible, timeout=5000)
    app.restart_engine()
    qtbot.waitUntil(lambda: len(engines) == 2 and len(stored_words(app)) >= 2, timeout=10_000)
    assert len(app._abandoned) == 1 and engines[0]() is not None  # the stuck one still runs
    release.set()
    qtbot.waitUntil(lambda: not app._abandoned, timeout=5000)  # no one asked abandoned_engine
    for _ in range(3):
        QCoreApplication.processEvents()
        gc.collect()
    assert engines[0]() is None and engines[1]() is not None
    quit_and_wait(qtbot, app)


def test_the_bar_says_starting_while_the_engine_is_readied_and_no_audio_is_skipped(qtbot, tmp_path):
    """While the worker readies the engine (seconds on a CPU) the bar shows a "starting…" badge;
    then the words of the audio captured meanwhile come, none of it skipped."""
    import threading

    ready = threading.Event()
    paths = AppPaths.default(tmp_path / "home")
    streams = {}

    def capture_factory(settings):
        return (lambda: FakeCapture(n_blocks=30, finite=False)), ("system",)

    def engine_factory(settings, sources, paths):
        streams["system"] = FakeStream(step_s=0.2)  # 3 s captured while readying: fifteen steps
        return EngineRun(streams, "FAKE-CPU", "FAKE-CPU", "fake-pack", prepare=lambda progress: ready.wait(10))

    app = CaptionerApp(paths, GuiOptions(model="fake-pack"), engine_factory=engine_factory,
                       capture_factory=capture_factory)
    qtbot.addWidget(app.bar)
    app.start()
    qtbot.waitUntil(lambda: app.bar.lag_text == "starting…", timeout=5000)
    assert app.bar.visible_lines() == [] and "Starting" in app.tray.status_text()
    ready.set()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 29, timeout=10_000)  # the last is a draft
    assert app.bar.lag_text != "starting…"
    assert not streams["system"].skips and not app.store.session_gaps(app.session_id)
    quit_and_wait(qtbot, app)


def test_copy_transcript_puts_the_words_shown_on_the_clipboard(qtbot, tmp_path):
    """The tray's (and the bar's) "Copy transcript": the session's text as a TXT export writes it,
    the words still dimmed on the bar included; before any session, an error and nothing copied."""
    from PySide6.QtGui import QGuiApplication

    app = make_app(qtbot, tmp_path)
    QGuiApplication.clipboard().setText("before")
    app.tray.actions["copy"].trigger()
    assert QGuiApplication.clipboard().text() == "before"  # no session yet
    app.start()
    qtbot.waitUntil(lambda: len(app.recorder.session_words(include_speculative=True)) >= 6, timeout=10_000)
    shown = app.recorder.session_words(include_speculative=True)
    assert any(w.speculative for w in shown)  # the fake's last word is still a draft
    app.tray.actions["copy"].trigger()
    assert QGuiApplication.clipboard().text().split() == [w.text for w in shown]
    quit_and_wait(qtbot, app)


def test_mark_this_moment_lands_in_the_session_at_the_audio_heard(qtbot, tmp_path):
    """The tray's (and the bar's) "Mark this moment", the global shortcut's "mark" and a second
    start's ``--mark`` each store a mark at "now" on the session's audio clock (the audio fed, and
    the wall time since for a live capture), say so on the bar's badge, and the marks stay with the
    session when it moves to memory and back ("don't save")."""
    import time

    from captioner.core import EngineUpdate
    from captioner.transcript.cues import Gap
    from tests.ui.fakes import BLOCK

    app = make_app(qtbot, tmp_path, n_blocks=6)
    app.tray.actions["mark"].trigger()  # no session yet: nothing stored
    app.start()
    qtbot.waitUntil(lambda: len(stored_words(app)) >= 5, timeout=10_000)
    heard = 6 * BLOCK / 16_000  # the fake capture's six blocks, then it idles (a live capture: time goes on)
    t0 = time.monotonic()
    app.tray.actions["mark"].trigger()
    (mark,) = app.store.session_marks(app.session_id)
    assert heard <= mark.at <= heard + (time.monotonic() - t0) + 10.0 and mark.note == ""
    assert app.bar.notice_text.startswith("★ marked 0:00:")
    app._on_hotkey("mark")
    app.on_instance_message("mark decision: ship it")  # captioner --mark "decision: ship it"
    assert [m.note for m in app.store.session_marks(app.session_id)] == ["", "", "decision: ship it"]
    app.store.set_title(app.session_id, "Weekly sync")
    app.recorder.apply(EngineUpdate(0, (), gap=(0.1, 0.2)))  # audio the engine skipped
    app.tray.actions["dont_save"].trigger()  # to memory and back: marks, gaps, title go with the words
    app.tray.actions["dont_save"].trigger()
    assert len(app.store.session_marks(app.session_id)) == 3
    assert app.store.session_gaps(app.session_id) == [Gap(0.1, 0.2)]
    assert app.store.get_session(app.session_id).title == "Weekly sync"
    sid = app.session_id
    quit_and_wait(qtbot, app)
    with SessionStore.open(app.paths.sessions_db) as store:
        ats = [m.at for m in store.session_marks(sid)]
        assert ats == sorted(ats) and ats[0] == mark.at and len(ats) == 3
        assert store.session_words(sid)
