"""``captioner sessions ...`` end to end on a real store in a temporary home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import srt
import webvtt

from captioner import cli
from captioner.core import EngineUpdate, Word
from captioner.storage.paths import AppPaths
from captioner.storage.settings import Settings, TranscriptConfig, save_settings
from captioner.transcript.store import SessionStore

from ._streams import saved_session

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path) -> AppPaths:
    paths = AppPaths.default(tmp_path / "home").ensure()
    with SessionStore.open(paths.sessions_db) as store:
        a = store.begin_session(
            sources=("system",), model="tiny-en", provider="CPU", language="en", title="lecture"
        )
        store.apply(
            a,
            EngineUpdate(
                0,
                tuple(
                    Word(t, i * 0.4, i * 0.4 + 0.3)
                    for i, t in enumerate(
                        ["Welcome", "to", "the", "course", "on", "signals.", "Today,", "Fourier."]
                    )
                ),
            ),
        )
        store.end_session(a)
        b = store.begin_session(sources=("mic", "system"), model="base")
        store.apply(
            b,
            EngineUpdate(
                0,
                (
                    Word("Can", 0, 0.3, source="mic"),
                    Word("you", 0.3, 0.6, source="mic"),
                    Word("hear?", 0.6, 1.0, source="mic"),
                ),
                source="mic",
            ),
        )
        store.apply(b, EngineUpdate(0, (Word("Yes,", 1.5, 1.8), Word("Fourier", 1.8, 2.3))))
    return paths


def run(paths: AppPaths, *argv: str) -> int:
    return cli.run(["sessions", *argv], paths)


def test_list_and_show(home: AppPaths, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(home, "list") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["ID", "STARTED", "LENGTH"]
    assert out[1].split()[0] == "2" and "(not ended)" in out[1] and "mic,system" in out[1]
    assert out[2].split()[0] == "1" and "lecture" in out[2] and "0:00:03" in out[2]
    assert run(home, "show", "1") == 0
    out = capsys.readouterr().out
    assert "session 1: lecture" in out and "tiny-en" in out
    assert "[00:00:00] Welcome to the course on signals. Today, Fourier." in out
    assert run(home, "show", "2", "--no-timestamps") == 0
    assert "You: Can you hear?\n\nOthers: Yes, Fourier" in capsys.readouterr().out


def test_export_every_format(home: AppPaths, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save_settings(
        Settings(transcripts=TranscriptConfig(label_mic="Me", label_system="Them")), home.settings_file
    )
    out = tmp_path / "out"
    out.mkdir()
    argv = [
        "export",
        "2",
        "--srt",
        str(out / "a.srt"),
        "--vtt",
        str(out / "a.vtt"),
        "--txt",
        str(out / "a.txt"),
    ]
    assert run(home, *argv, "--json", str(out / "a.json"), "--timestamps") == 0
    assert capsys.readouterr().out.count("wrote ") == 4
    subs = list(srt.parse((out / "a.srt").read_text(encoding="utf-8")))
    assert [s.content for s in subs] == ["Me: Can you hear?", "Them: Yes, Fourier"]
    assert [c.voice for c in webvtt.read(str(out / "a.vtt"))] == ["Me", "Them"]
    assert (out / "a.txt").read_text(encoding="utf-8").startswith("[00:00:00] Me: Can you hear?")
    doc = json.loads((out / "a.json").read_text(encoding="utf-8"))
    assert doc["session"]["id"] == 2 and doc["session"]["sources"] == ["mic", "system"]
    assert [w["text"] for w in doc["words"]] == ["Can", "you", "hear?", "Yes,", "Fourier"]


def test_search_delete_purge(home: AppPaths, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(home, "search", "fourier") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == ["2", "1"]
    assert run(home, "search", "on", "signals") == 0
    assert "the course on signals. Today," in capsys.readouterr().out
    assert run(home, "search", "nothing-like-this") == 0
    assert "no session contains" in capsys.readouterr().out
    assert run(home, "delete", "1") == 0
    assert run(home, "list") == 0
    assert "lecture" not in capsys.readouterr().out
    assert run(home, "purge", "--older-than", "30") == 0
    assert "deleted 0 session(s)" in capsys.readouterr().out


def test_rename_titles_a_session_that_list_show_and_search_then_show(home: AppPaths, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(home, "rename", "2", "Signals", "weekly\nsync") == 0
    assert capsys.readouterr().out.strip() == "session 2 is now titled 'Signals weekly sync'"
    assert run(home, "list") == 0
    assert [line.split("  ")[-1] for line in capsys.readouterr().out.splitlines()[1:]] == ["Signals weekly sync (not ended)", "lecture"]
    assert run(home, "show", "2") == 0
    assert capsys.readouterr().out.startswith("session 2: Signals weekly sync\n")
    assert run(home, "search", "signals") == 0  # the title first, then where it was said
    assert capsys.readouterr().out.splitlines() == [
        "session    2     title          Signals weekly sync",
        "session    1   0:00:02  system  Welcome to the course on signals. Today, Fourier.",
    ]
    assert run(home, "rename", "2", "x" * 201) == 2
    assert capsys.readouterr().err.strip() == "captioner: error: a session's title is at most 200 characters; this one has 201"
    assert run(home, "rename", "2") == 0
    assert capsys.readouterr().out.strip() == "session 2 has no title now"
    assert run(home, "rename", "99", "x") == 2
    assert "there is no session 99" in capsys.readouterr().err


def test_errors_are_one_line(home: AppPaths, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(home, "show", "99") == 2
    err = capsys.readouterr().err
    assert err.strip() == "captioner: error: there is no session 99 (see `captioner sessions list`)"
    assert run(home, "export", "1") == 2
    assert "--srt FILE" in capsys.readouterr().err
    assert run(home, "export", "1", "--srt", str(tmp_path / "no" / "dir" / "x.srt")) == 2
    assert "No such file or directory; nothing was written" in capsys.readouterr().err


def test_corrupt_store_through_the_real_entry_point(tmp_path: Path) -> None:
    paths = AppPaths.default(tmp_path / "h").ensure()
    paths.sessions_db.write_bytes(b"garbage, not sqlite" * 10)
    env = {**os.environ, "CAPTIONER_HOME": str(tmp_path / "h"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "captioner", "sessions", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no saved sessions"
    assert "not a readable SQLite database" in done.stderr and "sessions.sqlite3.corrupt-" in done.stderr
    assert len(list(paths.data.glob("sessions.sqlite3.corrupt-*"))) == 1


def test_mark_bookmarks_a_moment_afterwards(home: AppPaths, capsys: pytest.CaptureFixture[str]) -> None:
    """``sessions mark ID TIME [NOTE]``: a moment marked while reading a transcript later, shown as
    the app's marks are; a time that is not one, or after the session's end, is refused in one line."""
    assert run(home, "mark", "1", "0:00:02.5", "Fourier", "starts") == 0
    assert capsys.readouterr().out.strip() == "session 1: ★ marked 0:00:02: Fourier starts"
    assert run(home, "mark", "1", "1") == 0
    assert capsys.readouterr().out.strip() == "session 1: ★ marked 0:00:01"
    assert run(home, "show", "1") == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("[00:00:01] ★ Marked\n\n[00:00:02] ★ Marked: Fourier starts"), out
    for time, said in (("0:61", "'0:61' is not a time: minutes and seconds go up to 59"),
                       ("soon", "'soon' is not a time: write H:MM:SS, M:SS or seconds")):
        with pytest.raises(SystemExit) as refused:  # argparse's usage error
            run(home, "mark", "1", time)
        assert refused.value.code == 2 and said in capsys.readouterr().err
    assert run(home, "mark", "1", "0:05") == 2
    assert capsys.readouterr().err.strip() == "captioner: error: session 1 is 0:00:03 long; 0:00:05 is after its end"
    assert run(home, "mark", "99", "1") == 2
    assert "there is no session 99" in capsys.readouterr().err
    with SessionStore.open(home.sessions_db) as store:
        assert [(m.at, m.note) for m in store.session_marks(1)] == [(1.0, ""), (2.5, "Fourier starts")]


def test_show_says_how_the_language_was_chosen(tmp_path, capsys) -> None:
    """A given language, one detected, one detected among the languages the user speaks (the app keeps
    the setting as typed, "en,de"), and a snapshot without a language (an older session)."""
    from captioner.storage.paths import AppPaths
    from captioner.transcript.store import SessionStore

    paths = AppPaths.default(tmp_path / "home")
    paths.ensure()
    with SessionStore.open(paths.sessions_db) as store:
        for asked, heard in (("de", "de"), ("auto", "de"), ("en,de", "de"), ("en, de", "auto"), ("", "fr")):
            sid = store.begin_session(language=heard, settings={"engine": {"language": asked}} if asked else {})
            store.end_session(sid)
    said = []
    for sid in range(1, 6):
        assert cli.run(["sessions", "show", str(sid)], paths) == 0
        said.append(next(line for line in capsys.readouterr().out.splitlines() if "language" in line))
    assert [s.split("language ", 1)[1] for s in said] == [
        "de", "de (detected)", "de (detected among en, de)", "auto", "fr"]


def test_import_puts_an_exported_session_back_whole_and_once(home: AppPaths, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A session exported as JSON (two sources, a gap, marks, a title, its times) imported into another
    history is the same session: words, gaps, marks, metadata; importing it again is refused with the
    id it has."""
    with SessionStore.open(home.sessions_db) as store:
        store.apply(2, EngineUpdate(0, (), gap=(2.5, 4.0)))
        store.add_mark(2, 1.6, "the answer")
        store.set_title(2, "Team call")
        store.end_session(2, duration_ms=4500)
    exported = tmp_path / "call.json"
    assert run(home, "export", "2", "--json", str(exported)) == 0
    other = AppPaths.default(tmp_path / "other").ensure()
    capsys.readouterr()
    assert run(other, "import", str(exported)) == 0
    assert capsys.readouterr().out == f"imported {exported} as session 1 (5 words; captioner sessions show 1)\n"
    with SessionStore.open(home.sessions_db) as a, SessionStore.open(other.sessions_db) as b:
        want, got = a.get_session(2).to_json(), b.get_session(1).to_json()
        assert {**got, "id": 2} == want
        assert [(w.text, w.start, w.end, w.source) for w in b.session_words(1)] == \
            [(w.text, w.start, w.end, w.source) for w in a.session_words(2)]
        assert b.session_gaps(1) == a.session_gaps(2) and b.session_marks(1) == a.session_marks(2)
    assert run(other, "import", str(exported)) == 1
    err = capsys.readouterr().err
    assert err == f"captioner: {exported}: this session is in the history already: session 1 (captioner sessions show 1)\n"


