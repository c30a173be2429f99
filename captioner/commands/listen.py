"""``captioner listen``: live captions in the terminal from system audio, the microphone or both.

Captured blocks go through the same engine path as ``transcribe`` and the app (one
:class:`~captioner.engine.Stream` per source), words are printed as they settle and the session is
recorded in the store as it happens. With no model installed it installs the default first, as
``transcribe`` does; with ``--levels-only`` (or where that install fails) it shows input levels
only. ``--record`` saves the 16 kHz mono audio exactly as the engine receives it.

The capture loop (:func:`capture_loop`) takes one callback per :class:`AudioBlock`, and one after
each batch: it drains what the capture already holds before that call, so the engine's bounded-lag
rule (:mod:`captioner.engine.overload`, as in the app) sees the whole backlog and skips what a slow
machine cannot keep up with (the transcript marks the gap). The lag (max, p95) and the seconds
skipped are printed at the end.

Enter in the terminal marks this moment in the session (a note typed before it goes with it; the
app's Ctrl+Alt+M): :class:`~captioner.commands._keys.MarkKeys`.

``--seconds N`` counts seconds of audio: a device that is lost and reopened keeps its clock (the
outage is silence), so the listen still ends after about N seconds. A device that never comes back
would hold it forever; so once N seconds plus :data:`LATE_S` have passed on the wall clock and no
source that is short of N has moved for :data:`LATE_S`, the loop ends, what was captured is kept
(words, session, recording) and ``listen`` fails with a line that says how much audio it got.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from captioner.audio import AudioCapture, CaptureConfig, WavWriter
from captioner.commands import saved_line
from captioner.commands._engine import (
    EngineSetup,
    add_engine_options,
    engine_line,
    engine_snapshot,
    language_summary,
    open_engine,
    spoken_languages,
)
from captioner.commands._keys import MarkKeys
from captioner.commands._printer import Console, TerminalLines, WordPrinter
from captioner.commands._stop import OutputClosed
from captioner.core import SAMPLE_RATE, AudioBlock, AudioEvent, EngineUpdate, RoundStats, Source
from captioner.engine.overload import LagGovernor
from captioner.errors import AudioDeviceError, CaptionerError, ModelError
from captioner.storage.disk import write_problem
from captioner.storage.paths import AppPaths
from captioner.storage.settings import load_settings
from captioner.transcript.cues import Mark
from captioner.transcript.export import marked_notice
from captioner.transcript.recorder import SessionRecorder
from captioner.transcript.store import SessionStore, session_title

__all__ = ["capture_loop", "record_paths", "register", "run"]

READ_TIMEOUT_S = 0.25
LEVEL_EVERY_S = 1.0  # seconds of audio between level lines
MAX_DRAIN_BLOCKS = 10_000  # blocks handed on per batch at most (more than a full capture ring)
LATE_S = 5.0  # with --seconds: how long a source short of it may stand still past that much wall time


class Capture(Protocol):
    """The part of AudioCapture / FileSource the loop needs."""

    @property
    def sources(self) -> tuple[Source, ...]: ...

    @property
    def finished(self) -> bool: ...

    def read(self, timeout: float) -> AudioBlock | None: ...

    def events(self) -> list[AudioEvent]: ...

    def level(self, source: Source) -> tuple[float, float]: ...


def capture_loop(
    capture: Capture,
    on_block: Callable[[AudioBlock], None],
    seconds: float | None = None,
    on_event: Callable[[AudioEvent], None] | None = None,
    on_batch: Callable[[], None] | None = None,
    late_s: float = LATE_S,
) -> None:
    """Read blocks from a started ``capture`` and hand each to ``on_block`` until done.

    Args:
        capture: a started capture; the caller stops it (which flushes the last blocks, so call
            this again with ``seconds=None`` after stopping to receive them).
        on_block: called on this thread with every block, in order per source.
        seconds: stop once every source's audio clock has reached this many seconds; None: run
            until the capture is finished (stopped and drained) or Ctrl-C.
        on_event: called with every :class:`AudioEvent` (device lost/reopened, overflow).
        on_batch: called after the blocks of each batch: the first waited for, then every block
            the capture already held (non-blocking reads), i.e. when the caller has seen all the
            audio captured so far.
        late_s: with ``seconds``: give up on a source that is still short of it ``seconds +
            late_s`` after the call and has delivered nothing for ``late_s`` (a device that never
            came back); the caller sees it in its own clocks. A backlog (a slow engine) is no
            reason to stop: its source moves with every batch.
    """
    clocks = {s: 0 for s in capture.sources}
    target = None if seconds is None else round(seconds * SAMPLE_RATE)
    started = time.monotonic()
    moved = dict.fromkeys(clocks, started)  # when each source's clock last advanced

    def take(block: AudioBlock) -> None:
        if target is not None and block.start >= target:
            return  # beyond the requested length (the other source is catching up)
        if target is not None and block.end > target:
            block = AudioBlock(block.source, block.start, block.samples[: target - block.start])
        on_block(block)
        clocks[block.source] = block.end
        moved[block.source] = time.monotonic()

    while True:
        block = capture.read(READ_TIMEOUT_S)
        if on_event is not None:
            for ev in capture.events():
                on_event(ev)
        if block is not None:
            take(block)
            for _ in range(MAX_DRAIN_BLOCKS):
                more = capture.read(0.0)
                if more is None:
                    break
                take(more)
            if on_batch is not None:
                on_batch()
        elif capture.finished:
            return
        if seconds is None or target is None:
            continue
        if all(c >= target for c in clocks.values()):
            return
        now = time.monotonic()
        if now - started > seconds + late_s and all(now - moved[s] > late_s for s, c in clocks.items() if c < target):
            return  # a source short of the target has stood still too long: its device is gone


def record_paths(path: Path, sources: tuple[Source, ...]) -> dict[Source, Path]:
    """Where ``--record`` writes each source: ``out.wav``, or ``out.system.wav``/``out.mic.wav``."""
    if len(sources) == 1:
        return {sources[0]: path}
    return {s: path.with_name(f"{path.stem}.{s}{path.suffix or '.wav'}") for s in sources}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``listen`` subcommand."""
    p = subparsers.add_parser(
        "listen",
        help="capture live audio and show its level (optionally record it)",
        description="Capture system audio, the microphone or both, print a level line every second "
        "of audio and optionally record the 16 kHz mono audio exactly as the engine receives it.",
    )
    p.add_argument("--source", choices=("system", "mic", "both"), default="system",
                   help="system audio (loopback/monitor), microphone, or both (default: system)")
    p.add_argument("--device", help="microphone name (or part of it) or index; see `captioner devices`")
    p.add_argument("--seconds", type=float, help="stop after this many seconds of audio (default: Ctrl-C)")
    p.add_argument("--record", type=Path, metavar="WAV",
                   help="save the 16 kHz mono float32 audio; with --source both and no --mix one file "
                   "per source: out.wav → out.system.wav and out.mic.wav")
    p.add_argument("--mix", action="store_true",
                   help="with --source both: mix microphone and system audio into one stream "
                   "(tagged 'system')")
    p.add_argument("--levels-only", action="store_true",
                   help="do not run the engine (nor install a model); only capture (and record) and show levels")
    p.add_argument("--title", metavar="TEXT", help="the session's title in the history (default: listen (SOURCES))")
    p.add_argument("--no-save", action="store_true", help="do not record the session in the history")
    add_engine_options(p)
    p.set_defaults(func=run)


