"""Atomic replacement against Windows' rename semantics: a file another program holds open.

This machine is not Windows, so ``os.replace`` is replaced by what ``MoveFileExW`` does there while
Defender, the search indexer or a sync client has the target open without ``FILE_SHARE_DELETE``: a
``PermissionError`` carrying ``winerror`` 5, 32 or 33 (POSIX errors carry none), until the other
program lets go. The files are real; only the refusals are played.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from captioner.storage import atomic
from captioner.storage.paths import AppPaths
from captioner.storage.settings import Settings, load_settings, save_settings


def _held_open(monkeypatch: pytest.MonkeyPatch, refusals: int, winerror: int | None) -> list[float]:
    """``os.replace`` refuses ``refusals`` times as Windows does for a file held open (``winerror``;
    None: a POSIX refusal), then renames; returns the waits slept between tries."""
    real = os.replace
    calls = {"n": 0}
    waits: list[float] = []

    def replace(src, dst):
        calls["n"] += 1
        if calls["n"] <= refusals:
            exc = PermissionError(13, "The process cannot access the file because it is being used by another "
                                      "process", str(dst))
            if winerror is not None:
                exc.winerror = winerror  # type: ignore[attr-defined]
            raise exc
        real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    monkeypatch.setattr(atomic.time, "sleep", waits.append)
    return waits


@pytest.mark.parametrize("winerror", [5, 32, 33])
def test_settings_are_saved_while_another_program_briefly_holds_the_file(tmp_path: Path, monkeypatch, winerror):
    """A scanner holding the settings file for a few milliseconds: the save waits and succeeds."""
    paths = AppPaths.default(tmp_path / "home").ensure()
    save_settings(Settings(), paths.settings_file)
    waits = _held_open(monkeypatch, refusals=3, winerror=winerror)
    changed = dataclasses.replace(Settings(), captions=dataclasses.replace(Settings().captions, font_size=30))
    save_settings(changed, paths.settings_file)
    assert waits == list(atomic.RETRY_WAITS_S[:3])
    assert load_settings(paths.settings_file)[0] == changed
    assert [p.name for p in paths.settings_file.parent.iterdir() if p.name.endswith(".part")] == []


def test_a_file_held_for_good_fails_after_the_waits_and_leaves_the_old_file(tmp_path: Path, monkeypatch):
    target = tmp_path / "talk.srt"
    target.write_text("old", encoding="utf-8")
    waits = _held_open(monkeypatch, refusals=100, winerror=32)
    with pytest.raises(PermissionError):
        atomic.replace_atomically(target, b"new")
    assert waits == list(atomic.RETRY_WAITS_S) and 1.0 < sum(waits) < 2.0
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["talk.srt"]  # the temporary file removed


@pytest.mark.parametrize("winerror", [None, 2])
def test_other_refusals_fail_at_once(tmp_path: Path, monkeypatch, winerror):
    """A POSIX permission error (no winerror) or another Windows error is not a file held open."""
    waits = _held_open(monkeypatch, refusals=1, winerror=winerror)
    with pytest.raises(PermissionError):
        atomic.replace_file(tmp_path / "a", tmp_path / "b")
    assert waits == []