@pytest.mark.parametrize(("content", "why"), [
    ("not json", "is not JSON"),
    ('{"version": 2, "words": []}', "not a captioner session"),
    ('{"version": 1, "words": [{"text": "a", "start": 2.0, "end": 1.0}]}', "a word's times are not a span"),
    ('{"version": 1, "words": [{"text": "a", "start": 0, "end": 1, "source": "tv"}]}', "unknown source 'tv'"),
    ('{"version": 1, "session": {"sources": ["system"]}, "words": [{"text": "a", "start": 0, "end": 1, '
     '"source": "mic"}]}', "it has mic words but its sources are system"),
])
def test_import_refuses_a_file_that_is_not_a_session_in_one_line(home: AppPaths, tmp_path: Path, content: str,
                                                                 why: str, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    assert run(home, "import", str(bad)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"captioner: {bad}") and err.count(str(bad)) == 1 and why in err and err.count("\n") == 1, err
    with SessionStore.open(home.sessions_db) as store:
        assert [s.id for s in store.list_sessions()] == [2, 1]  # nothing added


def test_a_history_on_a_full_disk_is_still_read_and_exported(small_disk, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The history's disk is full (SQLite cannot create its log's files, so it cannot open it as
    usual): list, show, search and export read the file as it stands, saying so; a change is refused
    in one line. (Before, every ``sessions`` command failed there.)"""
    disk = small_disk.mount("400k")
    home = AppPaths.default(disk / "home")
    sid = saved_session(home.sessions_db, "before the disk filled", "Welcome to the course.")
    small_disk.fill(disk)
    out_txt = tmp_path / "course.txt"
    assert run(home, "list") == 0 and "before the disk filled" in capsys.readouterr().out
    assert run(home, "search", "course") == 0 and "course." in capsys.readouterr().out
    assert run(home, "export", str(sid), "--txt", str(out_txt)) == 0
    assert out_txt.read_text(encoding="utf-8").strip() == "Welcome to the course."
    assert run(home, "rename", str(sid), "x") == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("the disk is full (0 KB free)") and err.count("captioner: error") == 1, err
