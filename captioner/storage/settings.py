"""The typed settings of captioner: every default in one place, loaded from and saved to JSON.

One frozen :class:`Settings` value, split into sub-configs (:class:`CaptionStyle`,
:class:`AudioConfig`, :class:`EngineConfig`, :class:`TranscriptConfig`), is built once by the app
and handed out by parts (STYLE.md principle 9). Change it with :func:`dataclasses.replace`; every
constructor validates its fields and raises ``ValueError`` naming the field and the valid range.

The file (``AppPaths.settings_file``) is forgiving on the way in and careful on the way out:

* unknown keys are ignored, missing keys take their default;
* an invalid value (wrong type, out of range, not one of the choices) is reset to its default and
  reported as a warning;
* a file that is not a JSON object is renamed to ``settings.json.corrupt-<timestamp>`` (never
  silently overwritten) and the defaults are used, with a warning;
* saving writes a temporary file in the same folder, fsyncs it and ``os.replace``-s it over the
  old one, so a crash leaves either the old or the new file, never half of one; over a file a newer
  captioner wrote, the keys this version does not know (and that schema) are kept.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from captioner.core import CaptureSource, Provider
from captioner.errors import SettingsError
from captioner.storage.atomic import replace_atomically, replace_file
from captioner.storage.paths import aside_path

__all__ = [
    "SCHEMA_VERSION",
    "AudioConfig",
    "CaptionStyle",
    "EngineConfig",
    "Settings",
    "TranscriptConfig",
    "choices",
    "from_dict",
    "limits",
    "load_settings",
    "save_settings",
    "to_dict",
]

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1

_COLOR = re.compile(r"^#[0-9A-Fa-f]{6}$")  # "#RRGGBB"; opacity is a separate field
# Whisper codes: "en", "haw", "yue", "auto", or the languages a person speaks: "en, de" (detected among them)
_LANGUAGE = re.compile(r"^(auto|[a-z]{2,3}(\s*,\s*[a-z]{2,3})*)$")


def _num(default: float, lo: float, hi: float) -> Any:
    """A numeric field with an inclusive range, kept in the field's metadata for validation/UI."""
    return field(default=default, metadata={"range": (lo, hi)})


def _str(default: str, pattern: re.Pattern[str] | None = None, *, nonempty: bool = False,
         max_len: int | None = None) -> Any:
    """A string field, optionally matched against ``pattern``, required to be non-blank or at most
    ``max_len`` characters long."""
    return field(default=default, metadata={"pattern": pattern, "nonempty": nonempty, "max_len": max_len})


def _post_init(obj: Any) -> None:
    """Raise ``ValueError`` for the first invalid field of a settings dataclass."""
    for f in dataclasses.fields(obj):
        problem = _problem(type(obj), f.name, getattr(obj, f.name))
        if problem:
            raise ValueError(f"{type(obj).__name__}.{f.name}: {problem}")


@dataclass(frozen=True, slots=True)
class CaptionStyle:
    """How the caption bar looks and behaves.

    Attributes:
        lines: visible caption lines, 1..6.
        font_family: font family name; "" = the system's default UI font.
        font_size: points, 8..96.
        text_color, background_color: "#RRGGBB".
        background_opacity: 0 (transparent) .. 1 (opaque).
        outline: draw a dark outline around the glyphs.
        dock: "bottom"/"top" of the screen, or "float" where the user put it.
        locked: the bar cannot be moved or resized.
        click_through: mouse input passes through the bar (a tray item switches it back).
        stable_only: hide the drafts of the sentence being spoken (a closed sentence shows, dimmed while a
            second reading may still change it: ``Word.rereadable``).
        min_dwell_s: a line stays at least this long, seconds (0..10).
        clear_after_silence_s: clear the bar after this much silence, seconds; 0 = keep the last
            line (0..600).
        show_source_labels: in "both" mode, label/colour each source.
        mic_color, system_color: text colour per source in "both" mode, "#RRGGBB".
        theme: colours of dialogs and the tray menu.
    """

    lines: int = _num(2, 1, 6)
    font_family: str = ""
    font_size: int = _num(22, 8, 96)
    text_color: str = _str("#FFFFFF", _COLOR)
    background_color: str = _str("#000000", _COLOR)
    background_opacity: float = _num(0.7, 0.0, 1.0)
    outline: bool = True
    dock: Literal["bottom", "top", "float"] = "bottom"
    locked: bool = False
    click_through: bool = False
    stable_only: bool = False
    min_dwell_s: float = _num(1.0, 0.0, 10.0)
    clear_after_silence_s: float = _num(0.0, 0.0, 600.0)
    show_source_labels: bool = True
    mic_color: str = _str("#FFD866", _COLOR)
    system_color: str = _str("#FFFFFF", _COLOR)
    theme: Literal["dark", "light"] = "dark"

    def __post_init__(self) -> None:
        _post_init(self)


