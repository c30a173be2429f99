"""Audio capture: system audio (loopback / monitor), the microphone or both, and audio files.

Everything leaving this package is 16 kHz mono float32 in :class:`captioner.core.AudioBlock`
values whose ``start`` is the sample index on the source's audio clock; device trouble is reported
as :class:`captioner.core.AudioEvent` values. No Qt, no engine.
"""

from captioner.audio.backends import BLACKHOLE_MESSAGE, CaptureBackend, OpenedDevice, SystemBackend
from captioner.audio.capture import CAPTURE_SOURCES, AudioCapture, CaptureConfig, CaptureSource
from captioner.audio.devices import DeviceReport, InputDevice, list_devices
from captioner.audio.files import FileSource, load_audio_file
from captioner.audio.resample import Resampler, resample
from captioner.audio.source_capture import CaptureCounters
from captioner.audio.wavfile import WavWriter, read_wav

__all__ = [
    "BLACKHOLE_MESSAGE",
    "CAPTURE_SOURCES",
    "AudioCapture",
    "CaptureBackend",
    "CaptureConfig",
    "CaptureCounters",
    "CaptureSource",
    "DeviceReport",
    "FileSource",
    "InputDevice",
    "OpenedDevice",
    "Resampler",
    "SystemBackend",
    "WavWriter",
    "list_devices",
    "load_audio_file",
    "read_wav",
    "resample",
]
