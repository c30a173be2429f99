"""The soak benchmark's session: the app's own path, composed here because only commands may import every layer.

A real engine (:func:`~captioner.commands._engine.open_configured_engine`, as the app opens it) behind
a :class:`~captioner.worker.CaptionWorker` in a ``QThread`` reading a :class:`~captioner.audio.FileSource`
as fast as the engine takes it; every update reaches a :class:`~captioner.transcript.recorder.SessionRecorder`
on a SQLite store on disk through a queued signal, as in ``app.py``. A proxy around the stream
records every round (the worker emits only non-empty updates), a sampler thread records the RSS.
At the end the store's words are compared with the words the worker emitted and the session is
exported to SRT (timed, parsed back). The measuring and reporting half is :mod:`captioner.bench.soak`.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QEventLoop, QObject, QThread, QTimer, Slot

from captioner import __version__
from captioner.audio.files import FileSource
from captioner.bench.soak import RoundRecord, RssSampler, rss_bytes
from captioner.commands._engine import open_configured_engine
from captioner.core import SAMPLE_RATE, EngineUpdate, Provider, Word, apply_update
from captioner.engine.stream import Stream, StreamConfig
from captioner.storage.paths import AppPaths
from captioner.storage.settings import EngineConfig
from captioner.transcript.export import atomic_write_text, export_session
from captioner.transcript.recorder import SessionRecorder
from captioner.transcript.store import SessionStore
from captioner.worker import CaptionWorker

__all__ = ["RecordingStream", "run_soak_session"]

logger = logging.getLogger(__name__)

PROGRESS_INTERVAL_MS = 60_000
_APP: list[QCoreApplication] = []  # a Qt application made here lives until exit (freed early, PySide6 crashes)


class RecordingStream:
    """The engine stream with every round recorded: ``feed``/``step``/``finish`` pass through.

    Anything else the worker asks of a stream, or sets on it (the overload rule's ``hurry``),
    reaches the real stream unchanged (``__getattr__``, ``__setattr__``), so the soak runs whatever
    worker is on the branch.
    """

    _OWN = frozenset({"_stream", "_t0", "fed", "rounds"})

    def __init__(self, stream: Stream, t0: float) -> None:
        self._stream = stream
        self._t0 = t0
        self.fed = 0  # 16 kHz samples fed
        self.rounds: list[RoundRecord] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # set here, ``hurry`` never reached the stream (latent: the soak's unbounded rule never hurries)
        if name in RecordingStream._OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._stream, name, value)

    @property
    def fed_s(self) -> float:
        """Audio fed so far, seconds."""
        return self.fed / SAMPLE_RATE

    @property
    def config(self) -> StreamConfig:
        return self._stream.config

    @property
    def lag_s(self) -> float:
        return self._stream.lag_s

    def skip(self, keep_s: float) -> EngineUpdate:
        upd = self._stream.skip(keep_s)
        self._record(upd)
        return upd

    def feed(self, samples: Any) -> None:
        self._stream.feed(samples)
        self.fed += len(samples)

    def step(self) -> EngineUpdate | None:
        return self._record(self._stream.step())

    def finish(self) -> EngineUpdate:
        upd = self._stream.finish()
        self._record(upd)
        return upd

    def _record(self, upd: EngineUpdate | None) -> EngineUpdate | None:
        if upd is not None and upd.stats is not None:
            st = upd.stats
            self.rounds.append(RoundRecord(round(time.perf_counter() - self._t0, 3),
                                           round(self.fed_s - st.lag_s, 3), round(st.total_ms, 2),
                                           round(st.lag_s, 3), st.bucket, round(st.skipped_s, 3)))
        return upd


class _Sink(QObject):
    """Lives in the calling thread: records every update (store first), keeps the emitted words."""

    def __init__(self, recorder: SessionRecorder, worker: CaptionWorker) -> None:
        super().__init__()
        self.recorder, self.worker = recorder, worker
        self.words: list[Word] = []
        self.updates = 0
        self.errors: list[str] = []

    @Slot(object)
    def on_update(self, update: EngineUpdate) -> None:
        self.recorder.apply(update)
        apply_update(self.words, update)
        self.updates += 1

    @Slot(str)
    def on_status(self, status: str) -> None:
        if status == "ended":  # the file ran out: finish the streams and end, as quitting the app does
            self.worker.request_stop()

    @Slot(object)
    def on_error(self, error: object) -> None:
        self.errors.append(str(error))


def _commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).resolve().parents[2], check=False)
        return done.stdout.strip() or "?"
    except OSError:
        return "?"


def _key(w: Word) -> tuple[str, int, int]:
    """A word as the store keeps it (integer milliseconds)."""
    return (w.text, max(0, round(w.start * 1000)), max(0, round(w.end * 1000)))


def _parse_srt(text: str) -> tuple[int, str]:
    """(cues, parser): the independent ``srt`` package when installed (dev extra), else a count of cue lines."""
    try:
        import srt
    except ImportError:
        return sum(1 for line in text.splitlines() if " --> " in line), "a cue-line count"
    return len(list(srt.parse(text))), "srt"


def run_soak_session(pack: str, wav: Path, work_dir: Path, paths: AppPaths, *, step_s: float = 2.0,
                     provider: Provider = "cpu", language: str = "en",
                     progress: Callable[[str], None] = lambda _: None,
                     checkpoint: Path | None = None, max_wall_s: float | None = None) -> dict[str, Any]:
    """Run ``wav`` through the worker into a store in ``work_dir``; return the raw measurements.

    ``checkpoint``: rewritten every minute with the rounds and RSS so far (``"partial": true``), so
    a run stopped early can still be reported (``captioner bench --sections soak --soak-raw``).
    ``max_wall_s``: stop the session (as quitting the app does: streams finished, words stored)
    after this long; the checks then cover the audio fed so far (``"stopped_early"``).

    Returns:
        the ``raw`` dict :func:`captioner.bench.soak.soak_summary` reads (rounds, RSS samples, words,
        export) plus the setup (model, provider, step, machine, load, commit).

    Raises:
        CaptionerError: a missing pack, an unreadable file, a store that cannot be written.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    app = QCoreApplication.instance()
    if app is None:
        app = QCoreApplication([])
        _APP.append(app)
    load_start = os.getloadavg()
    setup = open_configured_engine(EngineConfig(), paths, model=pack, provider=provider, step_s=step_s,
                                   language=language)
    engine, config = setup.engine, setup.config
    db = work_dir / "sessions.db"
    for stale in (db, db.with_suffix(".db-wal"), db.with_suffix(".db-shm")):
        stale.unlink(missing_ok=True)
    store = SessionStore.open(db)
    info = engine.info()
    recorder = SessionRecorder.start(store, model=engine.name, provider=info.chosen, language=language,
                                     title=wav.name)
    audio_s = file_s = FileSource(wav).duration_s
    t0 = time.perf_counter()
    stream = RecordingStream(engine.stream(config, source="system"), t0)
    # the file is read as fast as the engine takes it (realtime=False): the rest of the file is not
    # a backlog for the bounded-lag rule to skip
    worker = CaptionWorker(lambda: FileSource(wav, realtime=False, source="system"), {"system": stream},
                           realtime=False)
    sink = _Sink(recorder, worker)
    thread = QThread()
    worker.moveToThread(thread)
    thread.started.connect(worker.run)
    worker.update.connect(sink.on_update)
    worker.status.connect(sink.on_status)
    worker.error.connect(sink.on_error)
    loop = QEventLoop()
    worker.finished.connect(loop.quit)
    ticker = QTimer()
    ticker.setInterval(PROGRESS_INTERVAL_MS)

    def tick() -> None:
        if max_wall_s is not None and time.perf_counter() - t0 > max_wall_s and not worker.stopping:
            progress(f"soak: {max_wall_s / 60:.0f} min of wall time spent; stopping the session here")
            stopped_early.append(stream.fed_s)
            worker.request_stop()
        if checkpoint is not None:  # a run cut short still leaves its measurements
            partial = {**setup_info, "audio_s": stream.fed_s, "wall_s": time.perf_counter() - t0, "partial": True,
                       "rounds": [asdict(r) for r in list(stream.rounds)],
                       "rss": [[round(t, 2), round(a_s, 2), rss] for t, a_s, rss in list(sampler.samples)]}
            atomic_write_text(checkpoint, json.dumps(partial))
        done = stream.fed_s
        rate = done / max(1e-9, time.perf_counter() - t0)
        progress(f"soak: {done / 60:.1f} of {audio_s / 60:.1f} min of audio, {len(stream.rounds)} rounds, "
                 f"{len(sink.words)} words, RSS {rss_bytes() / 2**20:.0f} MB, {rate:.2f}× real time, "
                 f"load {os.getloadavg()[0]:.2f}")

    ticker.timeout.connect(tick)
    setup_info = {"captioner": __version__, "commit": _commit(),
                  "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
                  "load_start": [round(x, 2) for x in load_start], "model": engine.name, "provider": info.chosen,
                  "step_s": config.step_s, "language": language, "threads": engine.runtime.threads}
    sampler = RssSampler(lambda: stream.fed_s).start()
    stopped_early: list[float] = []
    ticker.start()
    thread.start()
    loop.exec()
    ticker.stop()
    thread.quit()
    thread.wait()
    app.processEvents()  # anything still queued (nothing is expected: finished is emitted last)
    sampler.stop()
    wall = time.perf_counter() - t0
    engine.close()
    if stopped_early:
        audio_s = stream.fed_s
    recorder.close(duration_ms=round(audio_s * 1000))
    emitted = [w for w in sink.words if not w.speculative]
    stored = store.session_words(recorder.session_id)
    a, b = [_key(w) for w in emitted], [_key(w) for w in stored]
    first_diff = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if first_diff is None and len(a) != len(b):
        first_diff = min(len(a), len(b))
    srt_path = work_dir / "session.srt"
    t_export = time.perf_counter()
    export_session(store, recorder.session_id, srt_path)
    export_s = time.perf_counter() - t_export
    text = srt_path.read_text(encoding="utf-8")
    cues, parser = _parse_srt(text)
    store.close()
    progress(f"soak: done, {audio_s / 60:.1f} min of audio in {wall / 60:.1f} min; {len(stored)} words stored, "
             f"{len(emitted)} emitted; SRT export {export_s:.3f} s")
    return {
        **setup_info, "load_end": [round(x, 2) for x in os.getloadavg()], "audio_s": audio_s, "wall_s": wall,
        "stopped_early": bool(stopped_early), "file_s": file_s,
        "rounds": [asdict(r) for r in stream.rounds],
        "rss": [[round(t, 2), round(a_s, 2), rss] for t, a_s, rss in sampler.samples],
        "words": {"emitted": len(emitted), "stored": len(stored), "equal": a == b, "first_difference": first_diff,
                  "starts_non_decreasing": all(x.start <= y.start for x, y in itertools.pairwise(stored)),
                  "updates": sink.updates},
        "export": {"seconds": round(export_s, 4), "cues": cues, "parser": parser, "bytes": len(text.encode()),
                   "parsed": cues > 0 or not stored},
        "errors": sink.errors,
        "store_bytes": db.stat().st_size,
    }
