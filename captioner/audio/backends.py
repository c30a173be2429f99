"""Device backends: how a source ("mic" or "system") becomes a running input stream.

The seam between capture logic and the operating system. :class:`AudioCapture` asks a
:class:`CaptureBackend` to ``open(source, device, callback, finished_callback)`` and gets an
:class:`OpenedDevice` whose stream calls ``callback(indata, frames, time_info, status)`` with float32
``(frames, channels)`` blocks, exactly like ``sounddevice.InputStream``. Tests pass a fake backend,
or a fake ``sounddevice`` module / ``soundcard`` module to the real backend.

Platforms:
    * microphone: sounddevice (PortAudio) everywhere, any input device by name or index;
    * system audio, Linux: the default sink's monitor through ALSA's ``pulse`` device with
      ``PULSE_SOURCE`` set while the stream is opened (see :func:`_pulse_source`);
    * system audio, Windows: WASAPI loopback of the default speaker through ``soundcard``
      (python-sounddevice's PortAudio 19.7 has none, ECOSYSTEM.md §5); untested on hardware;
    * system audio, macOS: not available without a loopback driver such as BlackHole.

Windows loopback (``soundcard``), three rules its API leaves to the caller:

* COM: soundcard initialises COM once, on the thread that imports it, but Microsoft requires
  ``CoInitializeEx`` "at least once … for each thread that uses the COM library" (a thread without it
  gets CO_E_NOTINITIALIZED, 0x800401F0: bastibe/SoundCard#83). Every thread that calls soundcard here
  (the opener, and the reader thread that owns the recorder) enters :class:`WindowsCom` first
  (multithreaded apartment; a thread already in an apartment, such as Qt's STA main thread, is left as
  it is) and leaves it when done.
* Buffer: soundcard sizes the WASAPI buffer from the recorder's ``blocksize`` (``blocksize /
  samplerate`` seconds); a 20 ms buffer overruns whenever the reader thread waits longer than that
  (the GIL, a busy machine), and the maintainer names too small a block as the cause of "data
  discontinuity" (SoundCard#180). The recorder gets a :data:`LOOPBACK_BUFFER_S` buffer and the
  reader still takes :data:`BLOCK_S` blocks (``record(numframes)`` keeps the rest for the next read).
* Drops: soundcard reports a discontinuity (frames WASAPI dropped) only as a ``SoundcardRuntimeWarning``.
  :class:`SoundcardLoopbackStream` counts those raised on its reader thread and passes a truthy
  ``status`` with the next block, so they reach the ring's overflow count like PortAudio's input
  overflows, and are logged once per stream instead of going to a stderr a windowed app does not have.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from captioner.audio import pulse
from captioner.core import Source
from captioner.errors import AudioDeviceError

__all__ = [
    "BLACKHOLE_MESSAGE",
    "LOOPBACK_BUFFER_S",
    "CaptureBackend",
    "InputStreamLike",
    "OpenedDevice",
    "SoundcardLoopbackStream",
    "SystemBackend",
    "WindowsCom",
]

logger = logging.getLogger(__name__)

BLOCK_S = 0.02  # device block length: 20 ms, small enough for latency, large enough for Python
LOOPBACK_BUFFER_S = 0.2  # WASAPI buffer of the loopback recorder (module docstring): 10 reads of slack
BLACKHOLE_MESSAGE = (
    "system audio on macOS needs a loopback device such as BlackHole "
    "(https://existential.audio/blackhole/): route the output to it and capture it as the "
    "microphone with --source mic --device BlackHole"
)

Callback = Callable[[Any, int, Any, Any], None]

# PULSE_SOURCE is read by libpulse when the ALSA pulse plugin opens its stream, and the
# environment is process-wide: hold this lock while it is set so two opens cannot mix them up.
_PULSE_ENV_LOCK = threading.Lock()


class InputStreamLike(Protocol):
    """What capture needs of a stream: ``sounddevice.InputStream`` satisfies it."""

    @property
    def active(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class OpenedDevice:
    """A device input opened (not started) by a backend: its stream and what it delivers.

    Attributes:
        stream: the stream; it calls the callback once started.
        samplerate: device rate in Hz (capture resamples to 16 kHz).
        channels: channels per frame of ``indata``.
        blocksize: frames per callback (the largest block expected).
        name: human-readable device name for messages and events.
    """

    stream: InputStreamLike
    samplerate: int
    channels: int
    blocksize: int
    name: str


class CaptureBackend(Protocol):
    """Opens device streams for a source; raises :class:`AudioDeviceError` naming the device."""

    def open(
        self, source: Source, device: str | int | None, callback: Callback, finished_callback: Callable[[], None]
    ) -> OpenedDevice: ...


class WindowsCom:
    """COM for the calling thread, as soundcard's calls need it (module docstring).

    ``with com.thread():`` initialises COM on the current thread (``CoInitializeEx``, multithreaded)
    and balances it with ``CoUninitialize`` on exit when this call initialised it (S_OK or S_FALSE);
    a thread already in a single-threaded apartment (RPC_E_CHANGED_MODE) keeps it and may use COM.
    """

    _RPC_E_CHANGED_MODE = -2147417850  # 0x80010106 as a signed HRESULT

    def __init__(self) -> None:
        self._ole32: Any = None

    @contextlib.contextmanager
    def thread(self) -> Iterator[None]:
        """COM initialised on this thread for the block."""
        if self._ole32 is None:
            import ctypes

            self._ole32 = ctypes.WinDLL("ole32")  # type: ignore[attr-defined]  # Windows only
            self._ole32.CoInitializeEx.argtypes = [ctypes.c_void_p, ctypes.c_uint]
            self._ole32.CoInitializeEx.restype = ctypes.c_long
        hr = int(self._ole32.CoInitializeEx(None, 0))  # COINIT_MULTITHREADED
        if hr < 0 and hr != self._RPC_E_CHANGED_MODE:
            raise AudioDeviceError(f"cannot initialise COM for system audio (HRESULT 0x{hr & 0xFFFFFFFF:08X})")
        try:
            yield
        finally:
            if hr >= 0:
                self._ole32.CoUninitialize()


class _NoCom:
    """Where COM does not exist (soundcard's Linux and macOS backends, tests of other platforms)."""

    @contextlib.contextmanager
    def thread(self) -> Iterator[None]:
        yield


class _Discontinuities:
    """Counts soundcard's "data discontinuity" warnings per loopback reader thread.

    ``warnings.showwarning`` is the documented hook for warnings that are shown; soundcard sets its
    warning class to "always", so each discontinuity reaches it. Warnings of other threads, and other
    warnings, go on to the hook that was there before.
    """

    _lock = threading.Lock()
    _local = threading.local()
    _previous: Any = None

    @classmethod
    def install(cls) -> None:
        """Put the hook in place (again, if something replaced it since)."""
        with cls._lock:
            if warnings.showwarning is not cls._show:
                cls._previous = warnings.showwarning
                warnings.showwarning = cls._show  # type: ignore[assignment]
            warnings.filterwarnings("always", message="data discontinuity")

    @classmethod
    def _show(cls, message: Any, category: type[Warning], filename: str, lineno: int,
              file: Any = None, line: str | None = None) -> None:
        if getattr(cls._local, "count", None) is not None and "discontinuity" in str(message):
            cls._local.count += 1
            return
        previous = cls._previous or warnings._showwarning_orig  # type: ignore[attr-defined]
        previous(message, category, filename, lineno, file, line)

    @classmethod
    def start_counting(cls) -> None:
        """Count on the calling thread from now on."""
        cls._local.count = 0

    @classmethod
    def take(cls) -> int:
        """Discontinuities on the calling thread since the last call."""
        n = cls._local.count
        cls._local.count = 0
        return int(n)


class SoundcardLoopbackStream:
    """A soundcard recorder run by a reader thread that only hands blocks to ``callback``.

    soundcard has no callback API, so a daemon thread opens the recorder (COM initialised on that
    thread, a :data:`LOOPBACK_BUFFER_S` WASAPI buffer), calls ``recorder.record(blocksize)`` in a loop
    and passes each block to ``callback`` (which copies it into the bounded ring), with a truthy
    ``status`` when WASAPI dropped frames before it. When the recorder fails (device gone), the thread
    ends and calls ``finished_callback``.
    """

    def __init__(
        self,
        microphone: Any,
        samplerate: int,
        channels: int,
        blocksize: int,
        callback: Callback,
        finished_callback: Callable[[], None],
        com: Any = None,
    ) -> None:
        self._mic, self._rate, self._channels, self._blocksize = microphone, samplerate, channels, blocksize
        self._callback, self._finished = callback, finished_callback
        self._com = com or _NoCom()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._active = False
        self.error: BaseException | None = None
        self.discontinuities = 0  # WASAPI drops seen by this stream

    @property
    def active(self) -> bool:
        """True while the reader thread records."""
        return self._active

    def start(self) -> None:
        """Start the reader thread."""
        self._stop.clear()
        self._active = True
        _Discontinuities.install()
        self._thread = threading.Thread(target=self._run, name="captioner-loopback", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            _Discontinuities.start_counting()
            buffer = max(self._blocksize, round(self._rate * LOOPBACK_BUFFER_S))
            with self._com.thread(), self._mic.recorder(
                samplerate=self._rate, channels=self._channels, blocksize=buffer
            ) as rec:
                while not self._stop.is_set():
                    data = rec.record(numframes=self._blocksize)
                    dropped = _Discontinuities.take()
                    if dropped:
                        if not self.discontinuities:
                            logger.warning("system audio: WASAPI dropped samples (data discontinuity); "
                                           "counted as overflows")
                        self.discontinuities += dropped
                    self._callback(data, len(data), None, dropped or None)
        except Exception as exc:  # any recorder failure means the device is gone for us
            self.error = exc
            logger.warning("loopback recorder stopped: %s", exc)
        finally:
            self._active = False
            self._finished()

    def stop(self) -> None:
        """Ask the reader thread to stop and wait briefly for it."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def close(self) -> None:
        """Stop (idempotent)."""
        self.stop()


@contextlib.contextmanager
def _pulse_source(name: str) -> Iterator[None]:
    """Set ``PULSE_SOURCE=name`` only while a stream is being opened, then restore it.

    NB: set at open time, never at import: the variable is process-global and libpulse reads it
    when the ALSA ``pulse`` plugin opens its stream, so a microphone stream opened later (which
    also goes through ALSA ``default`` → pulse) must not see it.
    """
    with _PULSE_ENV_LOCK:
        old = os.environ.get("PULSE_SOURCE")
        os.environ["PULSE_SOURCE"] = name
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("PULSE_SOURCE", None)
            else:
                os.environ["PULSE_SOURCE"] = old


class SystemBackend:
    """The real backend: sounddevice for microphones and Linux monitors, soundcard on Windows.

    Args:
        sounddevice: the ``sounddevice`` module or a fake with ``query_devices``,
            ``InputStream`` and ``PortAudioError`` (imported lazily by default: importing it
            initialises PortAudio, a side effect that must not happen at import time).
        soundcard: the ``soundcard`` module or a fake (Windows loopback); imported lazily.
        platform: ``sys.platform`` value to behave as.
        monitor_lookup: returns the PulseAudio monitor source name (Linux system audio).
        com: ``thread()`` context manager giving the calling thread COM (:class:`WindowsCom` on
            Windows; nothing elsewhere); a fake's for tests.
    """

    def __init__(
        self,
        sounddevice: Any = None,
        soundcard: Any = None,
        platform: str | None = None,
        monitor_lookup: Callable[[], str] | None = None,
        com: Any = None,
    ) -> None:
        self._sd = sounddevice
        self._sc = soundcard
        self.platform = platform or sys.platform
        self._com = com or (WindowsCom() if sys.platform == "win32" else _NoCom())
        self._monitor_lookup = monitor_lookup or pulse.default_monitor
        self._streams: weakref.WeakSet[Any] = weakref.WeakSet()

    def refresh(self) -> bool:
        """Re-enumerate PortAudio devices (a new default, a device plugged in) when it is safe.

        PortAudio reads its device list once at initialisation, and re-initialising closes every
        stream, so this only happens while none of this backend's PortAudio streams is open.

        Returns:
            True when the device list was refreshed.
        """
        if self._sd is None or any(not getattr(s, "closed", True) for s in self._streams):
            return False
        terminate, initialize = getattr(self._sd, "_terminate", None), getattr(self._sd, "_initialize", None)
        if terminate is None or initialize is None:
            return False
        try:
            terminate()
            initialize()
        except Exception as exc:  # PortAudioError or OSError: keep going with the old list
            logger.warning("could not re-initialise PortAudio: %s", exc)
            return False
        logger.debug("re-initialised PortAudio to refresh the device list")
        return True

    @property
    def sd(self) -> Any:
        """The sounddevice module (imported on first use)."""
        if self._sd is None:
            import sounddevice

            self._sd = sounddevice
        return self._sd

    @property
    def sc(self) -> Any:
        """The soundcard module (imported on first use; on Linux it connects to Pulse at import)."""
        if self._sc is None:
            try:
                import soundcard
            except Exception as exc:  # ImportError, or its own errors when no audio server runs
                raise AudioDeviceError(f"system audio needs the soundcard package: {exc}") from exc
            self._sc = soundcard
        return self._sc

    def open(
        self, source: Source, device: str | int | None, callback: Callback, finished_callback: Callable[[], None]
    ) -> OpenedDevice:
        """Open (not start) a stream for ``source``; see the module docstring for the routes."""
        if source == "mic":
            return self._open_portaudio(device, callback, finished_callback, label="microphone")
        if self.platform.startswith("linux"):
            monitor = self._monitor_lookup()
            with _pulse_source(monitor):
                opened = self._open_portaudio("pulse", callback, finished_callback, label="system audio")
            return OpenedDevice(opened.stream, opened.samplerate, opened.channels, opened.blocksize, monitor)
        if self.platform == "win32":
            return self._open_loopback(callback, finished_callback)
        raise AudioDeviceError(BLACKHOLE_MESSAGE)

    def _open_portaudio(
        self, device: str | int | None, callback: Callback, finished: Callable[[], None], label: str
    ) -> OpenedDevice:
        sd = self.sd
        try:
            try:
                info = sd.query_devices(device, kind="input")
            except ValueError:
                # Maybe plugged in, or the sound server started, after PortAudio listed devices.
                if not self.refresh():
                    raise
                info = sd.query_devices(device, kind="input")
        except (ValueError, sd.PortAudioError) as exc:
            raise AudioDeviceError(
                f"cannot open {label} {device!r}: {exc}; `captioner devices` lists the inputs"
            ) from exc
        rate = int(info["default_samplerate"])
        channels = max(1, min(2, int(info["max_input_channels"])))
        blocksize = max(1, round(rate * BLOCK_S))
        try:
            stream = sd.InputStream(
                device=device,
                samplerate=rate,
                channels=channels,
                dtype="float32",
                blocksize=blocksize,
                callback=callback,
                finished_callback=finished,
            )
        except (ValueError, sd.PortAudioError) as exc:
            raise AudioDeviceError(f"cannot open {label} {info['name']!r}: {exc}") from exc
        self._streams.add(stream)
        return OpenedDevice(stream, rate, channels, blocksize, str(info["name"]))

    def _open_loopback(self, callback: Callback, finished: Callable[[], None]) -> OpenedDevice:
        sc = self.sc
        try:
            with self._com.thread():  # the opener may be any thread (a reopen runs on capture's)
                speaker = sc.default_speaker()
                mic = sc.get_microphone(id=str(speaker.name), include_loopback=True)
                channels = max(1, min(2, int(getattr(mic, "channels", 2))))
        except AudioDeviceError:
            raise
        except Exception as exc:  # soundcard raises plain RuntimeError/IndexError for missing devices
            raise AudioDeviceError(f"cannot open the loopback of the default speaker: {exc}") from exc
        rate = 48_000  # WASAPI shared-mode rate; soundcard converts if the mix format differs
        blocksize = round(rate * BLOCK_S)
        stream = SoundcardLoopbackStream(mic, rate, channels, blocksize, callback, finished, self._com)
        return OpenedDevice(stream, rate, channels, blocksize, f"{speaker.name} (loopback)")
