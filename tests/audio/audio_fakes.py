"""Fake devices for the capture unit tests (one layer only: no PortAudio, no sound server).

* :class:`ManualStream` calls the callback synchronously when the test says so (``push``), as fast
  as possible, for overflow and allocation tests.
* :class:`PacedStream` runs a thread that delivers blocks at the device's real pace (it is the
  fake *device*, so it may sleep), for device-loss and "both" tests.
* :class:`FakeSoundDevice` mimics the parts of the ``sounddevice`` module that
  :class:`~captioner.audio.backends.SystemBackend` uses, and raises the real
  ``sounddevice.PortAudioError`` the way PortAudio does when a device vanishes.
* :class:`FakeBackend` is a :class:`~captioner.audio.backends.CaptureBackend` over any of them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import sounddevice

from captioner.audio.backends import OpenedDevice

Signal = Callable[[int, int], np.ndarray]  # (first frame, frames) -> (frames, channels) float32


def tone(freq: float, rate: int, channels: int = 1, amp: float = 0.5) -> Signal:
    """A sine at ``freq`` Hz, continuous across blocks."""

    def make(first: int, frames: int) -> np.ndarray:
        t = (first + np.arange(frames)) / rate
        x = (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)
        return np.repeat(x[:, None], channels, axis=1)

    return make


def click_at(seconds_after: float, rate: int, channels: int, t0_box: list[float], width: int = 8) -> Signal:
    """Silence with a full-scale click ``seconds_after`` the shared wall-clock instant ``t0_box[0]``.

    The stream converts wall time to its own frame index when it first runs, so two streams that
    start at different moments still click at the same instant.
    """
    state: dict[str, int] = {}

    def make(first: int, frames: int) -> np.ndarray:
        if "at" not in state:
            # first block ends now: frame index 'first + frames' is 'now'
            now_frame = first + frames
            state["at"] = now_frame + round((t0_box[0] + seconds_after - time.monotonic()) * rate)
        x = np.zeros((frames, channels), dtype=np.float32)
        lo, hi = max(first, state["at"]), min(first + frames, state["at"] + width)
        if hi > lo:
            x[lo - first : hi - first] = 0.9
        return x

    return make


class ManualStream:
    """A stream whose callback runs when the test calls :meth:`push`."""

    def __init__(self, rate: int, channels: int, blocksize: int, callback: Any, finished: Any, signal: Signal) -> None:
        self.rate, self.channels, self.blocksize = rate, channels, blocksize
        self.callback, self.finished, self.signal = callback, finished, signal
        self.frames = 0
        self.delivered: list[np.ndarray] = []
        self._active = False
        self.closed = False

    @property
    def active(self) -> bool:
        return self._active

    def start(self) -> None:
        self._active = True

    def stop(self) -> None:
        self._active = False

    def close(self) -> None:
        self._active = False
        self.closed = True

    def push(self, blocks: int = 1) -> None:
        for _ in range(blocks):
            x = self.signal(self.frames, self.blocksize)
            self.delivered.append(x)
            self.callback(x, self.blocksize, None, None)
            self.frames += self.blocksize


class PacedStream(ManualStream):
    """A stream whose own thread delivers one block per block duration (a device in real time).

    ``vanish(raise_on_active=True, call_finished=False)`` makes it behave like a device pulled out:
    no more callbacks, and ``active`` raises ``sounddevice.PortAudioError`` (or ``finished`` is
    called, as PortAudio's stream-finished callback would be).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop = threading.Event()
        self._gone = False
        self._thread: threading.Thread | None = None
        self.lock = threading.Lock()

    @property
    def active(self) -> bool:
        if self._gone:
            raise sounddevice.PortAudioError("Error querying stream state: Device unavailable", -9985)
        return self._active

    def start(self) -> None:
        self._active = True
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = self.blocksize / self.rate
        due = time.monotonic() + period
        while not self._stop.is_set():
            delay = due - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                break
            with self.lock:
                if self._stop.is_set():
                    break
                self.push(1)
            due += period

    def vanish(self, call_finished: bool = False) -> None:
        with self.lock:
            self._stop.set()
            self._gone = True
        if call_finished:
            self.finished()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        if self._gone:
            raise sounddevice.PortAudioError("Error stopping stream: Unanticipated host error", -9999)
        self._active = False

    def close(self) -> None:
        self.stop()
        self.closed = True


class FakeBackend:
    """Opens ``make(source, device, callback, finished)`` streams; records every stream it made."""

    def __init__(self, rates: dict[str, int], channels: dict[str, int], signals: dict[str, Signal], paced: bool = True) -> None:
        self.rates, self.channels, self.signals, self.paced = rates, channels, signals, paced
        self.streams: dict[str, list[ManualStream]] = {"mic": [], "system": []}

    def open(self, source: str, device: Any, callback: Any, finished: Any) -> OpenedDevice:
        rate = self.rates[source]
        blocksize = round(rate * 0.02)
        cls = PacedStream if self.paced else ManualStream
        s = cls(rate, self.channels[source], blocksize, callback, finished, self.signals[source])
        self.streams[source].append(s)
        return OpenedDevice(s, rate, s.channels, blocksize, f"fake {source} {len(self.streams[source])}")


class FakeSoundDevice:
    """The ``sounddevice`` surface SystemBackend uses: ``query_devices``, ``InputStream``, errors.

    Devices are names mapped to (rate, channels); ``None`` means the current ``default``.
    ``remove(name)`` unplugs one: its running streams vanish and opening it fails like PortAudio.
    """

    PortAudioError = sounddevice.PortAudioError

    def __init__(self, devices: dict[str, tuple[int, int]], default: str, signal_for: Callable[[str], Signal]) -> None:
        self.devices, self.default, self.signal_for = dict(devices), default, signal_for
        self.streams: list[tuple[str, PacedStream]] = []
        self.opened: list[str] = []

    def query_devices(self, device: Any = None, kind: str | None = None) -> dict[str, Any]:
        name = self.default if device is None else device
        if name not in self.devices:
            raise ValueError(f"No input device matching {name!r}")
        rate, ch = self.devices[name]
        return {"name": name, "default_samplerate": float(rate), "max_input_channels": ch}

    def InputStream(self, device: Any, samplerate: int, channels: int, dtype: str, blocksize: int, callback: Any, finished_callback: Any) -> PacedStream:
        name = self.default if device is None else device
        if name not in self.devices:
            raise sounddevice.PortAudioError("Error opening InputStream: Device unavailable [PaErrorCode -9985]", -9985)
        s = PacedStream(int(samplerate), channels, blocksize, callback, finished_callback, self.signal_for(name))
        self.streams.append((name, s))
        self.opened.append(name)
        return s

    def remove(self, name: str, call_finished: bool = False, new_default: str | None = None) -> None:
        del self.devices[name]
        if new_default is not None:
            self.default = new_default
        for n, s in self.streams:
            if n == name:
                s.vanish(call_finished)
