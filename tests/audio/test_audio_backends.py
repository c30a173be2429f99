"""The platform routes of SystemBackend, at the seam: Windows loopback (soundcard), Linux monitor
(PULSE_SOURCE), macOS, and the messages when a route is unavailable."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np
import pytest
from audio_fakes import FakeSoundDevice, tone

from captioner.audio import AudioCapture, CaptureConfig, SystemBackend, list_devices, pulse
from captioner.errors import AudioDeviceError


class FakeRecorder:
    """soundcard's recorder: ``record(numframes)`` blocks for the block's duration, like WASAPI."""

    def __init__(self, mic: FakeLoopbackMic, samplerate: int, channels: int, blocksize: int) -> None:
        self.mic, self.rate, self.channels = mic, samplerate, channels
        self.frames = 0

    def __enter__(self) -> FakeRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def record(self, numframes: int) -> np.ndarray:
        if self.mic.fail:
            raise RuntimeError("Error 0x88890004: AUDCLNT_E_DEVICE_INVALIDATED")
        time.sleep(numframes / self.rate)  # the fake device's pace
        t = (self.frames + np.arange(numframes)) / self.rate
        self.frames += numframes
        x = (0.4 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
        return np.repeat(x[:, None], self.channels, axis=1)


class FakeLoopbackMic:
    def __init__(self, name: str) -> None:
        self.name, self.channels, self.isloopback, self.fail = name, 2, True, False
        self.recorders: list[tuple[int, int, int]] = []

    def recorder(self, samplerate: int, channels: int, blocksize: int) -> FakeRecorder:
        self.recorders.append((samplerate, channels, blocksize))
        return FakeRecorder(self, samplerate, channels, blocksize)


class FakeSpeaker:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeSoundcard:
    """The soundcard calls the Windows loopback route makes."""

    def __init__(self) -> None:
        self.speaker = FakeSpeaker("Speakers (Realtek)")
        self.calls: list[tuple[str, Any]] = []
        self.mics: list[FakeLoopbackMic] = []

    def default_speaker(self) -> FakeSpeaker:
        return self.speaker

    def get_microphone(self, id: str, include_loopback: bool = False) -> FakeLoopbackMic:
        self.calls.append((id, include_loopback))
        if not include_loopback:
            raise IndexError(f"no microphone with id {id}")
        mic = FakeLoopbackMic(id)
        self.mics.append(mic)
        return mic

    def all_microphones(self, include_loopback: bool = False) -> list[FakeLoopbackMic]:
        return [FakeLoopbackMic(self.speaker.name)] if include_loopback else []


def test_windows_system_audio_is_wasapi_loopback_of_default_speaker() -> None:
    sc = FakeSoundcard()
    cap = AudioCapture(CaptureConfig(source="system"), SystemBackend(soundcard=sc, platform="win32"))
    with cap:
        got = []
        deadline = time.monotonic() + 3
        while sum(len(b.samples) for b in got) < 8000 and time.monotonic() < deadline:
            if (b := cap.read(0.2)) is not None:
                got.append(b)
        assert cap.device_names["system"] == "Speakers (Realtek) (loopback)"
    assert sc.calls == [("Speakers (Realtek)", True)]
    assert sc.mics[0].recorders == [(48_000, 2, 960)]
    audio = np.concatenate([b.samples for b in got])
    assert all(b.source == "system" for b in got) and len(audio) >= 8000
    spec = np.abs(np.fft.rfft(audio[1000:8000]))
    assert abs(np.argmax(spec) * 16_000 / 7000 - 1000) <= 3
    assert not [t for t in threading.enumerate() if t.name == "captioner-loopback"]  # stopped by close


def test_windows_loopback_failure_reopens() -> None:
    sc = FakeSoundcard()
    cap = AudioCapture(CaptureConfig(source="system"), SystemBackend(soundcard=sc, platform="win32"))
    events = []
    with cap:
        t_end = time.monotonic() + 4
        failed = False
        while time.monotonic() < t_end:
            cap.read(0.1)
            events += cap.events()
            if not failed and cap.counters("system").samples > 4000:
                sc.mics[0].fail = True  # the endpoint was invalidated (default device changed)
                failed = True
            if any(e.kind == "device_reopened" for e in events):
                break
    kinds = [e.kind for e in events]
    assert kinds[:2] == ["device_lost", "device_reopened"], kinds
    assert len(sc.mics) == 2


def test_macos_system_audio_says_blackhole() -> None:
    cap = AudioCapture(CaptureConfig(source="system"), SystemBackend(platform="darwin"))
    with pytest.raises(AudioDeviceError, match="BlackHole"):
        cap.start()
    report = list_devices(sounddevice=FakeSoundDeviceList(), platform="darwin")
    assert any("BlackHole" in n for n in report.notes)


def test_linux_monitor_sets_pulse_source_only_while_opening(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PULSE_SOURCE", raising=False)
    seen: dict[str, str | None] = {}

    class RecordingSD(FakeSoundDevice):
        def InputStream(self, device: Any, **kw: Any) -> Any:
            seen[str(device)] = os.environ.get("PULSE_SOURCE")
            return super().InputStream(device, **kw)

    sd = RecordingSD({"pulse": (44_100, 32), "default": (44_100, 32)}, "default", lambda n: tone(500, 44_100, 2))
    backend = SystemBackend(sounddevice=sd, platform="linux", monitor_lookup=lambda: "alsa_output.x.monitor")
    cap = AudioCapture(CaptureConfig(source="both"), backend)
    with cap:
        assert cap.device_names == {"system": "alsa_output.x.monitor", "mic": "default"}
        assert "PULSE_SOURCE" not in os.environ
    assert seen == {"pulse": "alsa_output.x.monitor", "None": None}


def test_no_sound_server_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no pactl
    with pytest.raises(AudioDeviceError, match="PulseAudio or PipeWire"):
        pulse.default_monitor()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # a pactl that finds no server
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("PULSE_SERVER", f"unix:{tmp_path}/nothing")
    if pulse.shutil.which("pactl"):
        with pytest.raises(AudioDeviceError, match="PulseAudio or PipeWire"):
            pulse.default_monitor()


class FakeSoundDeviceList:
    """``query_hostapis``/``query_devices``/``default`` for list_devices."""

    class default:  # mirrors sounddevice.default
        device = (1, 3)

    def query_hostapis(self) -> list[dict[str, Any]]:
        return [{"name": "Windows WASAPI"}]

    def query_devices(self) -> list[dict[str, Any]]:
        return [
            {"name": "Speakers", "hostapi": 0, "max_input_channels": 0, "default_samplerate": 48000.0},
            {"name": "Microphone Array", "hostapi": 0, "max_input_channels": 2, "default_samplerate": 48000.0},
            {"name": "Headset Mic", "hostapi": 0, "max_input_channels": 1, "default_samplerate": 16000.0},
        ]


def test_list_devices_windows() -> None:
    report = list_devices(sounddevice=FakeSoundDeviceList(), soundcard=FakeSoundcard(), platform="win32")
    assert [(d.index, d.name, d.is_default) for d in report.inputs] == [(1, "Microphone Array", True), (2, "Headset Mic", False)]
    assert [(d.name, d.host_api, d.is_default) for d in report.system] == [("Speakers (Realtek)", "WASAPI loopback", True)]
    assert report.notes == ()
