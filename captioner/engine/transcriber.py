"""The engine's one entry point: open a pack on a provider, then stream live audio or transcribe a file.

Used by the app (``commands/gui.py``), the CLI (``transcribe``, ``listen``) and the bench, so that
opening a pack, choosing the provider and checking the language happen in one place::

    engine = Transcriber.open(pack_dir, "auto", cache_dir=paths.cache)   # verified pack, runtime
    config = engine.check(StreamConfig(step_s=2.0, language="en"))      # unknown language: error now
    words, info = engine.transcribe(audio, config)                       # a file: 16 kHz mono float32
    print(info.compute_rtf, info.provider.chosen)
    stream = engine.stream(config, source="mic")                         # live: feed / step / finish
    engine.close()

Real-time factor (RTF) means seconds spent per second of audio (:func:`real_time_factor`); below 1
keeps up with real time. Two are reported and named for what they count:

* ``compute_rtf``: the engine's compute, the sum of its rounds' ``RoundStats.total_ms`` less the
  time they spent opening the model's graphs (``model_open_s``: a file transcribed as fast as it can be
  opens each graph in the first round that needs it, where a live session opens them all before it
  starts); the headline RTF of ``captioner transcribe`` and of the bench;
* ``wall_rtf``: the wall clock of the whole run, feeding included (about 1 with real-time pacing).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from captioner.core import SAMPLE_RATE, EngineUpdate, Provider, RoundStats, Source, Word, apply_update
from captioner.engine.onnx_model import OnnxAcousticModel
from captioner.engine.overload import LagGovernor, LagReport
from captioner.engine.runtime import EngineInfo, Runtime
from captioner.engine.stream import Stream, StreamConfig
from captioner.engine.vocabulary import VocabularyPrompt
from captioner.models.pack import Pack

__all__ = ["Transcriber", "TranscriptionInfo", "real_time_factor"]

logger = logging.getLogger(__name__)


def real_time_factor(seconds: float, audio_s: float) -> float:
    """Seconds spent per second of audio (0.0 for no audio)."""
    return seconds / audio_s if audio_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class TranscriptionInfo:
    """What :meth:`Transcriber.transcribe` measured.

    Attributes:
        model: pack name.
        config: the engine parameters used.
        provider: which execution provider ran the graphs, and why (fallbacks included).
        audio_s: seconds of audio.
        wall_s: wall-clock seconds of the run (feeding, pacing and every round).
        rounds: the statistics of every round, in order (skipped rounds have ``bucket == 0``).
        realtime: the audio was fed at real-time pace.
        lag: with ``realtime``, the lag over the run and the audio skipped by the bounded-lag rule
            (:mod:`~captioner.engine.overload`); None otherwise (a file read at full speed has no lag).
        gaps: the audio-clock spans (seconds) the rule skipped, in order.
        model_open_s: seconds the rounds spent opening the model's graphs (sessions created on first
            use; 0 where every session was open before the first round, as with ``realtime``).
    """

    model: str
    config: StreamConfig
    provider: EngineInfo
    audio_s: float
    wall_s: float
    rounds: tuple[RoundStats, ...]
    realtime: bool = False
    lag: LagReport | None = None
    gaps: tuple[tuple[float, float], ...] = ()
    model_open_s: float = 0.0

    @property
    def compute_s(self) -> float:
        """Seconds of engine compute: the sum of the rounds' ``total_ms`` less ``model_open_s``."""
        return max(0.0, sum(r.total_ms for r in self.rounds) / 1000.0 - self.model_open_s)

    @property
    def compute_rtf(self) -> float:
        """Engine compute ÷ audio duration (module docstring)."""
        return real_time_factor(self.compute_s, self.audio_s)

    @property
    def wall_rtf(self) -> float:
        """Wall clock ÷ audio duration (module docstring)."""
        return real_time_factor(self.wall_s, self.audio_s)

    def to_json(self) -> dict[str, Any]:
        """The ``stats`` object of ``captioner transcribe --json`` (``rtf`` is :attr:`compute_rtf`)."""
        ran = [r for r in self.rounds if r.bucket > 0]

        def mean(name: str) -> float:
            return round(float(np.mean([getattr(r, name) for r in ran])), 2) if ran else 0.0

        info = self.provider
        return {
            "audio_s": round(self.audio_s, 3),
            "wall_s": round(self.wall_s, 3),
            "rtf": round(self.compute_rtf, 4),
            "model_open_s": round(self.model_open_s, 3),
            "wall_rtf": round(self.wall_rtf, 4),
            "realtime": self.realtime,
            "model": self.model,
            "provider": info.chosen,
            "provider_detail": info.summary(),
            "provider_requested": info.requested,
            "provider_failed": [f"{a.label}: {a.reason}" for a in info.fallbacks if a.failed],
            "step_s": self.config.step_s,
            "language": self.config.language,
            "languages": list(self.config.languages),
            "task": self.config.task,
            "rounds": len(ran),
            "skipped_rounds": len(self.rounds) - len(ran),
            "chunks_per_round": [r.chunks for r in ran],
            "stop_reasons": {k: sum(1 for r in ran if r.stop_reason == k)
                             for k in sorted({str(r.stop_reason) for r in ran})},
            "mean_ms": {s: mean(f"{s}_ms") for s in ("mel", "encoder", "decoder", "validation", "dtw", "total")},
            "first_round_ms": round(ran[0].total_ms, 1) if ran else 0.0,
            "reinferred_rounds": sum(1 for r in ran if r.reinferred),
            "retried_rounds": sum(1 for r in ran if r.retried),
            "session_ms": {k: round(v, 1) for k, v in info.session_ms.items()},
            "lag": self.lag.to_json() if self.lag is not None else None,
            "gaps": [[round(a, 3), round(b, 3)] for a, b in self.gaps],
        }


