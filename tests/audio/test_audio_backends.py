"""The platform routes of SystemBackend, at the seam: Windows loopback (soundcard), Linux monitor
(PULSE_SOURCE), macOS, and the messages when a route is unavailable."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from audio_fakes import FakeSoundDevice, tone

from captioner.audio import AudioCapture, CaptureConfig, SystemBackend, list_devices, pulse
from captioner.audio.backends import LOOPBACK_BUFFER_S
from captioner.errors import AudioDeviceError


class SoundcardRuntimeWarning(RuntimeWarning):
    """soundcard's warning class (soundcard/mediafoundation.py), set to "always" at its import."""


class FakeCom:
    """COM per thread, as Windows keeps it: ``thread()`` initialises the calling thread (balanced
    on exit), ``check()`` fails like a COM call on a thread without COM (CO_E_NOTINITIALIZED)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self.threads: set[str] = set()  # names of the threads that entered COM

    @contextlib.contextmanager
    def thread(self) -> Iterator[None]:
        self._local.depth = getattr(self._local, "depth", 0) + 1
        self.threads.add(threading.current_thread().name)
        try:
            yield
        finally:
            self._local.depth -= 1

    def initialise_this_thread(self) -> None:
        """``CoInitializeEx`` never balanced (soundcard's module-level ``_COMLibrary()``)."""
        self._local.depth = getattr(self._local, "depth", 0) + 1

    def check(self) -> None:
        if not getattr(self._local, "depth", 0):
            raise RuntimeError("Error 0x800401f0")  # CoInitialize has not been called (on this thread)


class FakeRecorder:
    """soundcard's recorder: ``record(numframes)`` blocks for the block's duration, like WASAPI; every
    call is a COM call; a mic set to drop warns of a discontinuity like soundcard's ``_record_chunk``."""

    def __init__(self, mic: FakeLoopbackMic, samplerate: int, channels: int, blocksize: int) -> None:
        self.mic, self.rate, self.channels = mic, samplerate, channels
        self.frames = 0

    def __enter__(self) -> FakeRecorder:
        self.mic.com.check()  # IAudioClient::Start
        return self

    def __exit__(self, *exc: object) -> None:
        self.mic.com.check()  # IAudioClient::Stop and Release

    def record(self, numframes: int) -> np.ndarray:
        self.mic.com.check()
        if self.mic.fail:
            raise RuntimeError("Error 0x88890004: AUDCLNT_E_DEVICE_INVALIDATED")
        if self.mic.drop_every and self.frames and self.frames % (self.mic.drop_every * numframes) == 0:
            warnings.warn("data discontinuity in recording", SoundcardRuntimeWarning, stacklevel=2)
        time.sleep(numframes / self.rate)  # the fake device's pace
        t = (self.frames + np.arange(numframes)) / self.rate
        self.frames += numframes
        x = (0.4 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
        return np.repeat(x[:, None], self.channels, axis=1)


class FakeLoopbackMic:
    def __init__(self, name: str, com: FakeCom) -> None:
        self.name, self.isloopback, self.fail, self.com = name, True, False, com
        self.drop_every = 0  # warn of a discontinuity every N reads (0: never)
        self.recorders: list[tuple[int, int, int]] = []

    @property
    def channels(self) -> int:
        self.com.check()  # soundcard asks the device (IMMDevice::OpenPropertyStore)
        return 2

    def recorder(self, samplerate: int, channels: int, blocksize: int) -> FakeRecorder:
        self.com.check()  # IMMDevice::Activate
        self.recorders.append((samplerate, channels, blocksize))
        return FakeRecorder(self, samplerate, channels, blocksize)


class FakeSpeaker:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeSoundcard:
    """The soundcard calls the Windows loopback route makes. Like the real module, importing it
    (constructing it) initialises COM on the importing thread only, and every call needs COM."""

    def __init__(self) -> None:
        self.com = FakeCom()
        self.com.initialise_this_thread()  # soundcard's module-level _COMLibrary(), on this thread
        self.speaker = FakeSpeaker("Speakers (Realtek)")
        self.calls: list[tuple[str, Any]] = []
        self.mics: list[FakeLoopbackMic] = []
        self.drop_every = 0

    def default_speaker(self) -> FakeSpeaker:
        self.com.check()
        return self.speaker

    def get_microphone(self, id: str, include_loopback: bool = False) -> FakeLoopbackMic:
        self.com.check()
        self.calls.append((id, include_loopback))
        if not include_loopback:
            raise IndexError(f"no microphone with id {id}")
        mic = FakeLoopbackMic(id, self.com)
        mic.drop_every = self.drop_every
        self.mics.append(mic)
        return mic

    def all_microphones(self, include_loopback: bool = False) -> list[FakeLoopbackMic]:
        self.com.check()
        return [FakeLoopbackMic(self.speaker.name, self.com)] if include_loopback else []


def _windows(sc: FakeSoundcard) -> SystemBackend:
    return SystemBackend(soundcard=sc, platform="win32", com=sc.com)


def _read_samples(cap: AudioCapture, n: int, seconds: float = 3.0) -> np.ndarray:
    got = []
    deadline = time.monotonic() + seconds
    while sum(len(b.samples) for b in got) < n and time.monotonic() < deadline:
        if (b := cap.read(0.2)) is not None:
            got.append(b)
    return np.concatenate([b.samples for b in got]) if got else np.zeros(0, np.float32)


def test_windows_system_audio_is_wasapi_loopback_of_default_speaker() -> None:
    sc = FakeSoundcard()
    cap = AudioCapture(CaptureConfig(source="system"), _windows(sc))
    with cap:
        audio = _read_samples(cap, 8000)
        assert cap.device_names["system"] == "Speakers (Realtek) (loopback)"
    assert sc.calls == [("Speakers (Realtek)", True)]
    # the WASAPI buffer is LOOPBACK_BUFFER_S (soundcard: buffer = blocksize / samplerate), reads stay 20 ms
    assert sc.mics[0].recorders == [(48_000, 2, round(48_000 * LOOPBACK_BUFFER_S))] and LOOPBACK_BUFFER_S >= 0.1
    assert len(audio) >= 8000
    spec = np.abs(np.fft.rfft(audio[1000:8000]))
    assert abs(np.argmax(spec) * 16_000 / 7000 - 1000) <= 3
    assert not [t for t in threading.enumerate() if t.name == "captioner-loopback"]  # stopped by close


def test_windows_loopback_failure_reopens() -> None:
    sc = FakeSoundcard()
    cap = AudioCapture(CaptureConfig(source="system"), _windows(sc))
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


def test_windows_loopback_survives_stop_and_restart_on_other_threads() -> None:
    """soundcard initialises COM only on the thread that imported it: the reader thread, and a start
    from another thread (the app's worker), must initialise their own, every time."""
    sc = FakeSoundcard()  # "imported" here, on the test's thread
    for round_ in range(2):  # start, stop, start again: each time from a new thread
        result: dict[str, Any] = {}

        def run(result: dict[str, Any] = result) -> None:
            cap = AudioCapture(CaptureConfig(source="system"), _windows(sc))
            try:
                with cap:
                    result["audio"] = _read_samples(cap, 4000)
                    result["events"] = cap.events()
            except Exception as exc:  # reported to the test's thread
                result["error"] = exc

        worker = threading.Thread(target=run, name=f"captioner-worker-{round_}")
        worker.start()
        worker.join(10)
        assert "error" not in result, result.get("error")
        assert len(result["audio"]) >= 4000, (round_, result.get("events"))
        assert not [e for e in result["events"] if e.kind == "device_lost"], result["events"]
    assert {"captioner-worker-0", "captioner-worker-1", "captioner-loopback"} <= sc.com.threads


def test_windows_loopback_without_com_on_the_reader_fails_like_windows() -> None:
    """The fake is honest: a recorder used on a thread without COM fails as soundcard does there."""
    sc = FakeSoundcard()
    mic = sc.get_microphone("Speakers (Realtek)", include_loopback=True)
    errors: list[BaseException] = []

    def no_com() -> None:
        try:
            with mic.recorder(samplerate=48_000, channels=2, blocksize=960) as rec:
                rec.record(960)
        except RuntimeError as exc:
            errors.append(exc)

    t = threading.Thread(target=no_com)
    t.start()
    t.join(5)
    assert [str(e) for e in errors] == ["Error 0x800401f0"]


def test_windows_loopback_discontinuities_are_counted_as_overflows(caplog: pytest.LogCaptureFixture) -> None:
    sc = FakeSoundcard()
    sc.drop_every = 5  # WASAPI dropped frames before every 5th read
    backend, opened = _windows(sc), []
    real_open = backend.open
    backend.open = lambda *a: opened.append(real_open(*a)) or opened[-1]  # type: ignore[method-assign]
    cap = AudioCapture(CaptureConfig(source="system"), backend)
    with warnings.catch_warnings(record=True) as shown, cap:
        warnings.simplefilter("always", SoundcardRuntimeWarning)  # as soundcard's import does
        _read_samples(cap, 6400)  # 0.4 s: 20 reads of 20 ms
        time.sleep(0.1)
        cap.read(0.1)
        overflows = cap.counters("system").device_overflows
        seen = opened[0].stream.discontinuities
    assert overflows >= 3 and seen >= overflows, (overflows, seen)
    assert not [w for w in shown if "discontinuity" in str(w.message)]  # counted, not printed
    assert sum("data discontinuity" in r.getMessage() for r in caplog.records) == 1  # logged once


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


@pytest.mark.parametrize(("hresult", "balanced"), [(0, True), (1, True), (-2147417850, False)])
def test_windows_com_balances_only_what_it_initialised(hresult: int, balanced: bool) -> None:
    """S_OK and S_FALSE (already initialised in this apartment) are balanced by CoUninitialize;
    RPC_E_CHANGED_MODE (the thread is in Qt's single-threaded apartment) may use COM as it is."""
    from captioner.audio.backends import WindowsCom

    calls: list[str] = []

    class Ole32:
        def CoInitializeEx(self, reserved: object, flags: int) -> int:
            calls.append(f"init {flags}")
            return hresult

        def CoUninitialize(self) -> None:
            calls.append("uninit")

    com = WindowsCom()
    com._ole32 = Ole32()  # ole32 itself exists on Windows only
    with com.thread():
        calls.append("work")
    assert calls == ["init 0", "work", "uninit"] if balanced else ["init 0", "work"]


def test_windows_com_failure_is_an_audio_device_error() -> None:
    from captioner.audio.backends import WindowsCom

    class Ole32:
        def CoInitializeEx(self, reserved: object, flags: int) -> int:
            return -2147024882  # E_OUTOFMEMORY

    com = WindowsCom()
    com._ole32 = Ole32()
    with pytest.raises(AudioDeviceError, match=r"cannot initialise COM for system audio .*8007000E"), com.thread():
        pass
