"""First-run dialog: install with progress, failures explained and retryable, cancel, import."""

from __future__ import annotations

import errno
import threading

from captioner.errors import ModelError
from captioner.ui.first_run import DEFAULT_CHOICE, FirstRunDialog, explain


def never(*_):
    raise AssertionError("not expected to run")


def test_install_reports_progress_and_accepts(qtbot):
    calls = []

    def install(source, progress, cancelled):
        calls.append(source)
        for i in range(5):
            progress(i + 1, 5, f"step {i}")
        return "openai--whisper-base"

    d = FirstRunDialog(install, never)
    qtbot.addWidget(d)
    seen = []
    d.progress.valueChanged.connect(seen.append)
    with qtbot.waitSignal(d.accepted, timeout=5000):
        d.install_button.click()
    assert calls == [DEFAULT_CHOICE]
    assert d.installed == "openai--whisper-base"
    assert 5 in seen or d.progress.value() == d.progress.maximum()


def test_failure_is_explained_and_retry_works(qtbot):
    attempts = []

    def install(source, progress, cancelled):
        attempts.append(source)
        if len(attempts) == 1:
            raise ModelError("downloading openai/whisper-base failed: connection refused")
        return "ok-pack"

    d = FirstRunDialog(install, never)
    qtbot.addWidget(d)
    d.install_button.click()
    qtbot.waitUntil(lambda: not d.busy, timeout=5000)
    assert "internet connection" in d.status.text()
    assert d.install_button.text() == "Retry" and d.install_button.isEnabled()
    assert d.installed is None
    with qtbot.waitSignal(d.accepted, timeout=5000):
        d.install_button.click()
    assert d.installed == "ok-pack"


def test_disk_full_is_explained():
    assert "disk space" in explain(OSError(errno.ENOSPC, "No space left on device"))


def test_cancel_stops_at_the_next_progress_point(qtbot):
    started = threading.Event()
    release = threading.Event()

    def install(source, progress, cancelled):
        started.set()
        release.wait(5)
        progress(1, 10, "building")  # raises Cancelled once the user cancelled
        return "should-not-install"

    d = FirstRunDialog(install, never)
    qtbot.addWidget(d)
    d.install_button.click()
    qtbot.waitUntil(started.is_set, timeout=5000)
    d.cancel()
    release.set()
    qtbot.waitUntil(lambda: not d.busy, timeout=5000)
    assert d.installed is None
    assert "Cancelled" in d.status.text()
    assert d.install_button.isEnabled()


def test_import_a_folder(qtbot, tmp_path):
    got = []

    def import_folder(folder, progress, cancelled):
        got.append(folder)
        progress(1, 1, "copied")
        return "my-pack"

    d = FirstRunDialog(never, import_folder, ask_folder=lambda: str(tmp_path))
    qtbot.addWidget(d)
    with qtbot.waitSignal(d.accepted, timeout=5000):
        d.import_button.click()
    assert got == [str(tmp_path)] and d.installed == "my-pack"


def test_closing_while_busy_cancels_instead(qtbot):
    release = threading.Event()

    def install(source, progress, cancelled):
        release.wait(5)
        progress(1, 2, "x")
        return "nope"

    d = FirstRunDialog(install, never)
    qtbot.addWidget(d)
    d.install_button.click()
    d.reject()
    assert d.busy and d.status.text() == "Cancelling…"  # not closed: cancelling first
    release.set()
    qtbot.waitUntil(lambda: not d.busy, timeout=5000)
    assert d.installed is None
