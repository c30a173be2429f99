"""``captioner transcribe AUDIO``: stream a file through the live engine, headless.

The file is fed by :meth:`~captioner.engine.Transcriber.transcribe` to the same
:class:`~captioner.engine.Stream` the app uses, one ``step`` of audio at a time, either as fast as
the machine allows or paced at real time (``--realtime``). Words go to stdout as they become final;
status lines and the summary go to stderr, so ``> out.txt`` keeps only text.

Printing (:mod:`captioner.commands._printer`): final words scroll up a phrase per line
(``[mm:ss.ss] text``), the draft stays on one live line of a terminal, and a pipe gets each final
line as it settles, without escape codes.

Ctrl-C keeps everything shown so far: the words on screen (the draft included) become final, are
printed, saved in the session and written to every export asked for; the exit code is then 130.
Export paths are checked before any work, so a typo does not cost a whole transcription.

``emitted_at`` in fast mode is simulated: the audio time fed so far plus the compute time of the
round in progress, i.e. what a live session on this machine would show (the reference harness's
computation-aware replay). With ``--realtime`` it is the wall clock.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from captioner.audio.files import STDIN, AudioFileReader
from captioner.commands import described, saved_line
from captioner.commands._engine import (
    add_engine_options,
    engine_line,
    engine_snapshot,
    language_summary,
    open_engine,
    spoken_languages,
)
from captioner.commands._printer import Console, TerminalLines, TextOut, WordPrinter
from captioner.commands._stop import OutputClosed, ignore_stops
from captioner.core import SAMPLE_RATE, EngineUpdate, RoundStats, Source, Word
from captioner.engine import TranscriptionInfo
from captioner.engine.overload import LagReport
from captioner.errors import AudioFileError, StorageError
from captioner.storage.paths import AppPaths
from captioner.transcript.cues import Gap
from captioner.transcript.export import (
    EXPORT_FORMATS,
    ExportFormat,
    atomic_write_text,
    export_words,
    render_json,
)
from captioner.transcript.recorder import SessionRecorder
from captioner.transcript.store import SessionStore, session_title

__all__ = ["register"]

logger = logging.getLogger(__name__)

_MIN_AUDIO_S = 0.1  # below this there is not one 20 ms frame worth decoding


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``transcribe`` subcommand."""
    p = subparsers.add_parser("transcribe", help="transcribe an audio file with the streaming engine",
                              description=described(__doc__))
    p.add_argument("audio", type=Path, metavar="AUDIO", help="WAV file (any rate/channels); other formats need "
                   "ffmpeg; - reads standard input (any format ffmpeg reads)")
    add_engine_options(p)
    p.add_argument("--realtime", action="store_true", help="feed the audio at real-time pace (as a live source)")
    for fmt in ("srt", "vtt", "txt", "json"):
        p.add_argument(f"--{fmt}", type=Path, metavar="FILE", help=f"write the transcript as {fmt.upper()}")
    p.add_argument("--title", metavar="TEXT", help="the session's title in the history (default: the file's name)")
    p.add_argument("--no-save", action="store_true", help="do not record the session in the history")
    p.set_defaults(func=_run)


def _load(path: Path) -> tuple[Iterator[np.ndarray], float | None]:
    """The file's 16 kHz blocks, read as the engine consumes them (a multi-hour file is never held
    whole), and its length in seconds when the header tells it (WAV). The first 0.1 s is read here,
    so a file with too little audio fails before the engine is opened."""
    reader = AudioFileReader(path)
    blocks = iter(reader)
    head: list[np.ndarray] = []
    for block in blocks:
        head.append(block)
        if sum(map(len, head)) >= _MIN_AUDIO_S * SAMPLE_RATE:
            break
    n = sum(map(len, head))
    if n == 0:
        raise AudioFileError(f"{path} contains no audio samples")
    if n < _MIN_AUDIO_S * SAMPLE_RATE:
        raise AudioFileError(f"{path} is only {n / SAMPLE_RATE * 1000:.0f} ms long; "
                             f"nothing to transcribe (at least {_MIN_AUDIO_S * 1000:.0f} ms needed)")
    return itertools.chain(head, blocks), reader.duration_s


def _named(audio: Path, *, path: bool = False) -> str:
    """The audio as the command names it: "standard input" for ``-``, else the file's name (the
    session's title when none is given), or with ``path`` the path as given (the first line)."""
    if str(audio) == STDIN:
        return "standard input"
    return str(audio) if path else audio.name