@dataclass(frozen=True, slots=True)
class AudioConfig:
    """What to capture.

    Attributes:
        source: "system" (loopback/monitor), "mic", or "both" (kept apart, each word labelled).
        mic_device: input device name; "" = the default input device.
        mix_both: in "both" mode, mix the two into one stream instead of keeping them apart.
    """

    source: CaptureSource = "system"
    mic_device: str = ""
    mix_both: bool = False

    def __post_init__(self) -> None:
        _post_init(self)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Which model runs where, and how the streaming engine is paced.

    Attributes:
        model: pack name or path; "" = the first installed pack.
        provider: "auto" (NPU, then GPU, then CPU), or force one.
        language: Whisper language code ("en", "de", ...) or "auto": detected by a multilingual
            pack (the default), or the languages the user speaks, "en, de": detected among those
            only; an English-only pack always runs as "en".
        task: "transcribe", or "translate" into English (Whisper's own task).
        step_s: seconds of new audio per engine round, 0.5..3.0.
        silence_floor_dbfs: blocks quieter than this in which the speech detector hears no speech
            are not sent to the model, -120..0 dBFS.
        vocabulary: names and terms Whisper is told about (comma- or line-separated; the engine
            parses it: ``engine/vocabulary.py``); "" = none.
    """

    model: str = ""
    provider: Provider = "auto"
    language: str = _str("auto", _LANGUAGE)
    task: Literal["transcribe", "translate"] = "transcribe"
    step_s: float = _num(2.0, 0.5, 3.0)
    silence_floor_dbfs: float = _num(-70.0, -120.0, 0.0)
    vocabulary: str = _str("", max_len=4000)

    def __post_init__(self) -> None:
        _post_init(self)


@dataclass(frozen=True, slots=True)
class TranscriptConfig:
    """Saving sessions and writing subtitle files.

    Attributes:
        save_sessions: record each session in the session store.
        retention_days: delete sessions older than this many days; 0 = keep forever.
        export_dir: folder for exports and live subtitle files; "" = ``AppPaths.exports``.
        live_export: write a subtitle file as cues become final ("none", "srt", "vtt").
        label_mic, label_system: source labels in exports when a session has both sources.
        max_line_chars: characters per subtitle line, 20..80.
        max_lines: lines per subtitle cue, 1..3.
    """

    save_sessions: bool = True
    retention_days: int = _num(0, 0, 36_500)
    export_dir: str = ""
    live_export: Literal["none", "srt", "vtt"] = "none"
    label_mic: str = _str("You", nonempty=True)
    label_system: str = _str("Others", nonempty=True)
    max_line_chars: int = _num(42, 20, 80)
    max_lines: int = _num(2, 1, 3)

    def __post_init__(self) -> None:
        _post_init(self)


@dataclass(frozen=True, slots=True)
class Settings:
    """All settings of the application.

    Attributes:
        schema_version: version of the JSON layout (see :data:`SCHEMA_VERSION`).
        captions, audio, engine, transcripts: the sub-configs.
        window: caption-bar geometry per screen-layout key -> ``(x, y, w, h)`` in logical pixels
            (``w, h > 0``). Treat it as read-only: store a new dict with ``dataclasses.replace``.
            Values are normalised to 4-tuples of int on construction.
    """

    schema_version: int = SCHEMA_VERSION
    captions: CaptionStyle = field(default_factory=CaptionStyle)
    audio: AudioConfig = field(default_factory=AudioConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    transcripts: TranscriptConfig = field(default_factory=TranscriptConfig)
    window: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, cls in _SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"Settings.{name}: must be a {cls.__name__}")
        window: dict[str, tuple[int, int, int, int]] = {}
        for key, rect in dict(self.window).items():
            problem = _rect_problem(key, rect)
            if problem:
                raise ValueError(f"Settings.window[{key!r}]: {problem}")
            window[key] = tuple(int(v) for v in rect)  # type: ignore[assignment]
        object.__setattr__(self, "window", window)


_SECTIONS: dict[str, type] = {
    "captions": CaptionStyle,
    "audio": AudioConfig,
    "engine": EngineConfig,
    "transcripts": TranscriptConfig,
}


def _field(cls: type, name: str) -> dataclasses.Field[Any]:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f
    raise KeyError(f"{cls.__name__} has no field {name!r}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def limits(cls: type, name: str) -> tuple[float, float] | None:
    """The inclusive ``(low, high)`` range of a numeric field (for spin boxes), or None."""
    return _field(cls, name).metadata.get("range")


def choices(cls: type, name: str) -> tuple[str, ...] | None:
    """The allowed values of a closed-choice (``Literal``) field, or None."""
    hint = _hints(cls)[name]
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else None


def _problem(cls: type, name: str, value: Any) -> str | None:
    """Why ``value`` is not valid for field ``name`` of ``cls``; None when it is valid."""
    hint = _hints(cls)[name]
    meta = _field(cls, name).metadata
    if typing.get_origin(hint) is Literal:
        options = typing.get_args(hint)
        return None if value in options else f"{value!r} is not one of {', '.join(map(repr, options))}"
    if hint is bool:
        return None if isinstance(value, bool) else f"{value!r} is not true/false"
    if hint is int or hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{value!r} is not a number"
        if hint is int and not (isinstance(value, int) or float(value).is_integer()):
            return f"{value!r} is not a whole number"
        if not math.isfinite(value):
            return f"{value!r} is not a finite number"
        lo, hi = meta.get("range", (-math.inf, math.inf))
        return None if lo <= value <= hi else f"{value!r} is outside {lo}..{hi}"
    if hint is str:
        if not isinstance(value, str):
            return f"{value!r} is not text"
        pattern = meta.get("pattern")
        if pattern is not None and not pattern.match(value):
            return f"{value!r} does not match {pattern.pattern}"
        if meta.get("nonempty") and not value.strip():
            return "must not be empty"
        if meta.get("max_len") is not None and len(value) > meta["max_len"]:
            return f"is {len(value)} characters long; at most {meta['max_len']} are allowed"
        return None
    raise TypeError(f"no validation for {cls.__name__}.{name}: {hint!r}")  # programming error


def _rect_problem(key: Any, rect: Any) -> str | None:
    if not isinstance(key, str):
        return "the key must be text"
    if not isinstance(rect, list | tuple) or len(rect) != 4:
        return f"{rect!r} is not [x, y, w, h]"
    if any(isinstance(v, bool) or not isinstance(v, int) for v in rect):
        return f"{rect!r} must hold whole numbers"
    if rect[2] <= 0 or rect[3] <= 0:
        return f"{rect!r} has no area"
    return None


def to_dict(settings: Settings) -> dict[str, Any]:
    """The JSON-ready form of ``settings`` (sections as objects, window rects as lists)."""
    out: dict[str, Any] = {"schema_version": settings.schema_version}
    for name in _SECTIONS:
        section = getattr(settings, name)
        out[name] = {f.name: getattr(section, f.name) for f in dataclasses.fields(section)}
    out["window"] = {key: list(rect) for key, rect in settings.window.items()}
    return out


def _section_from(cls: type, data: Any, where: str, warnings: list[str]) -> Any:
    if data is None:
        return cls()
    if not isinstance(data, dict):
        warnings.append(f"settings: {where} is not an object; using its defaults")
        return cls()
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        problem = _problem(cls, f.name, value)
        if problem:
            warnings.append(f"settings: {where}.{f.name}: {problem}; using the default {f.default!r}")
            continue
        if _hints(cls)[f.name] is int:
            value = int(value)
        elif _hints(cls)[f.name] is float:
            value = float(value)
        values[f.name] = value
    return cls(**values)


def from_dict(data: Any) -> tuple[Settings, list[str]]:
    """Build settings from parsed JSON, resetting each invalid value to its default.

    Returns:
        ``(settings, warnings)``: one warning sentence per value that was reset. Unknown keys are
        ignored silently (they may come from a newer or older version).
    """
    warnings: list[str] = []
    if not isinstance(data, dict):
        return Settings(), ["settings: the file does not hold a JSON object; using the defaults"]
    version = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        warnings.append(f"settings: schema_version {version!r} is not valid; reading it as {SCHEMA_VERSION}")
        version = SCHEMA_VERSION
    if version > SCHEMA_VERSION:
        warnings.append(
            f"settings: the file was written by a newer captioner (schema {version}); "
            "keys this version does not know are ignored"
        )
    data = _migrate(data, version)
    sections = {name: _section_from(cls, data.get(name), name, warnings) for name, cls in _SECTIONS.items()}
    window: dict[str, tuple[int, int, int, int]] = {}
    raw_window = data.get("window", {})
    if not isinstance(raw_window, dict):
        warnings.append("settings: window is not an object; forgetting the saved caption-bar positions")
        raw_window = {}
    for key, rect in raw_window.items():
        problem = _rect_problem(key, rect)
        if problem:
            warnings.append(f"settings: window[{key!r}]: {problem}; forgetting that position")
        else:
            window[key] = tuple(rect)  # type: ignore[assignment]
    return Settings(schema_version=SCHEMA_VERSION, window=window, **sections), warnings


# Migrations from schema N to N + 1, applied in order to the parsed JSON (none yet: schema 1).
_MIGRATIONS: tuple[typing.Callable[[dict[str, Any]], dict[str, Any]], ...] = ()


def _migrate(data: dict[str, Any], version: int) -> dict[str, Any]:
    for step in _MIGRATIONS[version - 1 :]:
        data = step(data)
    return data


def _backup_corrupt(path: Path) -> Path:
    """Rename ``path`` aside to ``<name>.corrupt-<UTC timestamp>`` (never overwriting a backup)."""
    target = aside_path(path)
    replace_file(path, target)
    return target


def load_settings(path: Path) -> tuple[Settings, list[str]]:
    """Read the settings file; never raises for a bad file.

    A missing file gives the defaults with no warning. A file that is not valid UTF-8 JSON holding
    an object is renamed aside (``settings.json.corrupt-<timestamp>``) and the defaults are used.

    Returns:
        ``(settings, warnings)``; each warning is one sentence for the log or a notification.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Settings(), []
    except OSError as exc:
        msg = f"settings: cannot read {path} ({exc.strerror or exc}); using the defaults"
        logger.warning("%s", msg)
        return Settings(), [msg]
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("the top level is not a JSON object")
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        try:
            backup = _backup_corrupt(path)
            kept = f"it was kept as {backup.name}"
        except OSError as move_exc:
            kept = f"it could not be renamed aside ({move_exc.strerror or move_exc})"
        msg = f"settings: {path} is not valid settings JSON ({exc}); {kept}; using the defaults"
        logger.warning("%s", msg)
        return Settings(), [msg]
    settings, warnings = from_dict(data)
    for warning in warnings:
        logger.warning("%s", warning)
    return settings, warnings


def _keeping_newer(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """``data`` with what the file at ``path`` holds that this version does not know, where a newer
    captioner wrote it (its schema, its keys, top level and in each section): a change made after
    going back to an older version must not erase the newer one's settings."""
    try:
        old = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return data
    version = old.get("schema_version") if isinstance(old, dict) else None
    if isinstance(version, bool) or not isinstance(version, int) or version <= SCHEMA_VERSION:
        return data
    merged = {**old, **data, "schema_version": version}
    for name, section in data.items():
        if isinstance(section, dict) and isinstance(old.get(name), dict):
            merged[name] = {**old[name], **section}
    return merged


def save_settings(settings: Settings, path: Path) -> None:
    """Write ``settings`` to ``path`` atomically (temp file in the same folder, fsync, replace).

    Raises:
        SettingsError: the folder cannot be created or the file cannot be written; the previous
            file is left as it was.
    """
    path = Path(path)
    text = json.dumps(_keeping_newer(to_dict(settings), path), indent=2, ensure_ascii=False) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        replace_atomically(path, text.encode("utf-8"))
    except OSError as exc:
        raise SettingsError(f"cannot save the settings to {path}: {exc.strerror or exc}") from exc


