"""The error hierarchy of captioner.

Every error a user can meet is a :class:`CaptionerError` whose message says what happened and what
to do; the CLI prints it on one line and exits with a non-zero code, the app shows it in a dialog or
a tray message. Low-level exceptions are chained (``raise ... from exc``), never parsed.
"""

from __future__ import annotations

__all__ = [
    "AudioDeviceError",
    "AudioFileError",
    "CaptionerError",
    "ModelError",
    "PackBuildError",
    "ProviderError",
    "SettingsError",
    "StorageError",
]


class CaptionerError(Exception):
    """Base class of every error that captioner reports to the user."""


class ModelError(CaptionerError):
    """A model pack is missing, corrupt (checksum mismatch) or inconsistent with its manifest."""


class PackBuildError(ModelError):
    """A checkpoint could not be turned into a model pack (missing or malformed input file)."""


class ProviderError(CaptionerError):
    """An execution provider (NPU, GPU, CPU) could not be used for a graph."""


class AudioDeviceError(CaptionerError):
    """An audio device could not be opened, or disappeared while capturing."""


class AudioFileError(CaptionerError):
    """An audio file could not be read (missing, empty, not audio, unsupported format)."""


class StorageError(CaptionerError):
    """The session store or an export target could not be written or read."""


class SettingsError(CaptionerError):
    """The settings could not be saved."""
