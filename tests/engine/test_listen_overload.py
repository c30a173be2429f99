"""``captioner listen``'s engine path on an engine too slow for real time (issue 16, overload).

The listen loop (:func:`~captioner.commands.listen.capture_loop` feeding ``listen``'s captioner) on a
real-time file capture (:class:`~captioner.audio.files.FileSource`, the capture interface at real
pace) and the real tiny pack on the CPU provider, with every encoder dispatch sleeping twice its
audio for the first seconds: the capture's backlog is drained before the bounded-lag rule decides,
so the engine skips, prints the gap, stores it with the session, and reports the lag and the
seconds skipped at the end.
"""

from __future__ import annotations

from wavs import slow_down_encoder, spoken, write_wav

from captioner.audio.files import FileSource
from captioner.commands._engine import EngineSetup
from captioner.commands.listen import _Captioner, capture_loop
from captioner.core import AudioEvent
from captioner.engine import StreamConfig, Transcriber
from captioner.storage.paths import AppPaths
from captioner.transcript.store import SessionStore

STEP_S = 1.0
SLOW_S = 5.0


def test_listen_skips_when_overloaded_stores_the_gap_and_reports_the_lag(tiny_pack, tmp_path, monkeypatch, capsys):
    wav = write_wav(tmp_path / "speech.wav", spoken(10.0))
    slow_down_encoder(monkeypatch, SLOW_S, 2.0)
    setup = EngineSetup(Transcriber.from_pack(tiny_pack, "cpu"), StreamConfig(step_s=STEP_S))
    captioner = _Captioner(setup, ("system",), AppPaths.default(tmp_path / "home"), save=True,
                           labels={"system": "Others", "mic": "You"})
    with FileSource(wav, realtime=True) as capture:
        capture_loop(capture, captioner.feed, None, None, captioner.run_rounds)
    captioner.finish(10.0)
    report = captioner.governors["system"].report()
    assert report.skips >= 1 and report.skipped_s > 0
    assert 0 < report.p95_s <= report.max_s
    assert captioner.recorder is not None
    out = capsys.readouterr()
    assert out.out.count("[…] (skipped") == report.skips  # the printer marks each gap
    assert report.summary() in out.err
    with SessionStore.open(AppPaths.default(tmp_path / "home").sessions_db) as store:
        gaps = store.session_gaps(captioner.recorder.session_id)
    assert len(gaps) == report.skips
    assert abs(sum(g.seconds for g in gaps) - report.skipped_s) < 0.01


def test_listen_marks_audio_the_capture_ring_dropped_as_a_gap(tiny_pack, tmp_path, capsys):
    setup = EngineSetup(Transcriber.from_pack(tiny_pack, "cpu"), StreamConfig(step_s=STEP_S))
    home = AppPaths.default(tmp_path / "home")
    captioner = _Captioner(setup, ("system",), home, save=True, labels={"system": "Others", "mic": "You"})
    captioner.overflow(AudioEvent("overflow", "system", "dropped 2.00 s", at=32_000, seconds=2.0))
    captioner.finish(5.0)
    assert captioner.recorder is not None
    with SessionStore.open(home.sessions_db) as store:
        assert [(g.start, g.end) for g in store.session_gaps(captioner.recorder.session_id)] == [(2.0, 4.0)]
    out = capsys.readouterr()
    assert "[…] (skipped 2.0 s" in out.out and "skipped 2.0 s of audio in 1 skips" in out.err


def test_listen_marks_a_moment_and_says_why_not_when_nothing_is_saved(tiny_pack, tmp_path) -> None:
    """Enter in ``listen``'s terminal (commands/_keys.py) comes here: a mark in the session, said on
    the console; with --no-save there is none, and that is said instead of nothing happening."""
    import io

    from captioner.commands._printer import Console

    setup = EngineSetup(Transcriber.from_pack(tiny_pack, "cpu"), StreamConfig(step_s=STEP_S))
    home = AppPaths.default(tmp_path / "home")
    notes = io.StringIO()
    console = Console(io.StringIO(), False, status_out=io.StringIO(), note_out=notes)
    labels = {"system": "Others", "mic": "You"}
    unsaved = _Captioner(setup, ("system",), home, save=False, labels=labels, console=console)
    assert unsaved.mark(1.0, "") is None
    saved = _Captioner(setup, ("system",), home, save=True, labels=labels, console=console)
    mark = saved.mark(75.5, "decision  taken")
    assert mark is not None and (mark.at, mark.note) == (75.5, "decision taken")
    assert saved.mark(2.0, "x" * 501) is None  # refused, said, and listening goes on
    assert notes.getvalue().splitlines() == [
        "not marked: with --no-save there is no session to mark",
        "★ marked 0:01:15: decision taken",
        "not marked: a mark's note is at most 500 characters; this one has 501",
    ]
    assert saved.recorder is not None
    assert [m.at for m in saved.recorder.store.session_marks(saved.recorder.session_id)] == [75.5]
    saved.finish(80.0)
