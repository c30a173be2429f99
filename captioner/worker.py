"""The engine worker: one QObject, moved to its own QThread, that owns the capture and the streams.

Data flow (ARCHITECTURE.md §3): the worker blocks on the capture's ``read(timeout)`` (no sleep
polling), then drains whatever else the capture already holds with non-blocking reads, feeds each
block to the stream of its source (one :class:`StreamLike` per source in "both" mode), applies the
bounded-lag rule (:class:`~captioner.engine.overload.LagGovernor`: when more than two steps of
audio wait, the stream skips all but the newest step and the transcript gets a gap marker), runs
the round that is due and emits the resulting :class:`~captioner.core.EngineUpdate` values.
Draining first is what makes the rule see the whole backlog: audio left in the capture's ring is
invisible to the stream, and a ring that fills replaces audio by silence without a word.
Cross-thread signal connections are queued, so the GUI receives them in order and never waits on
the engine.

Shutdown is cooperative: :meth:`CaptionWorker.request_stop` (thread-safe) sets an event; the loop
notices it within one read timeout, calls ``finish()`` on every stream and emits those last
updates *before* ``finished``, so a receiver that ends the session on ``finished`` has every
committed word. While paused the capture is stopped and the thread sleeps on an event: an idle
app uses no CPU.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np
from PySide6.QtCore import QObject, Signal, Slot

from captioner.core import SAMPLE_RATE, AudioBlock, AudioEvent, EngineUpdate, Source
from captioner.engine.overload import LagGovernor, LagReport, LagState
from captioner.engine.stream import StreamConfig
from captioner.errors import AudioDeviceError, CaptionerError

__all__ = ["CaptionWorker", "CaptureLike", "StreamLike"]

logger = logging.getLogger(__name__)

READ_TIMEOUT_S = 0.25  # longest wait for audio before checking the stop/pause flags
LEVEL_INTERVAL_S = 0.1  # level signals at most 10 per second per source
REOPEN_WAIT_S = 2.0  # pause before reopening a capture whose device failed
MAX_DRAIN_BLOCKS = 10_000  # blocks read per turn at most: more than a full capture ring (a turn still checks the stop flag)
_LAG_ORDER: dict[LagState, int] = {"ok": 0, "slower": 1, "behind": 2, "skipping": 3}


class _StopWhilePreparing(BaseException):
    """Raised by the progress callback to end ``prepare`` between two graphs when a stop was asked:
    a BaseException, so that no provider fallback takes it for a failed compile."""


class CaptureLike(Protocol):
    """What the worker needs of a capture (``audio.AudioCapture`` and ``audio.FileSource``).

    ``read`` blocks up to ``timeout`` seconds and returns the next 16 kHz block, or None.
    ``finished`` turns True when nothing more will come (a file ran out); ``events()`` returns
    the device events since the last call without blocking. A stopped capture is not restarted:
    the worker asks its factory for a new one.
    """

    @property
    def finished(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def read(self, timeout: float) -> AudioBlock | None: ...

    def events(self) -> list[AudioEvent]: ...


class StreamLike(Protocol):
    """The engine's streaming session for one source (``captioner.engine`` ``Stream``).

    ``config.step_s`` and ``lag_s`` (fed but not yet processed, seconds), ``hurry``, ``skip`` and
    ``set_step`` serve the bounded-lag rule (:mod:`captioner.engine.overload`).
    """

    hurry: bool

    @property
    def config(self) -> StreamConfig: ...

    @property
    def lag_s(self) -> float: ...

    def feed(self, samples: np.ndarray) -> None: ...

    def step(self) -> EngineUpdate | None: ...

    def skip(self, keep_s: float) -> EngineUpdate: ...

    def set_step(self, step_s: float) -> None: ...

    def finish(self) -> EngineUpdate: ...


class CaptionWorker(QObject):
    """Runs capture → engine in its thread and reports through signals.

    Args:
        open_capture: builds and returns the capture (called in the worker thread, again after
            a device failure).
        streams: the engine stream of each captured source.
        read_timeout_s: longest blocking read before the flags are checked again.
        reopen_wait_s: pause before reopening a capture that failed (never a busy retry loop).
        paused: start paused.
        realtime: the capture delivers audio at real-time pace (devices, a file replayed at
            real time): the backlog is drained each turn and the bounded-lag rule skips what the
            engine cannot keep up with. False for a file read as fast as it can be (the backlog
            is the rest of the file: one block per turn, nothing skipped).
        prepare: readies the engine's graphs (``Runtime.prepare``: the NPU's compiled, the CPU's
            sessions opened; seconds, minutes for a first NPU start), called in the worker's
            thread once the capture has opened; the audio captured meanwhile (the capture's ring
            holds 20 s) is then decoded, not skipped: run beside a capture whose backlog the
            bounded-lag rule judged as usual, it held up the first round while audio piled up,
            and the rule skipped the session's first seconds (4.6 s of a whisper-base start on a
            2-core CPU without VNNI). Called with a ``progress(done, total)`` of graphs compiled,
            which ends it after the graph being compiled when a stop is asked (quitting during a
            first NPU start waits for one graph, not minutes; what was compiled stays cached).
        prepare_first: ``prepare`` compiles (``Runtime.compile_pending``: minutes on a first NPU
            start, more than the capture's ring holds): it runs before the capture opens, with
            the status "preparing" and ``progress`` signals, and nothing is captured meanwhile.
        adapt_step: the lag rule lengthens a stream's step while the engine cannot keep up
            (False: the caller's step throughout, the skip rule alone).

    Signals:
        started(); update(EngineUpdate); level(str source, float rms 0..1);
        lag(float seconds, str state) after every round: the round's lag (audio that waited when
        it started plus its compute; the worst source in "both" mode) and "ok", "slower" (the
        step lengthened to keep up), "behind" or "skipping"
        (:class:`~captioner.engine.overload.LagGovernor`);
        audio_event(AudioEvent); error(CaptionerError) (a capture that cannot be opened is
        retried every ``reopen_wait_s`` and reported once until it opens or fails otherwise: a
        missing sound server is one tray message, not one per retry); status(str) with
        "preparing" (``prepare`` compiles, before the capture opens), "starting" (``prepare``
        runs, the capture open), "listening", "paused", "ended" (a file source ran out) or
        "stopped"; progress(int done, int total) graphs compiled while "preparing"; finished().
    """

    started = Signal()
    update = Signal(object)
    level = Signal(str, float)
    lag = Signal(float, str)
    audio_event = Signal(object)
    error = Signal(object)
    status = Signal(str)
    progress = Signal(int, int)
    finished = Signal()

    def __init__(
        self,
        open_capture: Callable[[], CaptureLike],
        streams: Mapping[Source, StreamLike],
        *,
        read_timeout_s: float = READ_TIMEOUT_S,
        reopen_wait_s: float = REOPEN_WAIT_S,
        paused: bool = False,
        realtime: bool = True,
        prepare: Callable[[Callable[[int, int], None]], None] | None = None,
        prepare_first: bool = False,
        adapt_step: bool = True,
    ) -> None:
        super().__init__()
        self._open_capture = open_capture
        self._prepare = prepare
        self._prepare_first = prepare_first and prepare is not None
        self._catch_up = False  # the next rounds decode the audio captured while the engine was readied
        self._streams = dict(streams)
        self._realtime = realtime
        self._governors = {s: LagGovernor(stream.config.step_s, bounded=realtime, adapt_step=adapt_step)
                           for s, stream in self._streams.items()}
        self._timeout = read_timeout_s
        self._reopen_wait = reopen_wait_s
        self._stop = threading.Event()
        self._wake = threading.Event()  # set on resume and on stop
        self._paused = paused
        self._finished_streams = False
        self._last_level = dict.fromkeys(self._streams, 0.0)
        self._open_failure: str | None = None  # the failure to open last reported (told once)
        # the audio clock at a wall-clock time: (time.monotonic(), samples), set when the capture
        # opens and as each block is fed; one tuple, replaced whole, so any thread may read it
        self._clock_ref: tuple[float, int] | None = None
        self._ended = False  # a file source ran out

    # -------------------------------------------------------- thread-safe intents
    def request_stop(self) -> None:
        """Ask the loop to finish the streams and end (returns at once; any thread)."""
        self._stop.set()
        self._wake.set()

    def set_paused(self, paused: bool) -> None:
        """Pause (stop capturing, sleep) or resume; any thread."""
        self._paused = paused
        if not paused:
            ref = self._clock_ref  # the clock stood still while paused: it goes on from now
            self._clock_ref = None if ref is None else (time.monotonic(), ref[1])
            self._wake.set()

    @property
    def stopping(self) -> bool:
        """True once a stop was requested."""
        return self._stop.is_set()

    def audio_clock_s(self) -> float:
        """The session's "now" on its audio clock, seconds: the end of the newest audio fed to the
        engine (the later source's in "both" mode), and for a real-time capture that is not paused
        or ended the wall time since (the audio captured while the engine is being readied, or since
        the last read, is coming); 0 before the capture opens. Any thread."""
        ref = self._clock_ref
        if ref is None:
            return 0.0
        since = time.monotonic() - ref[0] if self._realtime and not (self._paused or self._ended) else 0.0
        return ref[1] / SAMPLE_RATE + max(0.0, since)

    @property
    def step_s(self) -> float:
        """The step in force, seconds (the longest of the sources'): the caller's, or longer while
        the lag rule keeps up by lengthening it; any thread."""
        return max(g.step_s for g in self._governors.values())

    def lag_reports(self) -> dict[Source, LagReport]:
        """The lag of each source's stream so far (max, p95, seconds skipped); any thread."""
        return {s: g.report() for s, g in self._governors.items()}

    # -------------------------------------------------------------- the loop
    @Slot()
    def run(self) -> None:
        """The thread's body: capture, feed, step, emit; until :meth:`request_stop`."""
        self.started.emit()
        capture: CaptureLike | None = None
        try:
            if self._prepare is not None and self._prepare_first:  # a compile: longer than the ring holds
                self.status.emit("preparing")
                self._ready()
            elif self._prepare is not None:
                self.status.emit("starting")
            while not self._stop.is_set():
                if self._paused:
                    self._close(capture)
                    capture = None
                    self.status.emit("paused")
                    self._wait_for_wake()
                    continue
                if capture is None:
                    capture = self._open()
                    if capture is None:
                        continue
                    if self._prepare is not None:  # the audio captured meanwhile is decoded
                        self._ready()
                        self._catch_up = True
                    self.status.emit("listening")
                outcome = self._pump(capture)
                if outcome == "failed":
                    capture = None  # closed by _pump; reopened on the next turn
                elif outcome == "ended":
                    self._ended = True  # the audio clock stands at the file's end from now
                    self._flush()
                    self.status.emit("ended")
                    self._close(capture)
                    capture = None
                    while not self._stop.is_set():  # a file ran out: keep the captions, idle
                        self._wait_for_wake()
        except _StopWhilePreparing:
            logger.info("stopped while the engine was readied")
        except Exception as exc:  # never let the thread die silently
            logger.exception("engine worker failed")
            err = exc if isinstance(exc, CaptionerError) else CaptionerError(f"the caption engine stopped: {exc}")
            if err is not exc:
                err.__cause__ = exc
            self.error.emit(err)
        finally:
            self._close(capture)
            try:
                self._flush()
            except Exception as exc:
                logger.exception("finishing the engine streams failed")
                self.error.emit(exc if isinstance(exc, CaptionerError) else CaptionerError(str(exc)))
            self.status.emit("stopped")
            self.finished.emit()

    def _ready(self) -> None:
        """Run ``prepare``, once per worker."""
        prepare, self._prepare = self._prepare, None
        if prepare is not None:
            prepare(self._compiled)

    def _compiled(self, done: int, total: int) -> None:
        """``prepare``'s progress: relayed; a stop asked meanwhile ends ``prepare`` here."""
        self.progress.emit(done, total)
        if self._stop.is_set():
            raise _StopWhilePreparing

    def _wait_for_wake(self) -> None:
        self._wake.wait()
        self._wake.clear()

    def _open(self) -> CaptureLike | None:
        try:
            capture = self._open_capture()
            capture.start()
            self._clock_ref = (time.monotonic(), self._clock_ref[1] if self._clock_ref else 0)
        except CaptionerError as exc:
            if str(exc) != self._open_failure:
                self._open_failure = str(exc)
                self.error.emit(exc)
            else:
                logger.debug("capture still cannot be opened: %s", exc)
            self._stop.wait(self._reopen_wait)  # retry later, without spinning
            return None
        self._open_failure = None
        return capture

    def _close(self, capture: CaptureLike | None) -> None:
        """Stop ``capture`` (a failure is logged: the capture is dropped all the same)."""
        if capture is not None:
            try:
                capture.stop()
            except CaptionerError as exc:
                logger.warning("closing the capture: %s", exc)

    def _pump(self, capture: CaptureLike) -> str:
        """Wait for a block (or time out), drain the rest of the backlog, run the lag rule and
        the due rounds.

        Returns:
            "ok"; "ended" when a file source has nothing more; "failed" when the device failed
            (the blocks read before are still fed; the capture is then closed, and reopened by
            the loop after a pause).
        """
        blocks: list[AudioBlock] = []
        failed: AudioDeviceError | None = None
        try:
            block = capture.read(self._timeout)
            while block is not None:
                blocks.append(block)
                if not self._realtime or len(blocks) >= MAX_DRAIN_BLOCKS:
                    break
                block = capture.read(0.0)  # non-blocking: only what the capture already holds
        except AudioDeviceError as exc:
            failed = exc
        self._drain_events(capture)
        fed: list[Source] = []
        for block in blocks:
            stream = self._streams.get(block.source)
            if stream is None:
                logger.debug("block from %s ignored: no stream for it", block.source)
                continue
            stream.feed(block.samples)
            if self._clock_ref is None or block.end > self._clock_ref[1]:
                self._clock_ref = (time.monotonic(), block.end)
            self._emit_level(block)
            if block.source not in fed:
                fed.append(block.source)
        for source in fed:
            self._run_rounds(source)
        self._catch_up = self._catch_up and not fed
        if failed is not None:
            self.error.emit(failed)
            self._close(capture)
            self._stop.wait(self._reopen_wait)
            return "failed"
        if not blocks:
            return "ended" if capture.finished else "ok"
        return "ok"

    def _run_rounds(self, source: Source) -> None:
        """The lag rule, then the due rounds of ``source``'s stream; emits updates and the lag."""
        ran = False
        for upd in self._governors[source].run(self._streams[source], self._stop.is_set, catch_up=self._catch_up):
            self._emit(upd)
            ran = True
        if ran:
            worst = max(self._governors.values(), key=lambda g: (_LAG_ORDER[g.state], g.last_lag_s))
            self.lag.emit(max(g.last_lag_s for g in self._governors.values()), worst.state)

    def _drain_events(self, capture: CaptureLike) -> None:
        """Forward the capture's events; an overflow (audio the ring dropped and replaced by
        silence) also becomes a gap in the transcript, so no audio is lost without a mark."""
        for ev in capture.events():
            self.audio_event.emit(ev)
            if ev.kind == "overflow" and ev.seconds > 0 and ev.source in self._streams:
                start = ev.at / SAMPLE_RATE
                self._governors[ev.source].note_dropped(ev.seconds)
                self._emit(EngineUpdate(source=ev.source, gap=(start, start + ev.seconds)))

    def _emit_level(self, block: AudioBlock) -> None:
        now = time.monotonic()
        if now - self._last_level.get(block.source, 0.0) < LEVEL_INTERVAL_S or not len(block.samples):
            return
        self._last_level[block.source] = now
        rms = float(np.sqrt(np.mean(np.square(block.samples, dtype=np.float64))))
        self.level.emit(block.source, min(1.0, rms))

    def _emit(self, upd: EngineUpdate) -> None:
        if not upd.is_empty:
            self.update.emit(upd)

    def _flush(self) -> None:
        """Finish every stream once, emitting what it still held (committed at the end)."""
        if self._finished_streams:
            return
        self._finished_streams = True
        for source, stream in self._streams.items():
            upd = stream.finish()
            logger.debug("stream %s finished: retract %d, %d words", source, upd.retract, len(upd.words))
            self._emit(upd)