def _db(x: float) -> str:
    return f"{20 * math.log10(x):6.1f}" if x > 1e-10 else "  -inf"


class _Captioner:
    """One engine stream per source, printing and recording every update as it comes."""

    def __init__(self, setup: EngineSetup, sources: tuple[Source, ...], paths: AppPaths, save: bool,
                 labels: dict[Source, str], console: Console | None = None, title: str = "") -> None:
        self.setup = setup
        self.console = console or Console(sys.stdout, sys.stdout.isatty(), sys.stderr, sys.stderr)
        self.streams = {s: setup.engine.stream(setup.config, source=s) for s in sources}
        self.governors = {s: LagGovernor(setup.config.step_s) for s in sources}
        self._fed: set[Source] = set()
        both = len(sources) > 1
        self.printers = {s: WordPrinter(self.console, f"{labels[s]}: " if both else "") for s in sources}
        self.rounds: list[RoundStats] = []
        self.recorder: SessionRecorder | None = None
        if save:
            paths.ensure()
            self.recorder = SessionRecorder.start_or_keep(
                lambda: SessionStore.open(paths.sessions_db), sources=sources, model=setup.engine.name,
                provider=setup.engine.info().chosen, language=setup.config.language,
                title=title or f"listen ({'+'.join(sources)})", settings=engine_snapshot(setup.config),
                fallback_dirs=[paths.exports])
            if self.recorder.export_reason:
                self.console.note(f"this session cannot be saved ({self.recorder.export_reason}); "
                                  "it is written to a file when it ends")

    def _handle(self, update: EngineUpdate | None, final: bool = False) -> None:
        if update is None or update.is_empty:
            return
        if update.stats is not None:
            self.rounds.append(update.stats)
        if self.recorder is not None:  # stored before it is printed: a crash loses nothing shown
            self.recorder.apply(update)
        self.printers[update.source].update(update, final)

    def feed(self, block: AudioBlock) -> None:
        """Feed one block; the rounds run in :meth:`run_rounds`, once the batch is fed."""
        self.streams[block.source].feed(block.samples)
        self._fed.add(block.source)

    def overflow(self, event: AudioEvent) -> None:
        """Audio the capture's ring dropped (replaced by silence) becomes a gap, as in the app."""
        if event.source in self.streams and event.seconds > 0:
            self.governors[event.source].note_dropped(event.seconds)
            start = event.at / SAMPLE_RATE
            self._handle(EngineUpdate(source=event.source, gap=(start, start + event.seconds)))

    def mark(self, at_s: float, note: str) -> Mark | None:
        """Mark a moment of the session (its audio clock, seconds), said on the console; None when
        nothing is saved or the mark is refused (said, and listening goes on)."""
        if self.recorder is None:
            self.console.note("not marked: with --no-save there is no session to mark")
            return None
        try:
            mark = self.recorder.store.add_mark(self.recorder.session_id, at_s, note)
        except CaptionerError as exc:
            self.console.note(f"not marked: {exc}")
            return None
        self.console.note(marked_notice(mark))
        return mark

    def run_rounds(self) -> None:
        """The bounded-lag rule, then the due rounds, of every source fed since the last call."""
        for source in sorted(self._fed):
            for update in self.governors[source].run(self.streams[source]):
                self._handle(update)
        self._fed.clear()

    def finish(self, duration_s: float) -> None:
        self.run_rounds()
        for stream in self.streams.values():
            self._handle(stream.finish(), final=True)
        for printer in self.printers.values():
            printer.finish()  # the last update may be empty (or None): the held words are printed now
        self.console.close()
        for source, governor in self.governors.items():
            label = f"{source}: " if len(self.governors) > 1 else ""
            print(f"{label}{governor.report().summary()}", file=TerminalLines(sys.stderr), flush=True)
        print(f"{duration_s:.1f} s of audio; {language_summary(self.setup.config.language, self.rounds, self.setup.config.languages)}",
              file=TerminalLines(sys.stderr), flush=True)
        self.setup.engine.close()
        if self.recorder is not None:
            heard = spoken_languages(self.rounds) if self.setup.config.language == "auto" else []
            try:
                self.recorder.close(duration_ms=round(duration_s * 1000), language=", ".join(heard))
            finally:
                self.recorder.store.close()
            print(saved_line(self.recorder), file=TerminalLines(sys.stderr), flush=True)

    def abandon(self) -> None:
        """The capture failed before any audio: close the engine and drop the empty session (a
        failed ``listen`` leaves no "(not ended)" session with no words behind)."""
        self.console.close()
        self.setup.engine.close()
        if self.recorder is not None:
            self.recorder.discard()
            self.recorder.store.close()


