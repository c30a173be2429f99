"""UI test fixtures: widgets on Qt's offscreen platform; a real X server (Xvfb) and tray host (trayer).

Widget tests run with ``QT_QPA_PLATFORM=offscreen`` (no display needed). The ``xserver`` fixture
starts ``Xvfb`` on a free display and ``trayer`` as the system-tray host (XEmbed, no D-Bus), for
the tests that run the real app in a subprocess on the ``xcb`` platform (ECOSYSTEM.md §4).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

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


def _stderr_of(log: IO[bytes]) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-2000:]


def _start_xvfb(log: IO[bytes]) -> tuple[subprocess.Popen, str]:
    """Xvfb on a display number it picks itself (``-displayfd``), so that no other X server (nor one
    that holds only an abstract socket and no lock file) can answer in its place; returns the
    process and ``":N"`` once the server accepts connections: it writes N only then."""
    read_end, write_end = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(write_end), "-screen", "0", "1280x800x24",
                             "-nolisten", "tcp"], pass_fds=(write_end,),
                            stdout=subprocess.DEVNULL, stderr=log)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as ready:
        up = select.select([ready], [], [], 60)[0]
        number = ready.readline().strip() if up else b""  # b"" also when Xvfb exited (EOF)
    if not number:
        xvfb.kill()
        raise RuntimeError(f"Xvfb did not start (exit {xvfb.wait(10)}): {_stderr_of(log)}")
    return xvfb, f":{number.decode()}"


@contextlib.contextmanager
def running_xvfb(tools: tuple[str, ...] = ()) -> Iterator[dict[str, str]]:
    """Xvfb (1280x800x24) on a free display until the block ends; yields the environment that uses
    it. Skips the test with a reason when Xvfb, xwininfo or one of ``tools`` is not installed."""
    missing = [tool for tool in ("Xvfb", "xwininfo", *tools) if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (scripts/setup --dev installs them)")
    with tempfile.TemporaryFile() as log:
        xvfb, display = _start_xvfb(log)
        try:
            yield {**os.environ, "DISPLAY": display}
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
        tray = _start_trayer(env)
        try:
            yield XServer(env["DISPLAY"], 1280, 800)
        finally:
            tray.terminate()
            tray.wait(10)


def _start_trayer(env: dict[str, str], attempts: int = 3) -> subprocess.Popen:
    """trayer as the tray host, once its ``panel`` window is on the display. A trayer that exits, or
    shows no panel within 30 s, is started again (``attempts`` in all); the error quotes its stderr."""
    tried = ""
    for _ in range(attempts):
        with tempfile.TemporaryFile() as log:
            tray = subprocess.Popen(["trayer", "--edge", "top", "--align", "right", "--widthtype",
                                     "request", "--height", "24", "--SetDockType", "true"],
                                    env=env, stdout=subprocess.DEVNULL, stderr=log)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and tray.poll() is None:
                tree = subprocess.run(["xwininfo", "-root", "-tree"], env=env, capture_output=True).stdout
                if b"panel" in tree:
                    return tray  # the file stays open for trayer after the block closes our handle
                time.sleep(0.1)  # waiting for an external process to come up; no Qt event loop here
            tray.kill()
            tried += f"\n[exit {tray.wait(10)}] {_stderr_of(log)}"
    raise RuntimeError(f"trayer showed no panel on {env['DISPLAY']} in {attempts} tries:{tried}")


@pytest.fixture(autouse=True)
def _qt_application(qapp):
    """Every UI test gets the (offscreen) QApplication, also those that do not need qtbot."""
    return qapp