def check_targets(targets: Sequence[Path]) -> None:
    """Fail now, before any work, when an export file could not be written at the end.

    Raises:
        StorageError: a target is a folder, its folder does not exist or cannot be written.
    """
    for target in targets:
        folder = target.parent
        if target.is_dir():
            raise StorageError(f"cannot write {target}: it is a folder; give a file name")
        if not folder.is_dir():
            raise StorageError(f"cannot write {target}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
            raise StorageError(f"cannot write {target}: permission denied")


def _print_summary(stats: dict, rounds: Sequence[RoundStats], words: int, verbose: bool, err: TextOut) -> None:
    """One line for people (audio, speed, provider, language, words); the engine's counters with -v.

    Opening the model's graphs in the rounds that first need them (a file transcribed as fast as it
    can be) is named apart from the compute, which a live session's speed is: a 5 s clip's graphs take
    longer to open than the clip to transcribe."""
    opening = f"opening the model {stats['model_open_s']:.1f} s, " if stats["model_open_s"] >= 0.05 else ""
    err.write(
        f"{stats['audio_s']:.1f} s of audio in {stats['wall_s']:.1f} s on {stats['provider']} "
        f"({opening}compute {stats['rtf'] * stats['audio_s']:.1f} s, RTF {stats['rtf']:.3f}); "
        f"{language_summary(stats['language'], rounds, stats['languages'])}; {words} words\n"
    )
    if verbose:
        chunks = stats["chunks_per_round"]
        ms = stats["mean_ms"]
        err.write(
            f"rounds {stats['rounds']} (skipped {stats['skipped_rounds']}), chunks per round: "
            f"mean {np.mean(chunks) if chunks else 0:.2f}, min {min(chunks, default=0)}, max {max(chunks, default=0)}; "
            f"stops {stats['stop_reasons']}\n"
            f"mean per round: mel {ms['mel']:.1f} ms, encoder {ms['encoder']:.1f} ms, decoder {ms['decoder']:.1f} ms, "
            f"validation {ms['validation']:.1f} ms, dtw {ms['dtw']:.1f} ms, total {ms['total']:.1f} ms; "
            f"first round {stats['first_round_ms']:.0f} ms; sessions created {len(stats['session_ms'])} "
            f"in {sum(stats['session_ms'].values()):.0f} ms\n"
        )
    if stats["provider_failed"] or stats["provider_requested"] != "auto":
        err.write(f"provider: {stats['provider_detail']}\n")
    lag = stats.get("lag")
    if lag is not None:  # --realtime: the bounded-lag rule's record (engine/overload.py)
        err.write(LagReport(**lag).summary() + "\n")


def _targets(args: argparse.Namespace) -> list[tuple[ExportFormat, Path]]:
    return [(fmt, getattr(args, fmt)) for fmt in EXPORT_FORMATS if getattr(args, fmt) is not None]


def _save_outputs(args: argparse.Namespace, words: list[Word], stats: dict, session: dict[str, Any],
                  gaps: Sequence[Gap] = ()) -> list[Path]:
    """Write every export asked for; the JSON is ``sessions export --json``'s document plus ``stats``."""
    committed = [w for w in words if not w.speculative]
    written = []
    for fmt, target in _targets(args):
        if fmt == "json":
            doc = json.loads(render_json(committed, session, gaps))
            doc["stats"] = stats
            atomic_write_text(target, json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
        else:
            export_words(committed, target, fmt, gaps=gaps)
        written.append(target)
    return written


def _shown_as_final(words: list[Word], source: Source = "system") -> EngineUpdate | None:
    """The update that makes every word on screen final (Ctrl-C keeps the draft the person saw)."""
    draft = [w for w in words if w.speculative]
    if not draft:
        return None
    return EngineUpdate(len(draft), tuple(dataclasses.replace(w, speculative=False) for w in draft), source=source)


def _run(args: argparse.Namespace, paths: AppPaths) -> int:
    if not args.no_save:
        paths.ensure()  # the app's folders (an export may go there)
    check_targets([target for _, target in _targets(args)])
    session_title(args.title or "")  # a bad title is refused before any work
    audio, audio_s = _load(args.audio)
    # a fresh machine installs the default model; paced as a live source, no round waits for a session
    setup = open_engine(args, paths, install_missing=True, open_sessions=args.realtime)
    engine = setup.engine
    err = TerminalLines(sys.stderr)
    info = engine.info()
    if info.fallbacks and info.requested != "auto":
        err.write(f"captioner: provider {info.requested!r} is not available; using {info.chosen} "
                  f"({'; '.join(f'{a.label}: {a.reason}' for a in info.fallbacks)})\n")
    language = setup.config.language
    err.write(f"transcribing {_named(args.audio, path=True)} ({f'{audio_s:.1f} s' if audio_s is not None else 'streamed'}) with "
              f"{engine_line(setup)}{', real time' if args.realtime else ''} (Ctrl-C stops and keeps the words)\n")
    console = Console(sys.stdout, sys.stdout.isatty(), note_out=err)
    printer = WordPrinter(console)
    recorder = None
    if not args.no_save:  # recorded as it happens: an interrupted run keeps what was shown
        recorder = SessionRecorder.start_or_keep(lambda: SessionStore.open(paths.sessions_db), model=engine.name,
                                                 provider=info.chosen, language=language,
                                                 title=args.title or _named(args.audio),
                                                 settings=engine_snapshot(setup.config), fallback_dirs=[paths.exports])
        if recorder.export_reason:
            err.write(f"captioner: this session cannot be saved ({recorder.export_reason}); "
                      "it is written to a file when it ends\n")
    rounds: list[RoundStats] = []
    gaps: list[tuple[float, float]] = []

    def on_update(update: EngineUpdate, last: bool) -> None:
        if update.stats is not None:
            rounds.append(update.stats)
        if update.gap is not None:
            gaps.append(update.gap)
        if recorder is not None:  # stored before it is printed: an interruption loses nothing shown
            recorder.apply(update)
        printer.update(update, last)
        if console.gone and not interrupted:  # nothing reads the words any more: stop as Ctrl-C does
            raise OutputClosed

    fed = [0]  # samples fed so far: the session's length even if decoding stops half-way

    def counted() -> Iterator[np.ndarray]:
        for block in audio:
            fed[0] += len(block)
            yield block

    interrupted = False
    started = time.perf_counter()
    try:
        try:
            words, result = engine.transcribe(counted(), setup.config, realtime=args.realtime, on_update=on_update)
            printer.finish()  # the engine's last update may be empty: the words held for a phrase end
        except KeyboardInterrupt as stop:
            interrupted = True
            ignore_stops()  # a second Ctrl-C (or SIGTERM) must not lose the saving
            console.note("captioner: the output was closed; keeping the words so far" if isinstance(stop, OutputClosed)
                         else "captioner: interrupted; keeping the words shown so far")
            on_update(_shown_as_final(printer.words) or EngineUpdate(), True)
            words = list(printer.words)
            wall = time.perf_counter() - started
            audio_heard = min(fed[0] / SAMPLE_RATE, wall) if args.realtime else fed[0] / SAMPLE_RATE  # read ahead
            fed[0] = round(audio_heard * SAMPLE_RATE)
            result = TranscriptionInfo(engine.name, setup.config, engine.info(), audio_heard, wall, tuple(rounds),
                                       args.realtime, None, tuple(gaps))
    finally:
        console.close()
        engine.close()
        unsaved = None  # the store took nothing and no fallback folder either: said after the exports
        if recorder is not None:
            heard = spoken_languages(rounds) if language == "auto" else []
            try:
                recorder.close(duration_ms=round(fed[0] / SAMPLE_RATE * 1000), language=", ".join(heard))
            except StorageError as exc:
                unsaved = exc
    try:
        if not words:
            err.write("captioner: no speech was recognised\n")
        stats = result.to_json()
        _print_summary(stats, rounds, len(words), bool(getattr(args, "verbose", False)), err)
        if recorder is not None and unsaved is None:
            session = recorder.store.get_session(recorder.session_id).to_json()
        else:
            session = {"title": _named(args.audio), "model": engine.name, "provider": info.chosen,
                       "language": ", ".join(spoken_languages(rounds)) or language,
                       "sources": ["system"], "duration_ms": round(fed[0] / SAMPLE_RATE * 1000)}
        written = _save_outputs(args, words, stats, session, [Gap(a, b, "system") for a, b in result.gaps])
        if written:
            err.write(f"wrote {', '.join(map(str, written))}\n")
        if unsaved is not None:
            err.write(f"captioner: {unsaved}\n")
            return 2
        if recorder is not None:
            err.write(saved_line(recorder, "; --no-save skips this") + "\n")
    finally:
        if recorder is not None:
            recorder.store.close()
    return 130 if interrupted else 0
