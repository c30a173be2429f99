"""Settings: defaults in one place, validation that resets bad values, atomic save, corrupt-file backup."""

from __future__ import annotations

import dataclasses
import json
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from captioner.errors import SettingsError
from captioner.storage import atomic
from captioner.storage.paths import AppPaths
from captioner.storage.settings import (
    AudioConfig,
    CaptionStyle,
    EngineConfig,
    Settings,
    TranscriptConfig,
    choices,
    from_dict,
    limits,
    load_settings,
    save_settings,
    to_dict,
)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return AppPaths.default(tmp_path).settings_file


def test_defaults_are_the_documented_ones() -> None:
    s = Settings()
    assert s.schema_version == 1
    assert (s.captions.lines, s.captions.font_size, s.captions.dock) == (2, 22, "bottom")
    assert s.captions.background_opacity == 0.7 and s.captions.mic_color == "#FFD866"
    assert (s.audio.source, s.engine.provider, s.engine.language, s.engine.step_s) == (
        "system",
        "auto",
        "auto",
        2.0,
    )
    assert s.transcripts.label_mic == "You" and s.transcripts.label_system == "Others"
    assert (s.transcripts.max_line_chars, s.transcripts.max_lines, s.transcripts.live_export) == (
        42,
        2,
        "none",
    )
    assert s.window == {}
    assert s.engine.vocabulary == ""  # no vocabulary: the engine decodes exactly as without the feature


def test_missing_file_gives_defaults_without_warning(path: Path) -> None:
    assert load_settings(path) == (Settings(), [])
    assert not path.exists()  # loading never writes


def test_round_trip_through_the_file(path: Path) -> None:
    s = Settings(
        captions=CaptionStyle(lines=4, font_family="Noto Sans", dock="float", text_color="#ABCDEF"),
        audio=AudioConfig(source="both", mic_device="USB Mic"),
        engine=EngineConfig(language="auto", task="translate", step_s=0.5, provider="cpu"),
        transcripts=TranscriptConfig(retention_days=30, live_export="vtt", label_mic="Ich"),
        window={"1920x1080@0,0": (10, -20, 800, 120)},
    )
    save_settings(s, path)
    loaded, warnings = load_settings(path)
    assert warnings == []
    assert loaded == s
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text(encoding="utf-8"))["window"] == {"1920x1080@0,0": [10, -20, 800, 120]}


def test_unknown_and_missing_keys(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps({"captions": {"lines": 3, "future_knob": 1}, "plugins": [1, 2]}), encoding="utf-8"
    )
    loaded, warnings = load_settings(path)
    assert warnings == []
    assert loaded == dataclasses.replace(Settings(), captions=CaptionStyle(lines=3))


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("captions", "lines", 0),
        ("captions", "lines", 7),
        ("captions", "lines", "2"),
        ("captions", "lines", True),
        ("captions", "font_size", 2.5),
        ("captions", "background_opacity", 1.5),
        ("captions", "text_color", "white"),
        ("captions", "dock", "left"),
        ("captions", "outline", "yes"),
        ("audio", "source", "speakers"),
        ("engine", "step_s", 0.1),
        ("engine", "language", "English"),
        ("engine", "provider", "npu"),
        ("engine", "vocabulary", "x, " * 1400),
        ("engine", "vocabulary", ["Gutenberg"]),
        ("transcripts", "retention_days", -1),
        ("transcripts", "label_mic", "  "),
        ("transcripts", "live_export", None),
    ],
)
def test_invalid_value_resets_to_default_with_warning(section: str, key: str, value: object) -> None:
    data = {section: {key: value, **({"lines": 5} if section == "captions" and key != "lines" else {})}}
    loaded, warnings = from_dict(data)
    assert len(warnings) == 1 and f"{section}.{key}" in warnings[0] and "default" in warnings[0]
    default = getattr(getattr(Settings(), section), key)
    assert getattr(getattr(loaded, section), key) == default
    if section == "captions" and key != "lines":
        assert loaded.captions.lines == 5  # the valid neighbour is kept


def test_whole_numbers_and_ints_for_floats_are_accepted() -> None:
    loaded, warnings = from_dict({"captions": {"font_size": 30.0, "min_dwell_s": 2}})
    assert warnings == []
    assert loaded.captions.font_size == 30 and isinstance(loaded.captions.font_size, int)
    assert loaded.captions.min_dwell_s == 2.0 and isinstance(loaded.captions.min_dwell_s, float)


def test_bad_sections_and_window_entries() -> None:
    loaded, warnings = from_dict(
        {"audio": [1], "window": {"ok": [0, 0, 10, 10], "flat": [0, 0, 10, 0], "x": "y"}}
    )
    assert loaded.audio == AudioConfig()
    assert loaded.window == {"ok": (0, 0, 10, 10)}
    assert len(warnings) == 3