def _open_captioner(args: argparse.Namespace, paths: AppPaths, sources: tuple[Source, ...],
                    console: Console) -> _Captioner | None:
    """The engine for ``listen``, or None (levels only) when asked. A fresh machine installs the
    default model first, as ``transcribe`` does (a named known model too); where that install fails
    (no network) and no model was named, the levels still show."""
    if args.levels_only:
        return None
    try:
        setup = open_engine(args, paths, install_missing=True)
    except ModelError as exc:
        if args.model:
            raise
        print(f"captioner: {exc}; showing levels only", file=TerminalLines(sys.stderr), flush=True)
        return None
    transcripts = load_settings(paths.settings_file)[0].transcripts  # problems were logged by open_engine
    labels: dict[Source, str] = {"mic": transcripts.label_mic, "system": transcripts.label_system}
    return _Captioner(setup, sources, paths, save=not args.no_save, labels=labels, console=console,
                      title=args.title or "")


def run(args: argparse.Namespace, paths: AppPaths) -> int:
    """Capture until ``--seconds`` of audio or Ctrl-C; returns 0.

    Raises:
        AudioDeviceError: a device could not be opened, or (``--seconds``) one was lost and did not
            come back, after everything captured was saved.
    """
    session_title(args.title or "")  # a bad title is refused before any device opens
    device: str | int | None = args.device
    if isinstance(device, str) and device.strip().isdigit():
        device = int(device)
    capture = AudioCapture(CaptureConfig(source=args.source, device=device, mix_both=args.mix))
    writers: dict[Source, WavWriter] = {}
    stopped: dict[Source, WavWriter] = {}  # recordings a write error ended early
    next_level = {s: 0 for s in capture.sources}
    started = time.monotonic()
    # the words on stdout; on a terminal the levels share its live region, else they go to stderr
    console = Console(sys.stdout, sys.stdout.isatty(), status_out=sys.stderr, note_out=sys.stderr)
    captioner = _open_captioner(args, paths, capture.sources, console)
    clock = {s: 0 for s in capture.sources}
    heard_at = [started]  # when the newest audio arrived (monotonic)
    levels: dict[Source, str] = {}
    closed = False  # the words' reader went away, and the stop was raised
    halted = False  # by Ctrl-C or as Ctrl-C: short of --seconds on purpose
    keys = MarkKeys(sys.stdin) if captioner is not None else None  # with --no-save too: an Enter must not break the lines

    def on_block(block: AudioBlock) -> None:
        if block.end >= max(clock.values()):
            heard_at[0] = time.monotonic()
        clock[block.source] = block.end
        if block.source in writers:
            try:
                writers[block.source].write(block.samples)
            except OSError as exc:  # a full disk ends the recording, not the captions
                writer = writers.pop(block.source)
                stopped[block.source] = writer
                with contextlib.suppress(OSError):
                    writer.close()
                console.note(f"recording {block.source} audio stopped: cannot write {writer.path}: "
                             f"{write_problem(exc, writer.path.parent)}; the {writer.frames / SAMPLE_RATE:.1f} s "
                             "recorded are kept, listening goes on")
        if captioner is not None:
            captioner.feed(block)
        if block.end >= next_level[block.source]:
            next_level[block.source] = block.end + round(LEVEL_EVERY_S * SAMPLE_RATE)
            rms, peak = capture.level(block.source)
            bar = "#" * max(0, min(30, round((60 + 20 * math.log10(max(rms, 1e-10))) / 2)))
            line = (f"level {block.end / SAMPLE_RATE:7.1f} s {block.source:6s} rms {_db(rms)} dBFS "
                    f"peak {_db(peak)} dBFS |{bar:30s}|")
            if captioner is None:  # levels only: the levels are the output
                print(line, flush=True)
            elif console.tty:
                levels[block.source] = line
                console.status("   ".join(levels.values()) if len(levels) == 1 else
                               "  ".join(v.replace("level ", "") for v in levels.values()))
            else:
                console.status(line)

    def on_batch() -> None:
        nonlocal closed
        if captioner is not None:
            captioner.run_rounds()
            take_marks()
        if console.gone and not closed:  # nothing reads the words any more: stop as Ctrl-C does
            closed = True
            raise OutputClosed

    def take_marks() -> None:
        """Each Enter typed is a mark at "now" on the audio clock: the newest audio, plus the wall
        time between its arrival and the Enter."""
        if keys is None or captioner is None:
            return
        for pressed, note in keys.take():
            captioner.mark(max(clock.values()) / SAMPLE_RATE + max(0.0, pressed - heard_at[0]), note)

    def on_event(ev: AudioEvent) -> None:
        if captioner is not None and ev.kind == "overflow":
            captioner.overflow(ev)
        console.note(f"event {ev.kind} {ev.source}: {ev.message}")

    try:
        with capture:
            names = ", ".join(f"{s} ← {n}" for s, n in capture.device_names.items())
            hint = ("; Enter marks this moment, after a note if you like"
                    if keys is not None and keys.active and captioner is not None and captioner.recorder is not None else "")
            captioned = f", captioned by {engine_line(captioner.setup)}" if captioner is not None else ""
            console.note(f"listening: {names}{captioned} (Ctrl-C to stop{hint})")
            if args.record is not None:
                for src, path in record_paths(args.record, capture.sources).items():
                    writers[src] = WavWriter(path)  # one that cannot be created: AudioFileError, said in a line
            try:
                capture_loop(capture, on_block, args.seconds, on_event, on_batch)
            except KeyboardInterrupt as stop:
                console.note("stopping: the output was closed" if isinstance(stop, OutputClosed) else "stopping")
                halted = True
    except BaseException:
        take_marks()
        if keys is not None:
            keys.close()
        console.close()
        if captioner is not None and not any(clock.values()):
            captioner.abandon()  # the capture never started: no empty session is left behind
        elif captioner is not None:
            captioner.finish(max(clock.values()) / SAMPLE_RATE)  # the words so far are saved, the session ended
        raise
    if args.seconds is None or halted:  # Ctrl-C: keep the tail the stop flushed
        capture_loop(capture, on_block, None, on_event, on_batch)
    take_marks()
    if keys is not None:
        keys.close()
    console.close()
    if captioner is not None:
        captioner.finish(max(clock.values(), default=0) / SAMPLE_RATE)
    for src, w in (*writers.items(), *stopped.items()):
        w.close()
        early = " (stopped early: it could not be written)" if src in stopped else ""
        print(f"recorded {w.frames / SAMPLE_RATE:.2f} s of {src} audio to {w.path}{early}", flush=True)
    print(f"done after {time.monotonic() - started:.1f} s", flush=True)
    if args.seconds is not None and not halted and (
            short := [s for s, c in clock.items() if c < round(args.seconds * SAMPLE_RATE)]):
        got = ", ".join(f"{clock[s] / SAMPLE_RATE:.1f} s of {s} audio" for s in short)
        raise AudioDeviceError(f"got only {got} of the {args.seconds:g} s asked for: the device was lost "
                               f"and did not come back within {LATE_S:g} s (what was captured is kept)")
    return 0
