"""UI test fixtures: widgets on Qt's offscreen platform; a real X server (Xvfb) and tray host (trayer).

Widget tests run with ``QT_QPA_PLATFORM=offscreen`` (no display needed). The ``xserver`` fixture
starts ``Xvfb`` on a free display and ``trayer`` as the system-tray host (XEmbed, no D-Bus), for
the tests that run the real app in a subprocess on the ``xcb`` platform (ECOSYSTEM.md §4).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before pytest-qt creates the QApplication

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "ui"


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Folder for screenshots the UI tests leave for people to look at."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@dataclass(frozen=True)
class XServer:
    """A running Xvfb display with a tray host."""

    display: str
    width: int
    height: int

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a child process that should use this display with the xcb platform."""
        env = dict(os.environ)
        env.update(DISPLAY=self.display, QT_QPA_PLATFORM="xcb", **extra)
        env.pop("WAYLAND_DISPLAY", None)
        env.pop("DBUS_SESSION_BUS_ADDRESS", None)  # XEmbed tray, not StatusNotifier over D-Bus
        return env


def _free_display() -> int:
    for n in range(90, 200):
        if not Path(f"/tmp/.X{n}-lock").exists() and not Path(f"/tmp/.X11-unix/X{n}").exists():
            return n
    raise RuntimeError("no free X display number between :90 and :199")


def _wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)  # waiting for an external process to come up; no Qt event loop here
    raise RuntimeError(f"timed out waiting for {what}")


@contextlib.contextmanager
def running_xvfb(tools: tuple[str, ...] = ()) -> Iterator[dict[str, str]]:
    """Xvfb (1280x800x24) on a free display until the block ends; yields the environment that uses
    it. Skips the test with a reason when Xvfb, xwininfo or one of ``tools`` is not installed."""
    missing = [tool for tool in ("Xvfb", "xwininfo", *tools) if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/setup --dev installs them)")
    display = f":{_free_display()}"
    xvfb = subprocess.Popen(["Xvfb", display, "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {**os.environ, "DISPLAY": display}
    try:
        _wait_for(lambda: subprocess.run(["xwininfo", "-root"], env=env, capture_output=True).returncode == 0,
                  20, "Xvfb")
        yield env
    finally:
        xvfb.terminate()
        xvfb.wait(10)


def quit_app(proc: subprocess.Popen, env: dict[str, str], timeout: float = 120) -> str:
    """Ask the running app to quit from a second start (``captioner --quit``) and wait for it; returns
    its stderr. A test that fails before this kills it (``finally``) instead."""
    stop = subprocess.run([sys.executable, "-m", "captioner", "--quit"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert "asked it to quit" in stop.stdout, stop.stderr
    _, err = proc.communicate(timeout=timeout)
    return err


@pytest.fixture(scope="session")
def xserver() -> Iterator[XServer]:
    """Xvfb (1280x800x24) plus trayer; skipped with a reason where they are not installed."""
    with running_xvfb(("trayer",)) as env:
        display = env["DISPLAY"]
        tray = subprocess.Popen(["trayer", "--edge", "top", "--align", "right", "--widthtype", "request",
                                 "--height", "24", "--SetDockType", "true"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_for(lambda: b"panel" in subprocess.run(["xwininfo", "-root", "-tree"], env=env,
                                                         capture_output=True).stdout, 20, "trayer")
            yield XServer(display, 1280, 800)
        finally:
            tray.terminate()
            tray.wait(10)


@pytest.fixture(autouse=True)
def _qt_application(qapp):
    """Every UI test gets the (offscreen) QApplication, also those that do not need qtbot."""
    return qapp