class _SimClock:
    """Fast-mode clock: when the current engine call would run live, plus the wall time spent in it.

    A live engine call starts once its audio has arrived (``audio_s``) and the previous call is
    done, so the clock never runs backwards (a slow first round then delays the next ones, as it
    would live). ``emitted_at`` then reads what a live session on this machine would show (the
    reference harness's computation-aware replay). It is a measurement only: no decision of the
    engine reads it, so the words and updates do not depend on the machine's speed.

    ``opened()`` gives the seconds spent opening graphs so far (:attr:`Runtime.opened_s`): the time a
    call spends opening one is left out, because a live session opens them all before it starts.
    """

    def __init__(self, opened: Callable[[], float] = lambda: 0.0) -> None:
        self.audio_s = 0.0
        self._opened = opened
        self._start = 0.0
        self._last = 0.0
        self._since = time.perf_counter()
        self._opened_since = opened()

    def enter(self) -> None:
        self._start = max(self.audio_s, self._last)
        self._since = time.perf_counter()
        self._opened_since = self._opened()

    def __call__(self) -> float:
        spent = time.perf_counter() - self._since - (self._opened() - self._opened_since)
        self._last = max(self._last, self._start + spent)
        return self._last


class Transcriber:
    """A model pack on its ONNX Runtime sessions: makes live streams and transcribes files.

    Args:
        model: the pack's model; :meth:`open` and :meth:`from_pack` build it (a test may pass a
            wrapper that records what the stream asks of it).
        runtime: the runtime that runs ``model``'s graphs (provider, sessions).
        name: the pack's name (for logs, stored sessions and reports).
    """

    def __init__(self, model: OnnxAcousticModel, runtime: Runtime, name: str) -> None:
        self.model = model
        self.runtime = runtime
        self.name = name

    @classmethod
    def open(cls, pack_dir: Path, provider: Provider = "auto", *, cache_dir: Path | None = None,
             threads: int | None = None, verify: bool = True) -> Transcriber:
        """Load the pack in ``pack_dir`` (checksums too with ``verify``) and open it on ``provider``.

        Raises:
            ModelError: a missing, corrupt or outdated pack.
            ProviderError: an unknown provider name.
        """
        return cls.from_pack(Pack.load(pack_dir, verify=verify), provider, cache_dir=cache_dir, threads=threads)

    @classmethod
    def from_pack(cls, pack: Pack, provider: Provider = "auto", *, cache_dir: Path | None = None,
                  threads: int | None = None) -> Transcriber:
        """Open a loaded pack on ``provider`` (sessions are created as rounds need them, or all at once
        by ``runtime.prepare()``)."""
        runtime = Runtime(pack, provider, cache_dir=cache_dir, threads=threads)
        return cls(OnnxAcousticModel(pack, runtime), runtime, pack.root.name)

    def info(self) -> EngineInfo:
        """The provider that runs the graphs and the fallbacks on the way there."""
        return self.runtime.info()

    def check(self, config: StreamConfig) -> StreamConfig:
        """Return ``config`` once this model can run it.

        Raises:
            CaptionerError: an unknown language or task, or translation asked of an English-only model.
        """
        for language in (config.language, *config.languages):
            self.model.vocab.prompt(language, config.task)
        VocabularyPrompt(config.vocabulary, self.model.vocab)  # a model without <|startofprev|> says so
        return config

    def stream(self, config: StreamConfig, *, source: Source = "system",
               clock: Callable[[], float] = time.monotonic) -> Stream:
        """A live stream of one source (``feed``/``step``/``finish``); see :class:`~captioner.engine.stream.Stream`."""
        return Stream(self.model, self.check(config), source=source, clock=clock)

    def transcribe(self, audio: np.ndarray | Iterable[np.ndarray], config: StreamConfig, *, realtime: bool = False,
                   on_update: Callable[[EngineUpdate, bool], None] | None = None,
                   ) -> tuple[list[Word], TranscriptionInfo]:
        """Stream ``audio`` (16 kHz mono float32) through the live engine, one step at a time.

        Args:
            audio: the whole signal (n,), or its consecutive blocks of any sizes (a long file read as
                it goes, :class:`~captioner.audio.files.AudioFileReader`): both are cut into the same
                steps, so they give the same words.
            config: the engine's parameters (step, language, task, ...).
            realtime: feed at real-time pace (as a live source); else as fast as the machine allows.
                In real time, whatever has "arrived" by the wall clock is fed before each round and
                the bounded-lag rule (:class:`~captioner.engine.overload.LagGovernor`) skips what the
                engine cannot keep up with, as the app does; the lag and the skipped audio are in
                the returned info.
            on_update: called with every update as it comes, and True for the last one (from
                ``finish``: every committed word is final then).

        Returns:
            the words (committed and, at the end, none speculative) and what was measured.
        """
        step = round(config.step_s * SAMPLE_RATE)
        sim = _SimClock(lambda: self.runtime.opened_s)
        opened_before = self.runtime.opened_s
        stream = self.stream(config, clock=time.monotonic if realtime else sim)
        words: list[Word] = []
        rounds: list[RoundStats] = []

        def handle(update: EngineUpdate | None, last: bool = False) -> None:
            if update is None:
                return
            apply_update(words, update)
            if update.stats is not None:
                rounds.append(update.stats)
            if on_update is not None:
                on_update(update, last)

        governor = LagGovernor(config.step_s, bounded=realtime)
        gaps: list[tuple[float, float]] = []
        t0 = time.perf_counter()
        pos = 0
        steps = iter(_steps(audio, step))
        block = next(steps, None)
        while block is not None:
            if realtime:
                wait = t0 + (pos + len(block)) / SAMPLE_RATE - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)  # pacing a file at real time is the point of realtime
            pos += len(block)
            stream.feed(block)
            # in real time the next step is looked at first: what arrived while the engine was busy is
            # the backlog, fed before the rule; else it is read after the rounds, since reading may
            # wait (standard input as it is spoken) and the rounds of what came must not
            block = next(steps, None) if realtime else None
            while block is not None and t0 + (pos + len(block)) / SAMPLE_RATE <= time.perf_counter():
                pos += len(block)
                stream.feed(block)
                block = next(steps, None)
            sim.audio_s = pos / SAMPLE_RATE
            sim.enter()
            for update in governor.run(stream):
                if update.gap is not None:
                    gaps.append(update.gap)
                handle(update)
            if not realtime:
                block = next(steps, None)
        sim.enter()
        handle(stream.finish(), last=True)
        wall = time.perf_counter() - t0
        info = TranscriptionInfo(self.name, config, self.info(), pos / SAMPLE_RATE, wall, tuple(rounds),
                                 realtime, governor.report() if realtime else None, tuple(gaps),
                                 self.runtime.opened_s - opened_before)
        return words, info

    def close(self) -> None:
        """Release the ONNX Runtime sessions and the mapped weights."""
        self.runtime.close()


def _steps(audio: np.ndarray | Iterable[np.ndarray], step: int) -> Iterator[np.ndarray]:
    """``audio`` (an array, or blocks of any sizes) as consecutive pieces of ``step`` samples, the last shorter."""
    if isinstance(audio, np.ndarray):
        for pos in range(0, len(audio), step):
            yield audio[pos : pos + step]
        return
    pending = np.zeros(0, np.float32)
    for block in audio:
        pending = np.concatenate([pending, block]) if len(pending) else np.asarray(block, np.float32)
        while len(pending) >= step:
            yield pending[:step]
            pending = pending[step:]
    if len(pending):
        yield pending
