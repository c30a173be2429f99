"""``captioner transcribe AUDIO``: stream a file through the live engine, headless.

The file is fed by :meth:`~captioner.engine.Transcriber.transcribe` to the same
:class:`~captioner.engine.Stream` the app uses, one ``step`` of audio at a time, either as fast as
the machine allows or paced at real time (``--realtime``). Words go to stdout as they become final;
status lines and the summary go to stderr, so ``> out.txt`` keeps only text.

Printing: a word is final once it is neither speculative nor the last non-speculative word (the next
round may still extend that one, e.g. with a comma). A pipe gets final words only, one line per
engine round; a terminal also sees the pending tail, dimmed, redrawn in place. Should the engine ever
retract a word already printed, a ``(correction)`` line repeats the text from that word on.

``emitted_at`` in fast mode is simulated: the audio time fed so far plus the compute time of the
round in progress, i.e. what a live session on this machine would show (the reference harness's
computation-aware replay). With ``--realtime`` it is the wall clock.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from captioner.audio.files import AudioFileReader
from captioner.commands._engine import add_engine_options, open_engine
from captioner.commands._printer import WordPrinter
from captioner.core import SAMPLE_RATE, EngineUpdate, Word
from captioner.errors import AudioFileError
from captioner.storage.paths import AppPaths
from captioner.transcript.cues import Gap
from captioner.transcript.export import atomic_write_text, export_words, gap_to_json, word_to_json
from captioner.transcript.recorder import SessionRecorder
from captioner.transcript.store import SessionStore

__all__ = ["register"]

logger = logging.getLogger(__name__)

_MIN_AUDIO_S = 0.1  # below this there is not one 20 ms frame worth decoding


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``transcribe`` subcommand."""
    p = subparsers.add_parser("transcribe", help="transcribe an audio file with the streaming engine",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("audio", type=Path, metavar="AUDIO", help="WAV file (any rate/channels); other formats need ffmpeg")
    add_engine_options(p)
    p.add_argument("--realtime", action="store_true", help="feed the audio at real-time pace (as a live source)")
    for fmt in ("srt", "vtt", "txt", "json"):
        p.add_argument(f"--{fmt}", type=Path, metavar="FILE", help=f"write the transcript as {fmt.upper()}")
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


def _print_summary(stats: dict, err: TextIO) -> None:
    chunks = stats["chunks_per_round"]
    ms = stats["mean_ms"]
    err.write(
        f"audio {stats['audio_s']:.1f} s, compute {stats['rtf'] * stats['audio_s']:.1f} s: RTF {stats['rtf']:.3f} "
        f"(wall {stats['wall_s']:.1f} s) on {stats['provider']}\n"
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
        err.write(f"lag max {lag['max_s']:.2f} s, p95 {lag['p95_s']:.2f} s over {lag['rounds']} rounds; "
                  f"skipped {lag['skipped_s']:.1f} s of audio in {lag['skips']} skips (behind real time)\n")


def _save_outputs(args: argparse.Namespace, words: list[Word], stats: dict, gaps: Sequence[Gap] = ()) -> None:
    committed = [w for w in words if not w.speculative]
    for fmt in ("srt", "vtt", "txt"):
        target = getattr(args, fmt)
        if target is not None:
            export_words(committed, target, fmt, gaps=gaps)
    if args.json is not None:
        doc = {"words": [word_to_json(w) for w in committed], "gaps": [gap_to_json(g) for g in gaps], "stats": stats}
        atomic_write_text(args.json, json.dumps(doc, ensure_ascii=False, indent=1) + "\n")


def _run(args: argparse.Namespace, paths: AppPaths) -> int:
    audio, audio_s = _load(args.audio)
    setup = open_engine(args, paths, install_missing=True)  # a fresh machine installs the default model
    engine = setup.engine
    err = sys.stderr
    info = engine.info()
    if info.fallbacks and info.requested != "auto":
        err.write(f"captioner: provider {info.requested!r} is not available; using {info.chosen} "
                  f"({'; '.join(f'{a.label}: {a.reason}' for a in info.fallbacks)})\n")
    err.write(f"transcribing {args.audio} ({f'{audio_s:.1f} s' if audio_s is not None else 'streamed'}) with {engine.name} "
              f"on {info.chosen}, step {setup.config.step_s:g} s{', real time' if args.realtime else ''}\n")
    printer = WordPrinter(sys.stdout, sys.stdout.isatty())
    recorder = None
    if not args.no_save:  # recorded as it happens: an interrupted run keeps what was shown
        paths.ensure()
        recorder = SessionRecorder.start(SessionStore.open(paths.sessions_db), model=engine.name,
                                         provider=info.chosen, language=setup.config.language,
                                         title=args.audio.name)
    def on_update(update: EngineUpdate, last: bool) -> None:
        if recorder is not None:  # stored before it is printed: an interruption loses nothing shown
            recorder.apply(update)
        printer.update(update, last)

    fed = [0]  # samples fed so far: the session's length even if decoding stops half-way

    def counted() -> Iterator[np.ndarray]:
        for block in audio:
            fed[0] += len(block)
            yield block

    try:
        words, result = engine.transcribe(counted(), setup.config, realtime=args.realtime, on_update=on_update)
    finally:
        engine.close()
        if recorder is not None:
            recorder.close(duration_ms=round(fed[0] / SAMPLE_RATE * 1000))
            recorder.store.close()
    if not words:
        err.write("captioner: no speech was recognised\n")
    stats = result.to_json()
    _print_summary(stats, err)
    _save_outputs(args, words, stats, [Gap(a, b, "system") for a, b in result.gaps])
    if recorder is not None:
        err.write(f"saved as session {recorder.session_id} (captioner sessions show "
                  f"{recorder.session_id}); --no-save skips this\n")
    return 0
