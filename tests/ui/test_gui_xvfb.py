"""The real app on a real X server with a real tray host: Xvfb + trayer, the tiny pack, a spoken WAV.

Three runs, each a subprocess on the ``xcb`` platform with its own ``CAPTIONER_HOME``:

* ``captioner --source-file speech.wav --model <tiny pack> --screenshot --quit-after`` exactly as a
  user would type it, plus a second ``captioner`` start that must hand over to the running one;
* the same command with the "Live subtitle file" setting on, killed (SIGKILL) mid-session: the
  live SRT grew while it ran and parses afterwards;
* ``xcb_driver.py``, the same app assembled in-process, driven through its real tray actions and
  the real save dialog, which also renders the style screenshots (light/dark, 2/4 lines, "both").

The tiny pack has random weights, so its words are gibberish; what is checked is that words from
the real engine reach the caption bar, the store and the SRT file. The live-file run uses the real
tiny.en, whose words on real speech come round after round (the random pack's barely do).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import srt
from PySide6.QtGui import QImage

from captioner.transcript.cues import GAP_TEXT
from captioner.transcript.store import SessionStore
from tests.ui.conftest import quit_app

pytestmark = pytest.mark.gui

REPO = Path(__file__).resolve().parents[2]
SPEECH = ("Good morning everybody. Today we talk about live captions on the laptop, running on the "
          "neural processing unit. The words should flow onto the caption bar.")
MORE_SPEECH = (" Every session is saved on the computer. Nothing you say leaves the room. Subtitles can be "
               "exported at any time.")


@pytest.fixture(scope="session")
def speech_wav(tmp_path_factory) -> Path:
    """About 9 s of English speech from espeak-ng (22.05 kHz mono WAV)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("needs espeak-ng (scripts/setup --dev installs it)")
    out = tmp_path_factory.mktemp("speech") / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(out), SPEECH], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def paused_speech_wav(tmp_path_factory) -> Path:
    """The same speech and three sentences more, with a 1.2 s pause after each: the engine's words become
    final when an utterance closes at a pause, so the live file grows sentence by sentence. Six
    sentences (~25 s), so that the file grows more than once even when a loaded machine's engine runs
    seconds behind and closes two sentences in one go."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("needs espeak-ng (scripts/setup --dev installs it)")
    out = tmp_path_factory.mktemp("speech") / "paused.wav"
    ssml = "<speak>" + "".join(f"{s.strip()}.<break time=\"1200ms\"/>" for s in (SPEECH + MORE_SPEECH).split(".")
                              if s.strip()) + "</speak>"
    subprocess.run(["espeak-ng", "-m", "-w", str(out), ssml], check=True, capture_output=True)
    return out


def new_home(tmp_path: Path, **sections: dict) -> Path:
    """A fresh CAPTIONER_HOME whose settings use 1 s engine steps (more rounds in a short file)."""
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "settings.json").write_text(json.dumps({"engine": {"step_s": 1.0}, **sections}))
    return home


def pixel_variance(path: Path) -> float:
    """Variance of the grey level over a grid of pixels (0 for a blank image)."""
    img = QImage(str(path))
    assert not img.isNull(), f"{path} is not an image"
    vals = []
    for x in range(0, img.width(), 3):
        for y in range(0, img.height(), 3):
            c = img.pixelColor(x, y)
            vals.append((c.red() + c.green() + c.blue()) / 3 * c.alphaF())
    mean = sum(vals) / len(vals)
    return sum((v - mean) ** 2 for v in vals) / len(vals)


def stored_sessions(home: Path):
    with SessionStore.open(home / "data" / "sessions.sqlite3") as store:
        return [(info, store.session_words(info.id)) for info in store.list_sessions()]


def test_captioner_command_runs_with_a_real_tray_and_saves_a_complete_session(xserver, tiny_pack, speech_wav,
                                                                             tmp_path, artifacts):
    home = new_home(tmp_path)
    shot = artifacts / "caption-bar-cli.png"
    env = xserver.env(CAPTIONER_HOME=str(home), PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "captioner", "--source-file", str(speech_wav), "--model", str(tiny_pack.root),
           "--screenshot", str(shot), "--quit-after", "240"]  # the deadline; the test quits it earlier
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = home / "logs" / "captioner.log"

    def wait_in_log(text: str, timeout: float = 200) -> None:
        deadline = time.monotonic() + timeout
        while text not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and proc.poll() is None, f"no {text!r} in the log"
            time.sleep(0.2)  # waiting for another process; no Qt event loop in this one

    try:
        wait_in_log("recording session")
        second = subprocess.run([sys.executable, "-m", "captioner"], env=env, capture_output=True, text=True,
                                timeout=60)
        assert second.returncode == 0, second.stderr
        assert "already running: showing it" in second.stdout
        tree = subprocess.run(["xwininfo", "-root", "-tree"], env=env, capture_output=True, text=True).stdout
        wait_in_log("captioning state: ended")  # the file ran out; the engine flushed its last words
        err = quit_app(proc, env)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    text = log.read_text()
    assert "--quit-after" not in text  # it was the second start's --quit that ended it
    assert "tray: available=True visible=True geometry=" in text, text
    geometry = text.split("tray: available=True visible=True geometry=")[1].splitlines()[0]
    assert not geometry.endswith(", 0, 0)"), geometry  # embedded with a real size
    assert '"captioner"' in tree  # the caption bar is a real X window
    sessions = stored_sessions(home)
    assert len(sessions) == 1
    info, words = sessions[0]
    assert info.ended_at is not None and info.duration_ms is not None  # complete: ended on quit
    assert info.provider == "CPU" and info.model == tiny_pack.root.name
    assert words, "no word from the real engine reached the store"
    assert pixel_variance(shot) > 50


def test_live_subtitle_file_grows_during_the_session_and_parses_after_a_kill(xserver, real_tiny_en_pack,
                                                                           paused_speech_wav, tmp_path):
    exports = tmp_path / "exports"
    home = new_home(tmp_path, transcripts={"live_export": "srt", "export_dir": str(exports),
                                           "max_lines": 1, "max_line_chars": 20})
    env = xserver.env(CAPTIONER_HOME=str(home), PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "captioner", "--source-file", str(paused_speech_wav), "--model",
           str(real_tiny_en_pack.root), "--minimized", "--quit-after", "240"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = home / "logs" / "captioner.log"
    sizes: list[int] = []  # the live file's size each time it changed while the app ran
    try:
        deadline = time.monotonic() + 200
        while len(sizes) < 3 and "captioning state: ended" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and proc.poll() is None, "the app stopped or took too long"
            files = list(exports.glob("live-*.srt"))
            size = files[0].stat().st_size if files else 0
            if size and (not sizes or size != sizes[-1]):
                sizes.append(size)
            time.sleep(0.05)  # watching another process; no Qt event loop in this one
        os.kill(proc.pid, signal.SIGKILL)  # no chance to close the file or end the session
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(sizes) >= 2 and sizes == sorted(sizes), \
        f"the live file did not grow while the app ran: {sizes}; log:\n{log.read_text()[-4000:] if log.exists() else ''}"
    live, = exports.glob("live-*.srt")
    subs = list(srt.parse(live.read_text(encoding="utf-8")))  # whole cues only, even after SIGKILL
    assert subs
    (info, words), = stored_sessions(home)
    assert info.ended_at is None  # killed: the store kept every committed word all the same
    # a machine busy with other work can make the app fall behind real time: the audio it skips is a
    # cue of its own in the live file, and the store keeps that gap too
    with SessionStore.open(home / "data" / "sessions.sqlite3") as store:
        gaps = store.session_gaps(info.id)
    assert sum(s.content == GAP_TEXT for s in subs) <= len(gaps)
    live_words = [w for s in subs if s.content != GAP_TEXT for w in s.content.split()]
    assert live_words and live_words == [w.text for w in words][: len(live_words)]  # final words are final


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_ends_the_real_app_as_quit_does(xserver, real_tiny_en_pack, paused_speech_wav, tmp_path, sig):
    """SIGTERM (log-out, shutdown) and SIGINT (Ctrl-C in the terminal that started it) quit the app as
    its tray's Quit does: exit 0 within seconds, the session ended with its words. Before, SIGTERM
    killed it at once with the session not ended, and Ctrl-C did nothing (Qt's loop ran no Python to
    see it)."""
    import sqlite3

    home = new_home(tmp_path)
    env = xserver.env(CAPTIONER_HOME=str(home), PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "captioner", "--source-file", str(paused_speech_wav), "--model",
           str(real_tiny_en_pack.root), "--minimized", "--quit-after", "240"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    db = home / "data" / "sessions.sqlite3"

    def stored_words() -> int:
        if not db.exists():
            return 0
        try:
            with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
                return int(conn.execute("SELECT count(*) FROM words WHERE speculative = 0").fetchone()[0])
        except sqlite3.Error:  # the app is creating it
            return 0

    try:
        deadline = time.monotonic() + 200
        while stored_words() < 3:
            assert time.monotonic() < deadline and proc.poll() is None, "no words stored"
            time.sleep(0.1)  # watching another process; no Qt event loop in this one
        seen = stored_words()
        os.kill(proc.pid, getattr(signal, sig))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    (info, words), = stored_sessions(home)
    assert info.ended_at is not None and info.duration_ms is not None  # ended, as on Quit
    assert len([w for w in words if not w.speculative]) >= seen
    assert f"{sig}: quitting" in (home / "logs" / "captioner.log").read_text()


def test_tray_actions_drive_the_real_app_on_xcb(xserver, tiny_pack, speech_wav, tmp_path, artifacts):
    home = new_home(tmp_path)
    readme_shot = artifacts / "caption-bar-desktop.png"
    env = xserver.env(PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, str(REPO / "tests" / "ui" / "xcb_driver.py"), "--home", str(home),
                          "--pack", str(tiny_pack.root), "--wav", str(speech_wav), "--out", str(artifacts),
                          "--readme-shot", str(readme_shot)],
                         env=env, capture_output=True, text=True, timeout=500)
    log = home / "logs" / "captioner.log"
    why = f"stdout: {res.stdout[-3000:]}\nstderr: {res.stderr[-2000:]}\nlog: {log.read_text()[-3000:] if log.exists() else ''}"
    assert res.returncode == 0, why
    report = json.loads(res.stdout.split("REPORT ", 1)[1])
    assert report["platform"] == "xcb"
    # the tray icon is embedded in trayer
    assert report["tray_available"] is True and report["tray_visible"] is True
    *_, w, h = report["tray_geometry"]
    assert w > 0 and h > 0, report
    assert pixel_variance(artifacts / "tray-icon.png") > 50  # the icon is drawn in the tray
    # words from the real engine reached the bar and the store
    assert report["bar_visible"] and report["bar_lines"]
    assert report["stored_words"]
    assert set(" ".join(report["bar_lines"]).split()) <= set(report["stored_words"])
    # the tray's save action went through the real file dialog and wrote a parseable SRT
    assert report["save_dialog"] == "QFileDialog"
    subs = list(srt.parse(Path(report["srt"]).read_text(encoding="utf-8")))
    assert [w for s in subs for w in s.content.split()] == report["stored_words"]
    # quitting through the tray ended the event loop and left a complete session
    assert report["exit_code"] == 0 and report["running_after_quit"] is False
    (info, words), = stored_sessions(home)
    assert info.id == report["session_id"] and info.ended_at is not None
    assert [w.text for w in words] == report["stored_words"]
    # screenshots: light and dark, 2 and 4 lines, "both" mode, the real-engine bar, the README picture
    for shot in [*report["shots"], str(artifacts / "caption-bar-real-engine.png"), str(readme_shot)]:
        assert pixel_variance(Path(shot)) > 50, shot
    names = {Path(s).stem for s in report["shots"]}
    assert {"caption-bar-dark-2", "caption-bar-light-4", "caption-bar-both-dark-2"} <= names
