"""Continuous speech for the accuracy bench (``captioner bench --join S``).

Streamed alone, a short recording is one utterance, and the stream's first utterance is decoded as
offline Whisper decodes it (``engine/stream.py`` deviation 27): the live engine's words are then
offline's. Speech that goes on without pauses is harder: utterances merge across sentences and
speakers, and the held-out long-forms of issue 25 lost 4.4 points against faster-whisper where the
development corpus's long-form (gaps of 0.6–1.2 s) lost 1.4. Joining the recordings we have, each cut
to its speech, a fraction of a second apart, reproduces that gap (docs/accuracy/continuous-issue25f.md).

:func:`join_halves` makes one recording of each half's English recordings (long-forms left out, the
manifest's order); :func:`joined_audio` builds its audio when the bench runs it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from captioner.audio import load_audio_file
from captioner.core import SAMPLE_RATE
from captioner.engine.stream import StreamConfig
from captioner.engine.vad import DIGITAL_SILENCE_DB, VAD_WINDOW
from captioner.errors import CaptionerError

__all__ = ["SPEAKER_GAP_FACTOR", "TRIM_LEVEL_DB", "join_halves", "joined_audio", "speech_part"]

TRIM_PAD_S = 0.1  # non-speech kept either side of a recording's speech
TRIM_LEVEL_DB = 15.0  # a window this far above the recording's quiet level may be speech: it is kept
SPEAKER_GAP_FACTOR = 2.5  # the gap at a change of speaker, in gaps (0.2 s -> 0.5 s)


def speech_part(audio: np.ndarray) -> np.ndarray:
    """``audio`` (float32 [samples], 16 kHz) cut to what may be speech, with :data:`TRIM_PAD_S`
    either side; the whole of it when nothing may be.

    What may be speech runs from the first to the last 32 ms window that the live engine's speech
    detector hears (its faint, weak and loud rules included) or that stands :data:`TRIM_LEVEL_DB`
    above the recording's quiet level (the 10th percentile of its window levels, digital silence
    left out). Silero rates radio turns under 0.1 that the reference transcribes (the start of
    Apollo 13's "Houston, we've had a problem", the second "23 37" of an Apollo 11 Canary pass):
    cut by Silero alone, a joined recording lost those words' audio and kept their reference words.
    Non-speech kept at an edge costs a join nothing; speech cut away is counted as deleted."""
    detector = StreamConfig().speech_detector()
    detector.feed(audio)
    detector.flush()
    span = detector.speech(0, audio.size)
    levels = detector.levels(0, audio.size // VAD_WINDOW * VAD_WINDOW)  # whole windows: no padded end
    sounded = levels[levels > DIGITAL_SILENCE_DB]
    loud = np.flatnonzero(levels >= np.percentile(sounded, 10) + TRIM_LEVEL_DB) if sounded.size else np.zeros(0, int)
    starts = ([span.start] if span else []) + ([int(loud[0]) * VAD_WINDOW] if loud.size else [])
    ends = ([span.end] if span else []) + ([(int(loud[-1]) + 1) * VAD_WINDOW] if loud.size else [])
    if not starts:
        return audio
    pad = round(TRIM_PAD_S * SAMPLE_RATE)
    return audio[max(0, min(starts) - pad) : max(ends) + pad]


def joined_audio(parts: Sequence[Path], gaps_s: Sequence[float]) -> np.ndarray:
    """float32 [samples]: each recording of ``parts`` cut to its speech, after its gap of silence
    (``gaps_s``, seconds, one per part; the first is 0)."""
    pieces: list[np.ndarray] = []
    for path, gap in zip(parts, gaps_s, strict=True):
        pieces += [np.zeros(round(gap * SAMPLE_RATE), np.float32), speech_part(load_audio_file(path))]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


def join_halves(items: Sequence[Any], gap_s: float) -> list[Any]:
    """One item per half (``joined-tune``, ``joined-check``, kind ``joined``) in place of the
    English recordings of ``items`` that are not long-forms, in their order: ``gap_s`` seconds apart,
    :data:`SPEAKER_GAP_FACTOR` × ``gap_s`` at a change of speaker, the references joined by spaces.
    ``items``: the accuracy bench's ``Item`` values (their ``parts``/``gaps_s`` say what to join).

    Raises:
        CaptionerError: ``gap_s`` outside (0, 5] s, or no English recording to join.
    """
    if not 0.0 < gap_s <= 5.0:
        raise CaptionerError(f"the gap between joined recordings must be in (0, 5] seconds, got {gap_s}")
    short = [it for it in items if it.language == "en" and it.kind != "longform"]
    if not short:
        raise CaptionerError("--join needs English recordings that are not long-forms")
    joined = []
    for half in dict.fromkeys(it.half for it in short):
        mine = [it for it in short if it.half == half]
        gaps = [0.0] + [gap_s * (1.0 if b.speaker == a.speaker else SPEAKER_GAP_FACTOR)
                        for a, b in itertools.pairwise(mine)]
        joined.append(replace(mine[0], id=f"joined-{half or 'all'}", text=" ".join(it.text for it in mine),
                              kind="joined", seconds=0.0, speaker=f"joined-{half or 'all'}",
                              parts=tuple(it.audio for it in mine), gaps_s=tuple(gaps)))
    return joined
