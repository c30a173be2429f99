"""What can be captured here: input devices, loopback/monitor sources and the defaults.

The ``python -m sounddevice`` idea, plus system-audio sources: PulseAudio/PipeWire monitors on
Linux, WASAPI loopbacks (soundcard) on Windows, and the BlackHole hint on macOS.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from captioner.audio import pulse
from captioner.audio.backends import BLACKHOLE_MESSAGE
from captioner.errors import AudioDeviceError

__all__ = ["DeviceReport", "InputDevice", "list_devices"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class InputDevice:
    """One capture device.

    Attributes:
        index: PortAudio index (-1 for a device outside PortAudio, e.g. a Pulse monitor).
        name: the name to pass as ``--device``.
        host_api: PortAudio host API (``ALSA``, ``Windows WASAPI``...) or ``PulseAudio``/``WASAPI loopback``.
        channels: input channels.
        rate: default sample rate in Hz.
        is_default: the default input (microphone) or the monitor used for system audio.
    """

    index: int
    name: str
    host_api: str
    channels: int
    rate: int
    is_default: bool = False


@dataclass(frozen=True, slots=True)
class DeviceReport:
    """Inputs, system-audio sources and notes (why system audio is unavailable, etc.)."""

    inputs: tuple[InputDevice, ...] = ()
    system: tuple[InputDevice, ...] = ()
    notes: tuple[str, ...] = field(default=())


def list_devices(sounddevice: Any = None, soundcard: Any = None, platform: str | None = None) -> DeviceReport:
    """Query the devices (the modules are injectable for tests; imported lazily by default)."""
    platform = platform or sys.platform
    notes: list[str] = []
    inputs: list[InputDevice] = []
    try:
        sd = sounddevice
        if sd is None:
            import sounddevice as sd_module

            sd = sd_module
        apis = [a["name"] for a in sd.query_hostapis()]
        try:
            default_in = int(sd.default.device[0])
        except (TypeError, ValueError, IndexError):
            default_in = -1
        for i, d in enumerate(sd.query_devices()):
            if d["max_input_channels"] > 0:
                inputs.append(
                    InputDevice(i, d["name"], apis[d["hostapi"]], d["max_input_channels"], int(d["default_samplerate"]), i == default_in)
                )
    except Exception as exc:  # OSError (no PortAudio library) or PortAudioError
        notes.append(f"cannot list microphones: {exc}")
    system: list[InputDevice] = []
    if platform.startswith("linux"):
        try:
            monitor = pulse.default_monitor()
            for s in pulse.list_sources():
                if s.is_monitor:
                    system.append(InputDevice(-1, s.name, "PulseAudio", 2, _rate_of(s.spec), s.name == monitor))
        except AudioDeviceError as exc:
            notes.append(str(exc))
    elif platform == "win32":
        try:
            sc = soundcard
            if sc is None:
                import soundcard as sc_module

                sc = sc_module
            speaker = sc.default_speaker().name
            for m in sc.all_microphones(include_loopback=True):
                if getattr(m, "isloopback", False):
                    system.append(InputDevice(-1, m.name, "WASAPI loopback", m.channels, 48_000, m.name == speaker))
        except Exception as exc:  # soundcard raises plain errors when no output device exists
            notes.append(f"cannot list loopback devices: {exc}")
    else:
        notes.append(BLACKHOLE_MESSAGE)
    return DeviceReport(tuple(inputs), tuple(system), tuple(notes))


def _rate_of(spec: str) -> int:
    for word in spec.split():
        if word.endswith("Hz") and word[:-2].isdigit():
            return int(word[:-2])
    return 0
