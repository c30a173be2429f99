"""The real app on a desktop without a system tray (issue 26): Xvfb alone, no tray host.

``captioner --source-file reading.wav --model tiny.en`` as a user types it. Without a tray the log
says so and how to reach the menu; the bar's right click opens the app's menu (driven with real X
input from ``xdotool``: the menu's first item hides the bar); the global shortcut Ctrl+Alt+C (an
``XGrabKey`` on the root window) hides and shows the bar; ``captioner --toggle`` does it from a
second start; the session replayed from a file is titled with the file and keeps its language.
A screenshot of the desktop with the menu open is left in test-artifacts/ui.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from captioner.transcript.store import SessionStore
from tests.ui.conftest import XServer, quit_app, running_xvfb

pytestmark = pytest.mark.gui

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bare_xserver() -> Iterator[XServer]:
    """Xvfb without a tray host (as many Linux desktops are)."""
    with running_xvfb(("xdotool",)) as env:
        yield XServer(env["DISPLAY"], 1280, 800)


def test_without_a_tray_the_bar_has_the_menu_and_shortcuts_show_and_hide_it(bare_xserver, real_tiny_en_pack,
                                                                           tmp_path, artifacts) -> None:
    from tests.commands.conftest import DATA

    clip = DATA / "speech" / "1089-134691-0001.wav"
    home = tmp_path / "home"
    env = bare_xserver.env(CAPTIONER_HOME=str(home), PYTHONPATH=str(REPO))
    log = home / "logs" / "captioner.log"
    proc = subprocess.Popen([sys.executable, "-m", "captioner", "--source-file", str(clip), "--model",
                             str(real_tiny_en_pack.root), "--quit-after", "120"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def logged(text: str) -> bool:
        return text in (log.read_text() if log.exists() else "")

    def wait(check, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline and proc.poll() is None, f"timed out waiting for {what}"
            time.sleep(0.2)  # waiting for another process

    def x(*args: str) -> str:
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=30).stdout

    def bar_visible() -> bool:
        return bool(x("xdotool", "search", "--onlyvisible", "--name", "^captioner$").split())

    try:
        wait(lambda: logged("recording session"), "the session")
        text = log.read_text()
        assert "this desktop has no system tray: right-click the caption bar for the menu" in text, text
        assert ("global shortcuts: Ctrl+Alt+C shows/hides the captions, Ctrl+Alt+P pauses/resumes, "
                "Ctrl+Alt+M marks this moment") in text, text
        wait(bar_visible, "the caption bar")
        (bar,) = x("xdotool", "search", "--onlyvisible", "--name", "^captioner$").split()

        x("xdotool", "key", "ctrl+alt+c")  # the global shortcut, pressed on the root window
        wait(lambda: not bar_visible(), "the shortcut to hide the bar", 10)
        x("xdotool", "key", "ctrl+alt+c")
        wait(bar_visible, "the shortcut to show the bar", 10)
        x("xdotool", "key", "ctrl+alt+m")  # mark this moment, from any window
        wait(lambda: log.read_text().count(": marked ") == 1, "the shortcut to mark this moment", 10)
        second = subprocess.run([sys.executable, "-m", "captioner", "--mark", "action  item"], env=env,
                                capture_output=True, text=True, timeout=60)
        assert "already running: marking this moment" in second.stdout, second.stderr
        wait(lambda: log.read_text().count(": marked ") == 2, "captioner --mark", 10)

        windows = len(x("xwininfo", "-root", "-tree").splitlines())
        x("xdotool", "mousemove", "--window", bar, "60", "20", "click", "3")  # right click on the bar
        wait(lambda: len(x("xwininfo", "-root", "-tree").splitlines()) > windows, "the context menu", 10)
        shot = artifacts / "no-tray-context-menu.png"
        subprocess.run([sys.executable, "-c", "import sys; from PySide6.QtGui import QGuiApplication; "
                        "app = QGuiApplication(sys.argv); app.primaryScreen().grabWindow(0).save(sys.argv[1])",
                        str(shot)], env=env, check=True, timeout=60)
        x("xdotool", "key", "Down", "Return")  # the menu's first item: "Hide captions"
        wait(lambda: not bar_visible(), "the menu's Hide captions", 10)

        second = subprocess.run([sys.executable, "-m", "captioner", "--toggle"], env=env, capture_output=True,
                                text=True, timeout=60)
        assert "already running: showing or hiding its captions" in second.stdout, second.stderr
        wait(bar_visible, "captioner --toggle to show the bar", 10)
        wait(lambda: logged("captioning state: ended"), "the end of the file")
        err = quit_app(proc, env, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    with SessionStore.open(home / "data" / "sessions.sqlite3") as store:
        (info,) = store.list_sessions()
        assert info.title == clip.name and info.language == "en" and info.ended_at is not None
        assert store.session_words(info.id)
        marks = store.session_marks(info.id)
        assert len(marks) == 2 and 0 < marks[0].at <= marks[1].at  # on the session's audio clock
        assert [m.note for m in marks] == ["", "action item"]  # --mark's note, one line


def test_without_a_tray_an_error_is_a_dialog_not_a_message_nobody_sees(bare_xserver, tmp_path) -> None:
    """A tray message needs a tray: without one, "Model problem" (a pack that does not exist) is a
    dialog on screen, and the app goes on (quit from a second start)."""
    home = tmp_path / "home"
    env = bare_xserver.env(CAPTIONER_HOME=str(home), PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "captioner", "--model", str(tmp_path / "no-such-pack"),
                             "--quit-after", "120"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def dialog() -> list[str]:
        return subprocess.run(["xdotool", "search", "--onlyvisible", "--name", "^Model problem$"], env=env,
                              capture_output=True, text=True, timeout=30).stdout.split()

    try:
        deadline = time.monotonic() + 60
        while not dialog():
            assert time.monotonic() < deadline and proc.poll() is None, "no dialog for the model problem"
            time.sleep(0.2)  # waiting for another process
        err = quit_app(proc, env, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Model problem" in err and "no-such-pack" in err  # and in the log on stderr
