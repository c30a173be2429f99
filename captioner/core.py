"""Value types shared by every layer: audio blocks, words, engine updates and round statistics.

Time conventions (ARCHITECTURE.md §4):

* ``start``/``end`` of a :class:`Word` are seconds on the session's **audio clock**: the index of
  the sample at 16 kHz counted from the first captured sample of that source, divided by 16 000.
  They are not wall time, so a stalled machine never shifts subtitles.
* ``emitted_at`` is seconds since the session started, on the monotonic clock (what a latency
  measurement needs).
* :class:`AudioBlock` carries its start as an integer sample index at 16 kHz.

This module imports nothing from the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = [
    "CAPTURE_SOURCES",
    "END_SIGNALS",
    "PROVIDERS",
    "SAMPLE_RATE",
    "SOURCES",
    "AudioBlock",
    "AudioEvent",
    "CaptureSource",
    "EngineUpdate",
    "Provider",
    "RoundStats",
    "Source",
    "Word",
    "apply_update",
    "final_count",
    "stream_sources",
]

SAMPLE_RATE = 16_000  # Hz; everything after capture is 16 kHz mono float32

Source = Literal["system", "mic"]
SOURCES: tuple[Source, ...] = ("system", "mic")

# What the user captures: one source, or both (as two engine streams, or mixed into one).
CaptureSource = Literal["system", "mic", "both"]
CAPTURE_SOURCES: tuple[CaptureSource, ...] = ("system", "mic", "both")

# The execution-provider setting (engine/providers.py plans what each means on this machine):
# "auto" = NPU, then GPU, then CPU; a forced one falls back along the same order when unavailable.
Provider = Literal["auto", "qnn", "gpu", "cpu"]
PROVIDERS: tuple[Provider, ...] = ("auto", "qnn", "gpu", "cpu")

# The signals that end captioner as its user's own stop does (Ctrl-C, the tray's Quit): Ctrl-C, kill /
# log-out / shutdown / a service manager, the terminal closed. Names: a platform has those it has.
END_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


@dataclass(frozen=True, slots=True)
class Word:
    """One transcribed word.

    Attributes:
        text: the word as shown, with its leading space if it had one in the token stream
            stripped off (``"hello,"``); punctuation attached to a word stays with it.
        start: audio-clock start in seconds (see module docstring).
        end: audio-clock end in seconds, ``end >= start``.
        emitted_at: seconds since session start (monotonic clock) when the word was first shown.
        source: ``"system"`` (loopback / monitor) or ``"mic"``.
        speculative: True while the engine may still retract it (NPUSPER.md §11.7); such words
            are drawn dimmed and are not written to subtitle files.
        rereadable: speculative only because its sentence has closed and the next closing decode
            may read it once more (``engine/stream.py`` deviation 53), which changes a word
            rarely: "stable words only" shows it (a draft it hides). False for every other word.
    """

    text: str
    start: float
    end: float
    emitted_at: float = 0.0
    source: Source = "system"
    speculative: bool = False
    rereadable: bool = False


@dataclass(frozen=True, slots=True)
class RoundStats:
    """What one engine round did and what it cost.

    Attributes:
        round_index: 0-based count of decoding rounds of this stream.
        bucket: encoder bucket in seconds (3, 4, 5, 6, 10 or 30); 0 when the round was skipped.
        input_s: effective input length in seconds (carry + new audio).
        carry_s: carried-over audio in seconds at the start of the round.
        stop_reason: ``"backward_shift"``, ``"peak_margin"``, ``"repetition"``, ``"eot"``,
            ``"limit"``, ``"silence"``, ``"no_speech"`` (the speech detector found none),
            ``"short"`` or ``None``.
        tokens: tokens decoded this round (forced prefix excluded).
        chunks: decoder chunk graphs dispatched this round.
        mel_ms, encoder_ms, decoder_ms, validation_ms, dtw_ms: time per stage in milliseconds.
        total_ms: wall time of the whole round in milliseconds.
        provider: execution provider that ran the graphs (``"QNN-HTP"``, ``"CPU"``, ...).
        lag_s: audio clock of the newest captured sample minus the end of the processed audio.
        speculative: the round's words were emitted speculatively.
        reinferred: the round ran the 30 s re-inference fallback (NPUSPER.md §11.3).
        retried: the round's closing decode looked wrong by Whisper's own signs and was decoded
            again in the 30 s window (``engine/stream.py`` deviations 23–24; one more encoder pass),
            or the phrase guard stopped it and it was decoded again without that guard (37).
        language: the language the round was decoded in (detected when the stream's is "auto").
        closes: the round closed an utterance (its speech ended before the input did, or the
            stream finished): decoded to the end without the peak-margin stop, nothing carried.
        skipped_s: audio dropped undecoded by an overload skip (``stop_reason`` ``"skipped"``).
        drafted: tokens a closing round took from its draft words after the verifier confirmed
            them (``engine/decoder.py``, draft decoding).
        revised_s: seconds of an open utterance's drafted audio that a live round decoded again,
            its words replacing the drafts (``engine/stream.py`` deviation 20); 0 for other rounds.
    """

    round_index: int = 0
    bucket: int = 0
    input_s: float = 0.0
    carry_s: float = 0.0
    stop_reason: str | None = None
    tokens: int = 0
    chunks: int = 0
    mel_ms: float = 0.0
    encoder_ms: float = 0.0
    decoder_ms: float = 0.0
    validation_ms: float = 0.0
    dtw_ms: float = 0.0
    total_ms: float = 0.0
    provider: str = ""
    lag_s: float = 0.0
    speculative: bool = False
    reinferred: bool = False
    retried: bool = False
    closes: bool = False
    language: str = ""
    skipped_s: float = 0.0
    drafted: int = 0
    revised_s: float = 0.0


@dataclass(frozen=True, slots=True)
class EngineUpdate:
    """A change to the transcript of one source: first drop ``retract`` words, then append ``words``.

    Retraction counts only words previously emitted by the same source's engine stream. This one
    shape expresses speculative emission, overlap replacement and the 30 s re-inference
    (NPUSPER.md §11) without the consumers knowing about them.

    ``gap`` is the audio-clock span ``(start, end)`` in seconds that the engine dropped undecoded
    because it fell behind real time (``Stream.skip``); the transcript shows a gap marker there.

    ``settled`` (seconds on the audio clock, or None) says that nothing of the source is open: the
    last utterance closed and no later decode can read its words again, so every committed word
    emitted so far is final (no later update retracts it) and no later word starts before that
    time, the end of the audio the engine has heard for good. Without it only
    :func:`final_count`'s rule holds, which must keep the last word back: a closed sentence
    followed by a long silence would wait for the next speech.
    """

    retract: int = 0
    words: tuple[Word, ...] = ()
    stats: RoundStats | None = None
    source: Source = "system"
    gap: tuple[float, float] | None = None
    settled: float | None = None

    @property
    def is_empty(self) -> bool:
        """True when the update changes nothing."""
        return self.retract == 0 and not self.words and self.gap is None


def apply_update(words: list[Word], update: EngineUpdate) -> None:
    """Apply ``update`` in place to ``words``, the emitted words of one source, oldest first."""
    if update.retract < 0 or update.retract > len(words):
        raise ValueError(f"cannot retract {update.retract} of {len(words)} words")
    if update.retract:
        del words[len(words) - update.retract :]
    words.extend(update.words)


def stream_sources(source: CaptureSource, mix_both: bool = False) -> tuple[Source, ...]:
    """The engine streams a capture setting makes: "both" unmixed is two (system, mic), each
    labelled in the captions; "both" mixed is one ``"system"`` stream; one source is itself."""
    if source == "both":
        return ("system",) if mix_both else ("system", "mic")
    return (source,)


def final_count(words: Sequence[Word], *, finished: bool = False) -> int:
    """How many leading words of one source's emitted words are final (no later update can change them).

    A retraction removes the previous round's speculative words and at most the last committed word
    before them (NPUSPER.md §11.4, §11.8), so every committed word but the last is final; once the
    stream has finished, or an update says it ``settled``, every committed word is. The terminal
    printer and the live subtitle file both write words at this point.
    """
    committed = next((i for i, w in enumerate(words) if w.speculative), len(words))
    return committed if finished else max(0, committed - 1)


@dataclass(frozen=True, slots=True)
class AudioBlock:
    """A block of captured audio, already 16 kHz mono float32.

    Attributes:
        source: which capture produced it.
        start: index of the first sample on the source's audio clock (16 kHz samples).
        samples: float32 array of shape ``(n,)`` in [-1, 1].
    """

    source: Source
    start: int
    samples: np.ndarray = field(repr=False)

    @property
    def end(self) -> int:
        """Index one past the last sample (16 kHz samples)."""
        return self.start + len(self.samples)


@dataclass(frozen=True, slots=True)
class AudioEvent:
    """Something the user should know about the capture (device lost, reopened, overflow).

    Attributes:
        kind: ``"device_lost"``, ``"device_reopened"``, ``"device_error"``, ``"overflow"``.
        source: the capture it concerns.
        message: one sentence for the tray or the log.
        at: audio-clock sample index when it happened (an overflow: where its silence starts).
        seconds: an overflow's length: audio replaced by silence from ``at`` (the worker marks it as
            a gap in the transcript); 0 for other kinds.
    """

    kind: str
    source: Source
    message: str
    at: int = 0
    seconds: float = 0.0
