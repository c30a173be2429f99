"""``captioner transcribe`` as a new user meets it (issue 26): export paths checked before any work, a
summary line for people (engine counters only with -v), the same JSON document as ``sessions export``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from captioner import cli
from captioner.audio import WavWriter, load_audio_file
from captioner.storage.paths import AppPaths
from captioner.transcript.store import SessionStore

SPEECH = Path(__file__).resolve().parents[1] / "data" / "speech"


def test_a_bad_export_path_fails_before_any_work(tiny_pack, reading: Path, tmp_path: Path, capsys) -> None:
    home = AppPaths.default(tmp_path / "home")
    for bad, why in ((tmp_path / "no" / "such" / "x.srt", "does not exist"), (tmp_path, "it is a folder")):
        code = cli.run(["transcribe", str(reading), "--model", str(tiny_pack.root), "--srt", str(bad)], home)
        out = capsys.readouterr()
        assert code == 2 and why in out.err and out.err.count("\n") == 1, out.err
        assert out.out == "" and "transcribing" not in out.err  # the engine never started
    code = cli.run(["transcribe", str(reading), "--model", str(tiny_pack.root), "--title", "x" * 201], home)
    out = capsys.readouterr()
    assert code == 2 and "title is at most 200 characters" in out.err and "transcribing" not in out.err
    with SessionStore.open(home.sessions_db) as store:
        assert store.list_sessions() == []


def test_a_title_names_the_session(tiny_pack, reading: Path, tmp_path: Path, capsys) -> None:
    home = AppPaths.default(tmp_path / "home")
    assert cli.run(["transcribe", str(reading), "--model", str(tiny_pack.root), "--title", "Lecture 3:\n  Fourier"],
                   home) == 0
    capsys.readouterr()
    with SessionStore.open(home.sessions_db) as store:
        assert [s.title for s in store.list_sessions()] == ["Lecture 3: Fourier"]


def test_summary_is_one_line_for_people_and_the_engine_counters_need_verbose(real_tiny_en_pack, reading: Path,
                                                                              tmp_path: Path, capsys) -> None:
    home = AppPaths.default(tmp_path / "home")
    args = ["transcribe", str(reading), "--model", str(real_tiny_en_pack.root), "--provider", "cpu", "--no-save"]
    assert cli.run(args, home) == 0
    err = capsys.readouterr().err
    summary = next(line for line in err.splitlines() if "s of audio in" in line)
    assert "RTF" in summary and "language en" in summary and "48 words" in summary, summary
    assert "stops {" not in err and "sessions created" not in err and "chunks per round" not in err
    assert cli.run(["-v", *args], home) == 0
    err = capsys.readouterr().err
    assert "stops {" in err and "sessions created" in err


def test_transcribe_json_is_the_session_export_document_plus_stats(real_tiny_en_pack, reading: Path,
                                                                   tmp_path: Path, capsys) -> None:
    home = AppPaths.default(tmp_path / "home")
    mine, exported = tmp_path / "transcribe.json", tmp_path / "export.json"
    assert cli.run(["transcribe", str(reading), "--model", str(real_tiny_en_pack.root), "--provider", "cpu",
                    "--json", str(mine)], home) == 0
    assert cli.run(["sessions", "export", "1", "--json", str(exported)], home) == 0
    capsys.readouterr()
    a, b = json.loads(mine.read_text(encoding="utf-8")), json.loads(exported.read_text(encoding="utf-8"))
    assert set(a) - {"stats"} == set(b) == {"version", "session", "words", "gaps", "marks"}
    assert a["words"] == b["words"] and len(a["words"]) == 48
    assert a["session"] == b["session"] and a["session"]["title"] == reading.name


def test_paced_as_a_live_source_every_session_is_open_before_the_first_round(tiny_pack, tmp_path: Path,
                                                                             capsys) -> None:
    """``--realtime`` (a live source) opens every graph's session before the first round, so none is
    opened inside a round (whisper-base: 200-520 ms a decoder chunk graph); a file transcribed as fast
    as it can be opens only what its rounds use (a 3 s file never needs the 20 s bucket), and its
    summary names that time apart from the compute."""
    wav = tmp_path / "short.wav"
    with WavWriter(wav) as writer:  # 3 s of a real reading
        writer.write(load_audio_file(SPEECH / "1089-134691-0000.wav")[:48000])
    home = AppPaths.default(tmp_path / "home")
    graphs = {p.name for p in tiny_pack.root.glob("*.onnx")}
    opened, opening, summary = {}, {}, {}
    for mode in ("--realtime", None):
        out = tmp_path / f"{mode}.json"
        args = ["transcribe", str(wav), "--model", str(tiny_pack.root), "--provider", "cpu", "--no-save",
                "--json", str(out)]
        assert cli.run([*args, mode] if mode else args, home) == 0, capsys.readouterr().err
        stats = json.loads(out.read_text(encoding="utf-8"))["stats"]
        opened[mode], opening[mode] = set(stats["session_ms"]), stats["model_open_s"]
        summary[mode] = next(line for line in capsys.readouterr().err.splitlines() if "s of audio in" in line)
    assert opened["--realtime"] == graphs
    assert "encoder_20s.onnx" not in opened[None] and opened[None] < graphs
    assert opening["--realtime"] == 0.0 and "opening the model" not in summary["--realtime"]
    assert opening[None] >= 0.05 and f"opening the model {opening[None]:.1f} s, compute" in summary[None]


def test_a_session_store_that_cannot_be_opened_loses_no_word(real_tiny_en_pack, reading: Path, tmp_path: Path,
                                                            capsys) -> None:
    """The history cannot be opened (a folder where its file should be; a full disk the same): the
    file is still captioned, the exports written, and the session written to the export folder,
    each said in a line; nothing renamed aside. (Before: "captioner: error" and no caption at all.)"""
    home = AppPaths.default(tmp_path / "home")
    home.sessions_db.mkdir(parents=True)
    srt = tmp_path / "out.srt"
    code = cli.run(["transcribe", str(reading), "--model", str(real_tiny_en_pack.root), "--provider", "cpu",
                    "--srt", str(srt)], home)
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "captioner: this session cannot be saved (cannot open the session store" in out.err
    (line,) = [x for x in out.err.splitlines() if x.startswith("not saved in the history")]
    assert "saved as session" not in out.err
    json_path = Path(line.split("the session was written to ")[1].split(" (and .txt)")[0])
    assert line.endswith(f"captioner sessions import {json_path} adds it once there is room"), line
    assert json_path.parent == home.exports and json_path.with_suffix(".txt").is_file()
    words = [w["text"] for w in json.loads(json_path.read_text(encoding="utf-8"))["words"]]
    printed = re.sub(r"\[[0-9:.]+\]", " ", out.out).split()
    assert len(words) == 48 and words == printed  # every printed word kept
    assert srt.read_text(encoding="utf-8").count(" --> ") >= 4
    assert home.sessions_db.is_dir() and not list(home.sessions_db.parent.glob("*.corrupt-*"))
    home.sessions_db.rmdir()  # room again: the command the line gives puts it in the history
    assert cli.run(["sessions", "import", str(json_path)], home) == 0
    assert capsys.readouterr().out.startswith(f"imported {json_path} as session 1 (48 words")
    with SessionStore.open(home.sessions_db) as store:
        (info,) = store.list_sessions()
        assert [w.text for w in store.session_words(info.id)] == words and info.title == reading.name
        assert info.ended_at is not None and info.model == real_tiny_en_pack.root.name


def test_a_session_nowhere_to_be_written_still_leaves_the_exports(real_tiny_en_pack, reading: Path, tmp_path: Path,
                                                                 small_disk, monkeypatch, capsys) -> None:
    """The history, the export folder, the temporary folder and home all on a full disk: the exports
    asked for (on another disk) are still written and the loss is said, exit 2. (Before, the error
    came out of the session's close before the exports were written.)"""
    full = small_disk.mount("256k")
    home = AppPaths.default(full / "home")
    home.sessions_db.mkdir(parents=True)  # the history cannot be opened
    small_disk.fill(full)
    monkeypatch.setattr("tempfile.tempdir", str(full))
    monkeypatch.setenv("HOME", str(full))
    srt = tmp_path / "out.srt"
    code = cli.run(["transcribe", str(reading), "--model", str(real_tiny_en_pack.root), "--provider", "cpu",
                    "--srt", str(srt), "--language", "en"], home)
    out = capsys.readouterr()
    assert code == 2, out.err
    assert srt.read_text(encoding="utf-8").count(" --> ") >= 4 and f"wrote {srt}" in out.err
    last = out.err.rstrip().splitlines()[-1]
    assert last.startswith("captioner: the session store could not be written (cannot open the session store") \
        and "no fallback folder could take the transcript either" in last, last
    assert "saved as session" not in out.err and "not saved in the history" not in out.err


def test_standard_input_is_captioned(real_tiny_en_pack, reading: Path, tmp_path: Path) -> None:
    """``captioner transcribe -``: audio on standard input (``ffmpeg … | captioner transcribe -``,
    any format ffmpeg reads: FLAC here, written by ffmpeg to a pipe, so with no length in its
    header): every word, and the session titled "standard input". Before: "- does not exist or is
    not a file"."""
    import os
    import shutil
    import subprocess
    import sys

    import pytest

    if shutil.which("ffmpeg") is None:
        pytest.fail("ffmpeg is not installed (scripts/setup --dev installs it)")
    flac = subprocess.run(["ffmpeg", "-v", "error", "-i", str(reading), "-f", "flac", "-"], capture_output=True,
                          check=True, timeout=60).stdout  # fmt: skip
    home, out = tmp_path / "home", tmp_path / "out.json"
    done = subprocess.run([sys.executable, "-m", "captioner", "transcribe", "-", "--model", str(real_tiny_en_pack.root),
                           "--provider", "cpu", "--json", str(out)], input=flac, capture_output=True, timeout=300,
                          env=dict(os.environ, CAPTIONER_HOME=str(home)))  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert err.startswith("transcribing standard input (streamed) with"), err
    assert done.stdout.decode().startswith("[00:00.6"), done.stdout  # "He could wait no longer."
    words = " ".join(w["text"] for w in json.loads(out.read_text(encoding="utf-8"))["words"]).lower()
    assert words.startswith("he could wait no longer") and "hester" in words and "first importance" in words, words
    with SessionStore.open(AppPaths.default(home).sessions_db) as store:
        (session,) = store.list_sessions()
        assert session.title == "standard input" and session.ended_at is not None


def test_standard_input_is_captioned_as_it_comes(real_tiny_en_pack, tmp_path: Path) -> None:
    """``arecord -f S16_LE -r 16000 | captioner transcribe - > notes.txt``: a sentence, then 14 s of
    silence (18.8 s in all), and the pipe kept open: the sentence's line is written while the stream
    goes on, not at its end. Before, the file reader waited for 10 s blocks, the engine read the next step before
    decoding the last, and the printer kept the sentence's last word back until the next speech, so
    nothing was written until the stream ended."""
    import os
    import select
    import struct
    import subprocess
    import sys
    import time

    speech = (load_audio_file(SPEECH / "1221-135766-0002.wav") * 32767).astype("<i2").tobytes()  # 4.8 s
    header = b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) \
        + b"data" + struct.pack("<I", 0xFFFFFFFF)  # a stream's header: no length
    with subprocess.Popen([sys.executable, "-m", "captioner", "transcribe", "-", "--model", str(real_tiny_en_pack.root),
                           "--provider", "cpu", "--no-save"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=dict(os.environ, CAPTIONER_HOME=str(tmp_path / "home"))) as proc:  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            proc.stdin.write(header + speech + bytes(14 * 32000))
            proc.stdin.flush()
            deadline = time.monotonic() + 240  # a loaded 2-core machine; the line comes in seconds
            ready: list = []
            while not ready and time.monotonic() < deadline and proc.poll() is None:
                ready = select.select([proc.stdout], [], [], 1.0)[0]
            assert ready, "no line while the stream was open"
            first = proc.stdout.readline().decode()
            assert first.startswith("[00:00.") and "thoughts affected" in first, first
            proc.stdin.write(speech)
            proc.stdin.close()  # the stream ends: the rest, a few lines on each pipe
            rest, err = proc.stdout.read(), proc.stderr.read()
            proc.wait(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err.decode()
    (second,) = rest.decode().splitlines()
    assert second.startswith("[00:19.") and "thoughts affected" in second, second


def test_standard_input_without_ffmpeg_says_what_is_needed(tmp_path: Path, capsys, monkeypatch) -> None:
    import captioner.audio.files as files

    monkeypatch.setattr(files.shutil, "which", lambda name: None)
    assert cli.run(["transcribe", "-", "--no-save"], AppPaths.default(tmp_path / "home")) == 2
    err = capsys.readouterr().err
    assert "reading audio from standard input ('-') needs ffmpeg; install it, or give a file" in err, err
