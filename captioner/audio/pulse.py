"""PulseAudio / PipeWire (pipewire-pulse) queries through ``pactl``, for Linux system audio.

System audio on Linux is the *monitor* source of the default sink: everything the machine plays.
PortAudio 19.6/19.7 has no PulseAudio host API, so capture goes through ALSA's ``pulse`` device
with ``PULSE_SOURCE=<sink>.monitor`` (ECOSYSTEM.md §5); this module only finds the names.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from captioner.errors import AudioDeviceError

__all__ = ["PulseSource", "default_monitor", "list_sources", "pactl"]

PACTL_TIMEOUT_S = 5.0
NO_SERVER = (
    "system audio on Linux needs a running PulseAudio or PipeWire (pipewire-pulse) server and "
    "`pactl` (package pulseaudio-utils)"
)


@dataclass(frozen=True, slots=True)
class PulseSource:
    """One PulseAudio source as ``pactl list short sources`` shows it.

    Attributes:
        name: the source name (``alsa_output.pci-0000_00_1f.3.analog-stereo.monitor``).
        spec: the sample spec text (``s16le 2ch 44100Hz``).
        is_monitor: True for the monitor of a sink (system audio).
    """

    name: str
    spec: str
    is_monitor: bool


def pactl(*args: str) -> str:
    """Run ``pactl ARGS`` and return its stdout; :class:`AudioDeviceError` if no server answers."""
    exe = shutil.which("pactl")
    if exe is None:
        raise AudioDeviceError(f"{NO_SERVER}; pactl is not installed")
    try:
        done = subprocess.run(
            [exe, *args], capture_output=True, text=True, timeout=PACTL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AudioDeviceError(f"{NO_SERVER}; `pactl {' '.join(args)}` failed: {exc}") from exc
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        raise AudioDeviceError(f"{NO_SERVER}; `pactl {' '.join(args)}` said: {why}")
    return done.stdout


def list_sources() -> list[PulseSource]:
    """Every source of the running server (monitors included)."""
    out = []
    for line in pactl("list", "short", "sources").splitlines():
        cols = line.split("\t")
        if len(cols) >= 4:
            out.append(PulseSource(cols[1], cols[3], cols[1].endswith(".monitor")))
    return out


def default_monitor() -> str:
    """Name of the monitor source of the current default sink (what the machine is playing)."""
    sink = pactl("get-default-sink").strip()
    names = {s.name for s in list_sources()}
    monitor = f"{sink}.monitor"
    if not sink or monitor not in names:
        monitors = sorted(n for n in names if n.endswith(".monitor"))
        if not monitors:
            raise AudioDeviceError(
                f"no monitor source found for system audio (default sink {sink!r}); "
                "the sound server has no output device"
            )
        monitor = monitors[0]
    return monitor
