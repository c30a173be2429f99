"""A real PulseAudio server for the capture tests, started once per session.

Two null sinks: ``testsink`` (the default sink: its monitor is "system audio") and ``micsink``,
whose monitor is remapped into the virtual source ``virtmic`` (the default source: "the
microphone"). Signals played with ``paplay`` into a sink reach captioner only through the server,
exactly as they would on a desktop. Runs as root in a container (ECOSYSTEM.md §5).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class PulseServer:
    """A running server: ``env`` reaches it (pass it to every subprocess)."""

    env: dict[str, str]
    runtime: Path
    log: Path

    def pactl(self, *args: str) -> str:
        return subprocess.run(["pactl", *args], env=self.env, capture_output=True, text=True, check=True, timeout=10).stdout


def _require_tools() -> None:
    for tool in ("pulseaudio", "pactl", "paplay"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/setup --dev installs pulseaudio and pulseaudio-utils)")


def server_env(runtime: Path) -> dict[str, str]:
    """Environment that reaches the server whose runtime directory is ``runtime``."""
    env = dict(os.environ)
    env.update(
        XDG_RUNTIME_DIR=str(runtime),
        HOME=str(runtime),  # the server keeps its cookie and state here, not in the real home
        PULSE_SERVER=f"unix:{runtime}/pulse/native",
        CAPTIONER_HOME=str(runtime / "captioner"),
    )
    env.pop("PULSE_SOURCE", None)
    env.pop("PULSE_SINK", None)
    return env


def start_pulse(runtime: Path) -> tuple[subprocess.Popen[bytes], PulseServer]:
    """Start ``pulseaudio`` on ``runtime`` with the two null sinks; returns once ``pactl`` answers."""
    env = server_env(runtime)
    log = runtime / "pulseaudio.log"
    cmd = [
        "pulseaudio", "-n", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no",
        "--log-target=stderr", "--log-level=notice",
        "--load=module-native-protocol-unix auth-anonymous=1",
        "--load=module-null-sink sink_name=testsink rate=48000",
        "--load=module-null-sink sink_name=micsink rate=44100",
        "--load=module-remap-source master=micsink.monitor source_name=virtmic",
    ]  # fmt: skip
    with log.open("ab") as log_file:
        proc = subprocess.Popen(cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    server = PulseServer(env, runtime, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while subprocess.run(["pactl", "info"], env=env, capture_output=True, timeout=5).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"pulseaudio did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)  # waiting for an external server to come up; no event to block on
        server.pactl("set-default-sink", "testsink")
        server.pactl("set-default-source", "virtmic")
    except BaseException:
        stop_pulse(proc)
        raise
    return proc, server


def stop_pulse(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server started by :func:`start_pulse` (kill it if it does not exit in 5 s)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture(scope="session")
def pulse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseServer]:
    """A server shared by the session; skips only if PulseAudio is not installed."""
    _require_tools()
    proc, server = start_pulse(tmp_path_factory.mktemp("pulse"))
    try:
        yield server
    finally:
        stop_pulse(proc)


@pytest.fixture
def private_pulse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[subprocess.Popen[bytes]], PulseServer]]:
    """A server of the test's own (it may kill and restart it); every process started is stopped."""
    _require_tools()
    procs: list[subprocess.Popen[bytes]] = []
    proc, server = start_pulse(tmp_path_factory.mktemp("pulse-private"))
    procs.append(proc)
    try:
        yield procs, server
    finally:
        for p in procs:
            stop_pulse(p)