def test_newer_schema_warns_but_keeps_known_values() -> None:
    loaded, warnings = from_dict({"schema_version": 99, "captions": {"lines": 3}})
    assert loaded.captions.lines == 3 and loaded.schema_version == 1
    assert any("newer" in w for w in warnings)


def test_saving_over_a_newer_versions_file_keeps_what_this_version_does_not_know(path: Path) -> None:
    """Back on an older captioner, a change made in the settings must not erase the newer one's:
    its schema, its sections and its keys in our sections stay; ours take the change. A file of
    this version's own schema is written as ever (an unknown key there is not kept)."""
    newer = {"schema_version": 99, "captions": {"lines": 3, "karaoke": True}, "sync": {"cloud": "off"}}
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(newer), encoding="utf-8")
    loaded, _ = load_settings(path)
    save_settings(dataclasses.replace(loaded, captions=dataclasses.replace(loaded.captions, lines=2)), path)
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["schema_version"] == 99 and written["sync"] == {"cloud": "off"}
    assert written["captions"]["karaoke"] is True and written["captions"]["lines"] == 2
    assert load_settings(path)[0].captions.lines == 2
    path.write_text(json.dumps({"schema_version": 1, "captions": {"karaoke": True}}), encoding="utf-8")
    save_settings(load_settings(path)[0], path)
    written = json.loads(path.read_text(encoding="utf-8"))
    assert written["schema_version"] == 1 and "karaoke" not in written["captions"]


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2, 3]", b"\xff\xfe garbage", b""])
def test_corrupt_file_is_backed_up_and_defaults_used(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    loaded, warnings = load_settings(path)
    assert loaded == Settings()
    assert len(warnings) == 1 and "kept as settings.json.corrupt-" in warnings[0]
    backups = list(path.parent.glob("settings.json.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == content
    assert not path.exists()
    # a later save does not touch the backup, and a second corrupt file gets its own backup name
    save_settings(Settings(), path)
    path.write_bytes(content)
    load_settings(path)
    assert sorted(b.read_bytes() for b in path.parent.glob("settings.json.corrupt-*")) == [content, content]


def test_replace_validates() -> None:
    style = CaptionStyle()
    assert dataclasses.replace(style, lines=6).lines == 6
    with pytest.raises(ValueError, match=r"CaptionStyle.lines: 9 is outside 1..6"):
        dataclasses.replace(style, lines=9)
    with pytest.raises(ValueError, match="window"):
        dataclasses.replace(Settings(), window={"k": [1, 2, 3]})
    with pytest.raises(dataclasses.FrozenInstanceError):
        style.lines = 3  # type: ignore[misc]


def test_limits_and_choices_for_the_ui() -> None:
    assert limits(CaptionStyle, "font_size") == (8, 96)
    assert limits(EngineConfig, "step_s") == (0.5, 3.0)
    assert limits(CaptionStyle, "outline") is None
    assert choices(AudioConfig, "source") == ("system", "mic", "both")
    assert choices(CaptionStyle, "font_family") is None


def test_save_failure_raises_and_keeps_the_old_file(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save_settings(Settings(), path)
    before = path.read_bytes()

    def fail_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", fail_fsync)
    with pytest.raises(SettingsError, match="No space left on device"):
        save_settings(dataclasses.replace(Settings(), captions=CaptionStyle(lines=5)), path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["settings.json"]  # no temp file left


def test_save_into_a_path_that_cannot_be_a_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "config"
    blocker.write_text("a file, not a folder")
    with pytest.raises(SettingsError, match="cannot save the settings"):
        save_settings(Settings(), blocker / "settings.json")


_settings_strategy = st.builds(
    Settings,
    captions=st.builds(
        CaptionStyle,
        lines=st.integers(1, 6),
        font_size=st.integers(8, 96),
        background_opacity=st.floats(0, 1),
        font_family=st.text(max_size=20),
        dock=st.sampled_from(["bottom", "top", "float"]),
    ),
    engine=st.builds(EngineConfig, step_s=st.floats(0.5, 3.0), model=st.text(max_size=30),
                     vocabulary=st.text(max_size=60)),
    transcripts=st.builds(TranscriptConfig, label_mic=st.text(min_size=1).filter(str.strip)),
    window=st.dictionaries(
        st.text(max_size=10),
        st.tuples(
            st.integers(-5000, 5000), st.integers(-5000, 5000), st.integers(1, 9000), st.integers(1, 9000)
        ),
        max_size=3,
    ),
)


@hsettings(max_examples=50, deadline=None)
@given(_settings_strategy)
def test_to_dict_from_dict_round_trip(s: Settings) -> None:
    again, warnings = from_dict(json.loads(json.dumps(to_dict(s))))
    assert warnings == [] and again == s
