"""Ctrl-C keeps the words (issue 26): SIGINT to a real ``captioner transcribe --realtime`` with the real
tiny.en on real speech writes every export with what was shown, ends the session, exits 130. SIGTERM
(``kill``, ``timeout``, a service manager) does the same (``commands/_stop.py``); before, it ended the
process where it stood: no export written and the session not ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import srt

from captioner.audio.files import load_audio_file
from captioner.audio.wavfile import WavWriter
from captioner.storage.paths import AppPaths
from captioner.transcript.store import SessionStore


def _printed_words(stdout: str) -> list[str]:
    """The words of the ``[mm:ss.ss] text`` lines (a pipe gets no drafts, no escape codes)."""
    return [w for line in stdout.splitlines() if line.startswith("[") for w in line.split("] ", 1)[1].split()]


def _ctrl_c_delivered() -> None:
    """In the child before it starts: SIGINT back to its default, so that Python turns it into
    KeyboardInterrupt. A runner started in the background by a non-interactive shell (``cmd &``)
    ignores SIGINT, its children inherit that, and Python leaves an ignored SIGINT ignored: the
    transcription then ran to its end and exited 0."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_stop_keeps_every_word_shown_in_every_export_and_the_session(real_tiny_en_pack, reading: Path,
                                                                       tmp_path: Path, stop: str) -> None:
    home = tmp_path / "home"
    out_json, out_srt = tmp_path / "out.json", tmp_path / "out.srt"
    env = dict(os.environ, CAPTIONER_HOME=str(home))
    proc = subprocess.Popen(
        [sys.executable, "-m", "captioner", "transcribe", str(reading), "--model", str(real_tiny_en_pack.root),
         "--provider", "cpu", "--realtime", "--json", str(out_json), "--srt", str(out_srt)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_delivered)  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the first final line, as soon as it settles (the pipe is not held back)
    assert first.startswith("[00:0"), (first, proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
    time.sleep(2.0)  # a few more rounds: a draft is on screen and the reading is not over
    proc.send_signal(getattr(signal, stop))
    rest, err = proc.communicate(timeout=60)
    stdout = first + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted; keeping the words shown so far" in err
    assert "\x1b" not in stdout  # a pipe gets no escape codes

    printed = _printed_words(stdout)
    doc = json.loads(out_json.read_text(encoding="utf-8"))
    assert set(doc) >= {"version", "session", "words", "gaps", "stats"}  # the keys of `sessions export --json`
    exported = [w["text"] for w in doc["words"]]
    assert exported == printed and len(exported) >= 5, (exported, printed)
    assert doc["words"][-1]["end"] < 17.0  # interrupted: the reading's last sentence was not reached
    cues = list(srt.parse(out_srt.read_text(encoding="utf-8")))
    assert " ".join(c.content for c in cues).split() == exported

    with SessionStore.open(AppPaths.default(home).sessions_db) as store:
        (session,) = store.list_sessions()
        assert session.ended_at is not None and session.title == reading.name
        assert [w.text for w in store.session_words(session.id)] == exported
    assert doc["session"]["id"] == session.id and doc["session"]["ended_at"] == session.ended_at


@pytest.mark.parametrize("reader", ["head", "tee_ctrl_c"])
def test_a_reader_that_goes_away_loses_no_export_and_ends_the_session(real_tiny_en_pack, reading: Path,
                                                                      tmp_path: Path, reader: str) -> None:
    """The words piped to a reader that goes away: ``| head -n 1`` (it has its line and exits), or
    ``| tee`` with Ctrl-C, which the terminal sends to both (tee ends at once; the run, stopping,
    still has lines to print). The first write that finds no reader is a stop, as Ctrl-C: every
    export written with the words so far, the session ended, exit 130. Before, that write raised:
    no export at all, exit 0."""
    home = tmp_path / "home"
    out_json, out_srt = tmp_path / "out.json", tmp_path / "out.srt"
    twice = tmp_path / "twice.wav"  # 37.6 s: its second final line comes 20 s in, long before its end
    audio = load_audio_file(reading)
    writer = WavWriter(twice)
    writer.write(np.concatenate([audio, audio]))
    writer.close()
    env = dict(os.environ, CAPTIONER_HOME=str(home))
    realtime = ["--realtime"] if reader == "tee_ctrl_c" else []  # time for the Ctrl-C
    proc = subprocess.Popen(
        [sys.executable, "-m", "captioner", "transcribe", str(twice), "--model", str(real_tiny_en_pack.root),
         "--provider", "cpu", *realtime, "--json", str(out_json), "--srt", str(out_srt)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_delivered)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    command = ["head", "-n", "1"] if reader == "head" else ["cat"]
    pipe = subprocess.Popen(command, stdin=proc.stdout, stdout=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_delivered)
    proc.stdout.close()  # the reader's end is the reader's alone: when it exits, nothing reads
    assert pipe.stdout is not None
    first = pipe.stdout.readline()
    assert first.startswith("[00:0"), (first, proc.poll())
    if reader == "tee_ctrl_c":
        time.sleep(2.0)  # a draft on screen, the reading not over
        pipe.send_signal(signal.SIGINT)
        pipe.wait(timeout=10)
        proc.send_signal(signal.SIGINT)
    pipe.wait(timeout=60)
    pipe.stdout.close()
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 130, err
    assert "Traceback" not in err, err
    assert ("the output was closed; keeping the words so far" if reader == "head"
            else "interrupted; keeping the words shown so far") in err, err

    doc = json.loads(out_json.read_text(encoding="utf-8"))
    exported = [w["text"] for w in doc["words"]]
    assert exported[: len(_printed_words(first))] == _printed_words(first) and len(exported) > len(_printed_words(first))
    assert doc["words"][-1]["end"] < 35.0  # stopped: the last sentence was not reached
    cues = list(srt.parse(out_srt.read_text(encoding="utf-8")))
    assert " ".join(c.content for c in cues).split() == exported
    with SessionStore.open(AppPaths.default(home).sessions_db) as store:
        (session,) = store.list_sessions()
        assert session.ended_at is not None
        assert [w.text for w in store.session_words(session.id)] == exported
