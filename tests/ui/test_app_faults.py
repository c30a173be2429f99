"""The app under faults (issue 16): a provider failing mid-session, the store refusing writes.

A scripted engine (``FakeStream``) and a capture that hands out blocks only when the test releases
them, so the fault lands between known words; the store is the real SQLite store on disk, made to
refuse writes by SQLite itself (``PRAGMA query_only``: "attempt to write a readonly database").
"""

from __future__ import annotations

import dataclasses
import json
import threading

import numpy as np

from captioner.app import CaptionerApp, EngineRun, GuiOptions
from captioner.core import AudioBlock
from captioner.engine.providers import Attempt
from captioner.engine.runtime import EngineInfo
from captioner.storage.paths import AppPaths
from captioner.transcript.store import SessionStore
from tests.transcript._streams import saved_session
from tests.ui.fakes import BLOCK, FakeStream


class GatedCapture:
    """Gives out a block of 0.1 s per :meth:`release`; idles on reads otherwise."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._allowed = 0
        self._sent = 0
        self._wake = threading.Event()
        self.finished = False

    def release(self, n: int) -> None:
        with self._lock:
            self._allowed += n
        self._wake.set()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self._wake.set()

    def read(self, timeout: float):
        with self._lock:
            if self._sent < self._allowed:
                self._sent += 1
                return AudioBlock("system", (self._sent - 1) * BLOCK, np.full(BLOCK, 0.1, np.float32))
        self._wake.wait(timeout)
        self._wake.clear()
        return None

    def events(self):
        return []


def _app(qtbot, tmp_path, stream: FakeStream, info=None):
    capture = GatedCapture()
    paths = AppPaths.default(tmp_path / "home")

    def engine_factory(settings, sources, paths):
        return EngineRun({"system": stream}, stream.provider, f"{stream.provider} (requested auto)", "fake-pack",
                         info=info)

    app = CaptionerApp(paths, GuiOptions(model="fake-pack"), engine_factory=engine_factory,
                       capture_factory=lambda s: ((lambda: capture), ("system",)))
    qtbot.addWidget(app.bar)
    shown: list[tuple[str, str]] = []
    app.tray.show_error = lambda title, msg: shown.append((title, msg))
    app.tray.show_info = lambda title, msg: shown.append((title, msg))
    return app, capture, shown


def _quit(qtbot, app) -> None:
    app.tray.actions["quit"].trigger()
    qtbot.waitUntil(lambda: not app.running, timeout=10_000)


def _words_on_bar(app) -> str:
    return " ".join(app.bar.visible_lines())


def test_a_provider_failing_mid_session_is_told_once_and_shown_in_the_tooltip_and_doctor(qtbot, tmp_path,
                                                                                          capsys):
    stream = FakeStream(provider="QNN-HTP")
    failure = Attempt("QNN-HTP", True, "decoder_s25_k6.onnx failed while running: device lost", mid_session=True)
    info = EngineInfo("auto", "CPU", (failure,))
    app, capture, shown = _app(qtbot, tmp_path, stream, info=lambda: info)
    app.start()
    capture.release(5)
    qtbot.waitUntil(lambda: "system3" in _words_on_bar(app), timeout=10_000)
    assert "on QNN-HTP" in app.tray.tray.toolTip() and shown == []
    stream.provider = "CPU"  # what RoundStats.provider says once the runtime failed over
    capture.release(5)
    qtbot.waitUntil(lambda: "system8" in _words_on_bar(app), timeout=10_000)
    assert shown == [("QNN-HTP failed", "QNN-HTP failed: decoder_s25_k6.onnx failed while running: device lost "
                                        "— captioning goes on on CPU.")]
    assert "on CPU (QNN-HTP failed)" in app.tray.tray.toolTip()
    sid = app.session_id
    _quit(qtbot, app)
    with SessionStore.open(app.paths.sessions_db) as store:
        assert store.get_session(sid).provider == "CPU"  # the history (and doctor) show the provider now used
        assert [w.text for w in store.session_words(sid)] == [f"system{i}" for i in range(10)]
    from captioner import cli

    capsys.readouterr()
    cli.run(["doctor", "--no-verify"], app.paths)
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("Last session:")]
    assert line.startswith(f"Last session: #{sid} started ") and line.endswith("fake-pack on CPU, 10 words")


def _refuse(app, on: bool) -> None:
    app.disk_store._conn.execute(f"PRAGMA query_only = {int(on)}")


def test_a_store_refusing_writes_mid_session_keeps_captions_and_every_word(qtbot, tmp_path):
    app, capture, shown = _app(qtbot, tmp_path, FakeStream())
    app.start()
    app.recorder.retry_interval_s = 0.0
    capture.release(5)
    qtbot.waitUntil(lambda: len(app.store.session_words(app.session_id)) >= 4, timeout=10_000)
    _refuse(app, True)
    capture.release(10)
    qtbot.waitUntil(lambda: "system13" in _words_on_bar(app), timeout=10_000)  # captions go on
    assert [t for t, _m in shown] == ["Transcript not being saved"]  # told once, not per update
    assert "readonly database" in shown[0][1]
    assert app.recorder.held_words >= 9
    _refuse(app, False)
    capture.release(5)
    qtbot.waitUntil(lambda: app.recorder.held_words == 0, timeout=10_000)
    assert [t for t, _m in shown] == ["Transcript not being saved", "Transcript saved again"]
    sid = app.session_id
    _quit(qtbot, app)
    with SessionStore.open(app.paths.sessions_db) as store:
        assert [w.text for w in store.session_words(sid)] == [f"system{i}" for i in range(20)]
        assert store.get_session(sid).ended_at is not None


def test_a_store_still_refusing_at_quit_exports_the_session_where_the_user_is_told(qtbot, tmp_path):
    app, capture, shown = _app(qtbot, tmp_path, FakeStream())
    app.start()
    capture.release(4)
    qtbot.waitUntil(lambda: len(app.store.session_words(app.session_id)) >= 3, timeout=10_000)
    _refuse(app, True)
    capture.release(6)
    qtbot.waitUntil(lambda: "system9" in _words_on_bar(app), timeout=10_000)
    _quit(qtbot, app)
    titles = [t for t, _m in shown]
    assert titles == ["Transcript not being saved", "Transcript saved elsewhere"]
    path = app.recorder.fallback_export
    assert path is not None and str(path) in shown[-1][1]
    assert path.parent == app._export_dir()
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert [w["text"] for w in doc["words"]] == [f"system{i}" for i in range(10)]


def test_a_store_that_cannot_begin_the_session_keeps_it_in_memory_and_exports_it(qtbot, tmp_path):
    app, capture, shown = _app(qtbot, tmp_path, FakeStream())
    _refuse(app, True)  # read-only before the session begins
    app.start()
    assert app.running  # captions start all the same
    assert [t for t, _m in shown] == ["Transcript not being saved"]
    capture.release(6)
    qtbot.waitUntil(lambda: "system5" in _words_on_bar(app), timeout=10_000)
    _quit(qtbot, app)
    assert [t for t, _m in shown] == ["Transcript not being saved", "Transcript saved elsewhere"]
    doc = json.loads(app.recorder.fallback_export.read_text(encoding="utf-8"))
    assert [w["text"] for w in doc["words"]] == [f"system{i}" for i in range(6)]


def test_a_store_that_cannot_be_opened_at_start_keeps_sessions_in_memory_and_exports_each(qtbot, tmp_path):
    """The session store cannot be opened at all (here a folder where the file should be; a full
    disk the same): the app starts, says so once, and every session is written to the export
    folder when it ends; the path is left as it was (nothing renamed aside)."""
    paths = AppPaths.default(tmp_path / "home")
    paths.sessions_db.mkdir(parents=True)
    (paths.sessions_db / "keep").write_text("left alone")
    app, capture, shown = _app(qtbot, tmp_path, FakeStream())
    assert app.disk_store.path is None  # in memory
    app.start()
    assert app.running
    assert [t for t, _m in shown] == ["captioner"]
    assert "cannot open the session store" in shown[0][1] and str(app._export_dir()) in shown[0][1]
    capture.release(6)
    qtbot.waitUntil(lambda: "system5" in _words_on_bar(app), timeout=10_000)
    _quit(qtbot, app)
    assert [t for t, _m in shown] == ["captioner", "Transcript saved elsewhere"]
    path = app.recorder.fallback_export
    assert path is not None and path.parent == app._export_dir() and str(path) in shown[-1][1]
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert [w["text"] for w in doc["words"]] == [f"system{i}" for i in range(6)]
    assert (paths.sessions_db / "keep").read_text() == "left alone"
    assert not list(paths.sessions_db.parent.glob("*.corrupt-*"))


def test_on_a_full_disk_the_history_still_shows_the_sessions_saved_before(qtbot, tmp_path, small_disk):
    """The history's disk filled up before the app started: captions are kept in memory (above), and
    the History window still lists, opens and searches the sessions saved before, read from the file
    as it stands."""
    disk = small_disk.mount("400k")
    home = AppPaths.default(disk / "home")
    sid = saved_session(home.sessions_db, "last week's call", "the budget is approved")
    small_disk.fill(disk)
    app, _capture, _shown = _app(qtbot, disk, FakeStream())
    assert app.disk_store.path is None and any("the disk is full" in w for w in app._startup_warnings)
    app.show_history()
    win = app._history
    qtbot.addWidget(win)
    assert win.session_ids() == [sid] and "the budget is approved" in win.text.toPlainText()
    _quit(qtbot, app)


def test_settings_that_cannot_be_saved_are_told_once_for_the_bar_and_again_for_a_change(qtbot, tmp_path, small_disk):
    """The settings' disk is full (a real file system with no room left): moving the bar tells it
    once, not after every move; a change made in the settings is told each time; after room is
    made, a move saves them again."""
    from PySide6.QtCore import QRect

    app, _capture, shown = _app(qtbot, tmp_path, FakeStream())
    config = small_disk.mount("64k")
    app.paths = dataclasses.replace(app.paths, config=config)
    filler = small_disk.fill(config)
    for x in (10, 20, 30):
        app.bar.geometry_changed.emit(QRect(x, 500, 800, 120))
    assert [t for t, _m in shown] == ["Settings not saved"] and "No space left on device" in shown[0][1]
    app.update_settings(dataclasses.replace(app.settings, captions=dataclasses.replace(app.settings.captions, lines=3)))
    assert [t for t, _m in shown] == ["Settings not saved"] * 2
    filler.unlink()
    app.bar.geometry_changed.emit(QRect(40, 500, 800, 120))
    assert len(shown) == 2 and app.paths.settings_file.is_file()
    saved = json.loads(app.paths.settings_file.read_text(encoding="utf-8"))
    assert saved["captions"]["lines"] == 3 and [40, 500, 800, 120] in saved["window"].values()


def test_the_last_provider_failing_stops_with_a_clear_message_and_the_words_so_far_saved(qtbot, tmp_path):
    from captioner.errors import ProviderError

    class DyingStream(FakeStream):
        """Fails as the engine does when the CPU, the last provider, fails too."""

        def step(self):
            if self.rounds >= 5 and self.fed >= (self.rounds + 1) * BLOCK:
                raise ProviderError("CPU failed while running encoder_3s.onnx and no other execution provider "
                                    "is left: out of memory; restart captioning")
            return super().step()

        def finish(self):
            raise ProviderError("CPU failed while running encoder_3s.onnx and no other execution provider "
                                "is left: out of memory; restart captioning")

    app, capture, shown = _app(qtbot, tmp_path, DyingStream())
    app.start()
    sid = app.session_id
    for i in range(5):  # one block (one round) at a time
        capture.release(1)
        qtbot.waitUntil(lambda i=i: f"system{i}" in _words_on_bar(app), timeout=10_000)
    capture.release(3)
    qtbot.waitUntil(lambda: not app.running, timeout=10_000)  # the worker stopped
    assert shown and all(t == "captioner" and "no other execution provider is left" in m for t, m in shown)
    with SessionStore.open(app.paths.sessions_db) as store:
        info = store.get_session(sid)
        assert info.ended_at is not None  # the session was closed properly
        # every word the bar showed as committed is saved (system4 was still speculative)
        assert [w.text for w in store.session_words(sid)] == [f"system{i}" for i in range(4)]
    _quit(qtbot, app)
