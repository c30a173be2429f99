"""Which model this computer can caption with: each installed pack measured live, the largest that keeps up chosen.

PRODUCT.md's "device-measured model choice" (``captioner models choose``). A bigger Whisper hears
better but costs more per round, and what a laptop keeps up with depends on its NPU, its CPU, its
power mode and the step: only a measurement on the machine itself tells. For each pack the real
engine captions real speech (:func:`speech_sample`: 22.8 s, three read sentences with pauses, so
that live, opening and closing rounds all run) paced at real time, on the provider and at the step
the user's settings name, with the bounded-lag rule of :mod:`~captioner.engine.overload` applied as
in the app. The sessions of every graph are opened (the NPU's compiled) before the audio starts, as
a live session does.

A pack **keeps up** (:attr:`Trial.verdict`) when, at the user's step, nothing was skipped, the step
was never lengthened, and its compute takes at most :data:`MAX_SHARE` of real time across the
streams the settings caption (two unmixed sources are two streams on one worker): the other half is
for the rest of the computer's work, a busier moment and a power mode that slows the chip. The
choice (:func:`choose`) is the largest pack (by parameters, :attr:`~captioner.models.pack.Dims.parameters`)
that keeps up and can hear the settings' language: an English-only pack only where the language is
English (on ``auto`` it would hear every language as English). Ties go to the lighter compute.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np

from captioner.core import EngineUpdate
from captioner.engine import StreamConfig, Transcriber
from captioner.engine.overload import LagReport
from captioner.models.catalog import KNOWN_MODELS, KnownModel

__all__ = ["MAX_SHARE", "SAMPLE", "Cancelled", "Trial", "Verdict", "choose", "hears", "measure", "room_for",
           "speech_sample"]

MAX_SHARE = 0.5  # the engine's compute may take at most this share of real time (all streams)
SAMPLE = "speech_sample.wav"  # captioner/resources: LJ Speech, public domain (its .LICENSE)

Verdict = Literal["keeps up", "little room", "slower", "too slow"]


def speech_sample() -> Path:
    """The bundled recording of real speech (16 kHz mono WAV, 22.8 s; ``speech_sample.LICENSE``)."""
    return Path(str(resources.files("captioner") / "resources" / SAMPLE))


@dataclass(frozen=True, slots=True)
class Trial:
    """One pack captioning the sample live on this machine.

    Attributes:
        name: the pack's name.
        parameters: the model's size (weights).
        multilingual: the pack hears other languages than English.
        provider: the provider that ran the graphs (``"CPU"``, ``"QNN-HTP"``, ...).
        step_s: the step the user chose (the rule may have lengthened it: ``lag.longest_step_s``).
        streams: the streams the settings caption at once (1, or 2 for two unmixed sources).
        audio_s: seconds of speech captioned.
        compute_rtf: the engine's compute per second of audio (one stream).
        lag: the bounded-lag rule's record (skips, the longest step, lag max and p95).
        latency_s: median seconds from a word's end in the audio to its first showing.
        words: words transcribed.
    """

    name: str
    parameters: int
    multilingual: bool
    provider: str
    step_s: float
    streams: int
    audio_s: float
    compute_rtf: float
    lag: LagReport
    latency_s: float
    words: int

    @property
    def share(self) -> float:
        """The share of real time the engine's compute takes for all the streams."""
        return self.compute_rtf * self.streams

    @property
    def verdict(self) -> Verdict:
        """"too slow": audio was skipped, or the compute took longer than the audio (a recording too
        short for the rule to act); "slower": kept up only by lengthening the step (captions every
        2–3 s); "little room": kept up at the step but with compute over :data:`MAX_SHARE` of real
        time (a busier moment or another source would fall behind); else "keeps up"."""
        if self.lag.skips or self.share > 1.0:
            return "too slow"
        if self.lag.step_changes:
            return "slower"
        return "little room" if self.share > MAX_SHARE else "keeps up"

    def to_json(self) -> dict[str, Any]:
        """The trial as JSON (``models choose --json``), with its share and verdict."""
        out = asdict(self)
        out["lag"] = self.lag.to_json()
        return {**out, "share": round(self.share, 4), "verdict": self.verdict}


def hears(trial: Trial, language: str, task: str = "transcribe") -> bool:
    """Whether the pack can caption in the settings' ``language`` and ``task`` (an English-only pack
    transcribes English only; ``auto`` may be any language)."""
    return trial.multilingual or (language == "en" and task == "transcribe")


def choose(trials: list[Trial], language: str, task: str = "transcribe") -> Trial | None:
    """The largest pack that keeps up and hears ``language`` (ties: the lighter compute); None if none."""
    fit = [t for t in trials if t.verdict == "keeps up" and hears(t, language, task)]
    return max(fit, key=lambda t: (t.parameters, -t.share), default=None)


def room_for(chosen: Trial, installed: Collection[str], language: str, task: str = "transcribe",
             ) -> tuple[KnownModel, float] | None:
    """The next size up among the models captioner installs by name (not installed, hearing
    ``language``; for English the ``.en`` one) when it would likely keep up too, with its estimated
    share of real time: the chosen pack's, scaled by the two sizes (a round's encoder and decoder work
    grows about with the weights; the fixed costs, speech detection and features, do not, so the
    estimate is on the high side: tiny.en 8 % and base 10 % of real time measured on the CI's CPU at
    a 2 s step, where the sizes say 2×). None when there is none, or it would not fit :data:`MAX_SHARE`."""
    larger = [m for m in KNOWN_MODELS.values() if m.millions * 1e6 > 1.5 * chosen.parameters
              and m.pack_name not in installed and (m.multilingual or (language == "en" and task == "transcribe"))]
    if not larger:
        return None
    size = min(m.millions for m in larger)
    pick = min((m for m in larger if m.millions == size), key=lambda m: m.multilingual == (language == "en"))
    share = chosen.share * size * 1e6 / chosen.parameters
    return (pick, share) if share <= MAX_SHARE else None


class Cancelled(Exception):
    """The measurement was stopped before its end (the settings dialog closed, the app quit)."""


def measure(engine: Transcriber, config: StreamConfig, audio: np.ndarray, *, streams: int = 1,
            stop: Callable[[], bool] = lambda: False,
            compiled: Callable[[int, int], None] | None = None) -> Trial:
    """Caption ``audio`` (16 kHz mono float32) live with ``engine`` at ``config``'s step, paced at real
    time (it takes as long as the audio), and say how it kept up. Opens the engine's sessions first
    (``Runtime.prepare``: the NPU's graphs compiled, the cache kept, ``compiled(done, total)`` after
    each; minutes the first time on a Snapdragon); an English-only pack hears English whatever
    ``config.language`` says.

    Raises:
        CaptionerError: the pack cannot run (no provider could open it, a language it lacks).
        Cancelled: ``stop()`` turned True (asked after every round).
    """
    pack = engine.model.pack
    if not pack.multilingual:
        config = replace(config, language="en", task="transcribe")
    engine.check(config)
    engine.runtime.prepare(progress=compiled)  # not stopped there: a compile that raises falls back to the CPU

    def stopped(update: EngineUpdate, last: bool) -> None:
        if stop():
            raise Cancelled

    words, info = engine.transcribe(audio, config, realtime=True, on_update=stopped)
    assert info.lag is not None  # realtime: the rule's record
    latency = statistics.median(w.emitted_at - w.end for w in words) if words else 0.0
    return Trial(engine.name, pack.dims.parameters, pack.multilingual, info.provider.chosen, config.step_s, streams,
                 info.audio_s, info.compute_rtf, info.lag, latency, len(words))
