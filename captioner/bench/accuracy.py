"""The accuracy section of ``captioner bench``: the live engine against the same pack run offline.

For every manifest item (real speech with a reference transcript, the format of the development
corpus' ``manifest.jsonl``; with ``--join``, each half's recordings joined into one continuous
recording, :mod:`~captioner.bench.joined`) and every non-speech signal (:mod:`captioner.bench.nonspeech`), one
process with **one** loaded model runs:

* **offline**: the pack as stock Whisper runs it: windows of at most 30 s, each zero-padded to 30 s
  and encoded unmasked (``encode(native_30s=True)``), decoded greedily until EOT wins (no minimum
  length, no hallucination tests; a runaway ends at 224 tokens), DTW word times over the whole
  window, clamped to its real frames. Audio longer than 30 s is cut like Whisper seeks: the next
  window starts at the start of the previous window's last word, which that window drops (it may be
  cut), unless the window reached the end of the audio. These words are the WER baseline and the
  **time reference**.
* **live** at each step size: a fresh :class:`~captioner.engine.Stream` fed one step at a time as
  fast as possible, then ``finish()``; the hypothesis is the final word list after every
  retraction. Emission times are simulated real time: a round starts when its audio has arrived
  (the stream's fed audio at that round) or when the previous round ends, whichever is later, and
  shows its words ``compute`` seconds later (the wall time of that ``step()``/``finish()`` call).
  The stream's ``clock`` returns the round number, so ``Word.emitted_at`` (first shown) says which
  round first showed each word.
* **faster-whisper** (optional, dev only; :mod:`captioner.bench.fw_reference`): the same weights in
  CTranslate2 with default decoding + VAD, and greedy without fallback; and the default decoding's
  word ends (word timestamps) as a second time reference.

Scores (:mod:`captioner.bench.scoring`): WER/CER after Whisper's normalisers, per item, per kind and
per language; per-word latency and start error against the offline words, and with faster-whisper
also the latency against its default decoding's word ends (``latency_fw_s``: an independent time
reference, the one issue 25 judges by); only matched words have a latency, and ``latency_words`` /
``latency_fw_words`` give the index in ``timed_words`` of the word each belongs to, and the
summary splits ``latency_fw_s`` into the words a recording's last update first showed and the rest
(``latency_fw_last_update_s``, ``latency_fw_before_s``); stutters; words emitted
on non-speech; compute RTF per mode and, for the live modes, where the compute went (encoder,
decoder, closing rounds, rounds in the 30 s window: ``compute_split``) and how much their captions flicker
(``changed_words``: shown words that a later update takes back and does not show again the same). Leading silence is judged against the speech onset that Silero
VAD finds (faster-whisper's copy, dev only; no padding), not against the offline words: our DTW puts
the first word of every window at 0.0 s, offline too. Items in another language than English need a multilingual
pack (an English-only pack skips them, said so).
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from captioner.audio import load_audio_file
from captioner.audio.resample import resample
from captioner.bench import nonspeech
from captioner.bench.joined import joined_audio
from captioner.bench.scoring import (
    Counts,
    Scorer,
    TimedWord,
    find_stutters,
    latency_stats,
    leading_words,
    summary,
)
from captioner.core import SAMPLE_RATE, Provider, RoundStats
from captioner.engine import Stream, StreamConfig, int8_kernel
from captioner.engine.align import align_words
from captioner.engine.decoder import decode_round
from captioner.engine.model import FRAME_S, SAMPLES_PER_FRAME, AcousticModel
from captioner.engine.tokens import normalize_word
from captioner.engine.validate import Stop
from captioner.errors import CaptionerError

__all__ = [
    "AccuracyOptions",
    "Item",
    "ModeRun",
    "OfflineValidator",
    "load_manifest",
    "run_accuracy",
    "run_live",
    "run_offline",
    "summarise",
]

logger = logging.getLogger(__name__)

WINDOW_S = 30
MAX_TOKENS = 224
_MANIFEST_FIELDS = ("id", "audio", "text", "language", "kind")


@dataclass(frozen=True, slots=True)
class Item:
    """One manifest entry: ``audio`` is an absolute path, ``seconds`` as the manifest says; a joined
    recording (:mod:`~captioner.bench.joined`) is ``parts`` cut to their speech, ``gaps_s`` apart."""

    id: str
    audio: Path
    text: str
    language: str
    kind: str
    seconds: float = 0.0
    speaker: str = ""
    half: str = ""
    parts: tuple[Path, ...] = ()
    gaps_s: tuple[float, ...] = ()


HALVES = ("tune", "check")
_SPEAKER_PATTERNS = (
    re.compile(r"^(\d+)-\d+-\d+"),  # LibriSpeech speaker-chapter-utterance (and its variants)
    re.compile(r"^(LJ)\d+-\d+$"),  # LJ Speech: one reader
    re.compile(r"^(vctk-p\d+)_"),  # VCTK speaker, clean and noisy versions together
    re.compile(r"^(cmuarctic-[a-z]+)-"),  # CMU ARCTIC speaker
)


def speaker_of(entry: dict) -> str:
    """A manifest entry's speaker: its ``speaker`` field, else read from the corpus id (LibriSpeech,
    LJ Speech, VCTK, CMU ARCTIC), else the id itself (one recording, one speaker)."""
    if entry.get("speaker"):
        return str(entry["speaker"])
    for pattern in _SPEAKER_PATTERNS:
        m = pattern.match(str(entry["id"]))
        if m:
            return m.group(1)
    return str(entry["id"])


def split_halves(entries: Sequence[dict], rotate: bool = False) -> dict[str, str]:
    """speaker -> ``"tune"`` or ``"check"``: every speaker's recordings in one half, the halves
    balanced per kind (kinds in manifest order; within one, speakers by most recordings, then id,
    each to the half with fewer recordings of that kind so far, ties to tune; a speaker already
    placed by an earlier kind stays). Deterministic; ``rotate`` swaps the halves."""
    half: dict[str, str] = {}
    kinds = list(dict.fromkeys(str(e["kind"]) for e in entries))
    for kind in kinds:
        counts: dict[str, int] = {}
        for e in entries:
            if e["kind"] == kind:
                counts[speaker_of(e)] = counts.get(speaker_of(e), 0) + 1
        load = {h: sum(n for spk, n in counts.items() if half.get(spk) == h) for h in HALVES}
        for spk, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if spk not in half:
                half[spk] = min(HALVES, key=lambda h: (load[h], HALVES.index(h)))
                load[half[spk]] += n
    if rotate:
        half = {spk: HALVES[1 - HALVES.index(h)] for spk, h in half.items()}
    return half


@dataclass(frozen=True, slots=True)
class AccuracyOptions:
    """What the accuracy section runs.

    Attributes:
        steps: live step sizes, seconds.
        nonspeech_s: seconds of each non-speech signal (0: none).
        nonspeech_kinds: which signals (:data:`captioner.bench.nonspeech.KINDS`).
        reference_ct2: a CTranslate2 Whisper folder for the faster-whisper reference, or None.
        fw_threads: CPU threads of the faster-whisper reference.
        vocabulary: the live engine's vocabulary (``--vocabulary``; :mod:`captioner.engine.vocabulary`):
            each live mode also reports its listed words, recalled and invented (:func:`listed_words`).
        settings: other :class:`~captioner.engine.StreamConfig` fields of the live modes
            (``--set FIELD=VALUE``): a rule's variant measured on both halves without editing the
            engine; recorded in the result.
        speed: every recording played this many times as fast (``--speed``, :func:`speed_perturbed`).
        paired: with ``settings``, each live mode runs twice on every item, with the engine's
            defaults (``live_2s``) and with the settings (``live_2s_set``), the two in turns first
            from item to item (``--paired``): both are timed in the same minutes of the machine.
            Latency and RTF are simulated from measured compute, and the same engine measured an
            hour apart on this 2-core machine differed by a quarter (offline RTF 0.155 and 0.113),
            more than most rules move them.
    """

    steps: tuple[float, ...] = (1.0, 2.0)
    nonspeech_s: float = 60.0
    nonspeech_kinds: tuple[str, ...] = nonspeech.KINDS
    reference_ct2: Path | None = None
    fw_threads: int = 2
    vocabulary: tuple[str, ...] = ()
    settings: tuple[tuple[str, Any], ...] = ()
    speed: float = 1.0
    paired: bool = False

    def live_runs(self, n: int) -> list[tuple[str, dict[str, Any]]]:
        """(mode suffix, StreamConfig fields) of each live run of item number ``n``, in the order run."""
        if not self.paired:
            return [("", dict(self.settings))]
        runs = [("", {}), (PAIRED_SUFFIX, dict(self.settings))]
        return runs if n % 2 else runs[::-1]


def speed_perturbed(audio: np.ndarray, speed: float) -> np.ndarray:
    """``audio`` (16 kHz) played ``speed`` times as fast: resampled as if it had been recorded at
    ``speed`` × 16 kHz, so its pitch moves with its tempo (speed perturbation, Ko et al. 2015). The
    same words in voices the corpus does not have, pauses and all stretched: a rule tuned on the
    corpus's speakers is checked on new ones without new recordings."""
    return audio if speed == 1.0 else resample(audio, round(SAMPLE_RATE * speed), SAMPLE_RATE)


@dataclass(slots=True)
class ModeRun:
    """One mode's output on one audio: words (with times), compute seconds, extra facts."""

    words: list[TimedWord]
    compute_s: float
    info: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.words)


def load_manifest(path: Path | Sequence[Path], kinds: Sequence[str] | None = None, limit: int | None = None,
                  half: str = "both", rotate: bool = False) -> list[Item]:
    """The items of one or several ``manifest.jsonl`` files (each one's audio paths relative to its own
    folder; several manifests' items in the order given), optionally only those of ``kinds``, of one
    ``half`` (``"tune"``, ``"check"``) and at most ``limit`` per kind (manifest order).

    The halves are :func:`split_halves` of each manifest on its own, joined (a speaker already placed
    by an earlier manifest keeps its half): a manifest's split does not depend on the filters nor on
    the manifests given with it, so the development corpus keeps its halves when a corpus of new
    speakers is added, and each added corpus has its kinds balanced over both halves.

    Raises:
        CaptionerError: unreadable file, a line that is not a JSON object with the required fields,
            an id given twice, a kind filter that matches nothing.
    """
    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    if not paths:
        raise CaptionerError("no manifest given")
    if half not in ("both", *HALVES):
        raise CaptionerError(f"unknown half {half!r}; choose tune, check or both")
    entries: list[tuple[Path, dict]] = []
    seen: dict[str, Path] = {}
    halves: dict[str, str] = {}
    for one in paths:
        first = len(entries)
        try:
            lines = one.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise CaptionerError(f"cannot read the manifest {one}: {exc.strerror or exc}") from exc
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CaptionerError(f"{one}:{n}: not JSON ({exc.msg})") from exc
            missing = [f for f in _MANIFEST_FIELDS if not isinstance(entry, dict) or f not in entry]
            if missing:
                raise CaptionerError(f"{one}:{n}: missing field(s) {', '.join(missing)}")
            key = str(entry["id"])
            if key in seen:
                raise CaptionerError(f"{one}:{n}: id {key!r} is also in {seen[key]}")
            seen[key] = one
            entries.append((one, entry))
        for speaker, side in split_halves([e for _, e in entries[first:]], rotate).items():
            halves.setdefault(speaker, side)
    items: list[Item] = []
    per_kind: dict[str, int] = {}
    for one, entry in entries:
        speaker = speaker_of(entry)
        if half != "both" and halves[speaker] != half:
            continue
        if kinds and entry["kind"] not in kinds:
            continue
        if limit is not None and per_kind.get(entry["kind"], 0) >= limit:
            continue
        per_kind[entry["kind"]] = per_kind.get(entry["kind"], 0) + 1
        items.append(Item(str(entry["id"]), one.parent / entry["audio"], str(entry["text"]), str(entry["language"]),
                          str(entry["kind"]), float(entry.get("seconds", 0.0)), speaker, halves[speaker]))
    if not items:
        what = (f" of kind {', '.join(kinds)}" if kinds else "") + (f" in the {half} half" if half != "both" else "")
        raise CaptionerError(f"{', '.join(map(str, paths))}: no items{what}")
    return items


# ------------------------------------------------------------------------------------------ offline
class OfflineValidator:
    """Plain greedy decoding for the offline reference: EOT ends the window as soon as it wins (no
    minimum length, no hallucination tests); :func:`decode_round`'s token limit ends a runaway."""

    def __init__(self) -> None:
        self.decoded: list[int] = []
        self.checked = 0
        self.last_peak_s = 0.0  # no attention test here (the TokenValidator protocol asks for it)
        self.stop: Stop | None = None

    def on_prediction(self, token: int, token_logit: float, eot_logit: float) -> Stop | None:
        if self.stop is None and eot_logit > token_logit:
            self.stop = Stop("eot", len(self.decoded))
        if self.stop is None:
            self.decoded.append(int(token))
        return self.stop

    def on_attention(self, attn_last: np.ndarray) -> Stop | None:
        self.checked += 1
        return self.stop

    def close(self) -> Stop | None:
        """Nothing is held back at the end of a window (``TokenValidator.close``)."""
        return self.stop


def _whole_frames(audio: np.ndarray) -> np.ndarray:
    rest = audio.size % SAMPLES_PER_FRAME
    return np.concatenate([audio, np.zeros(SAMPLES_PER_FRAME - rest, np.float32)]) if rest else audio


def run_offline(model: AcousticModel, audio: np.ndarray, language: str = "en", task: str = "transcribe") -> ModeRun:
    """Whisper's own way over ``audio`` (module docstring): words with absolute DTW times."""
    vocab = model.vocab
    prompt = vocab.prompt(language, task)
    window_n = WINDOW_S * SAMPLE_RATE
    words: list[TimedWord] = []
    windows = limits = 0
    pos = 0
    t0 = time.perf_counter()
    while pos < audio.size:
        chunk = _whole_frames(np.asarray(audio[pos : pos + window_n], np.float32))
        reaches_end = pos + window_n >= audio.size
        encoding = model.encode(chunk, native_30s=True)
        result = decode_round(model, encoding, prompt, (), OfflineValidator(), MAX_TOKENS)
        windows += 1
        limits += result.stop is None
        tokens = [t for t in result.tokens if t < vocab.eot]
        real = chunk.size // SAMPLES_PER_FRAME
        spans = []
        if tokens:
            # DTW over the whole window, as the live engine's 30 s decodes align, then clamped to the
            # real frames: cropped first, a clip of ~2 s whose last tokens attend to the padding put
            # every word at 0.0 s (the latency of its words then read as the clip's length); the
            # reference's alignment as it is, a collapsed one too (the engine's own fix left out)
            alignment = align_words(tokens, result.attn_align[: len(tokens)], vocab, redo_collapsed=False)
            spans = [(vocab.decode(tokens[w.first : w.first + w.count]).strip(), min(w.start_frame, real),
                      min(w.end_frame, real)) for w in alignment.words]
        advance = chunk.size
        if not reaches_end and len(spans) >= 2 and spans[-1][1] > 0:
            advance = spans[-1][1] * SAMPLES_PER_FRAME  # seek to the last (maybe cut) word; drop it here
            spans = spans[:-1]
        base = pos / SAMPLE_RATE
        words += [TimedWord(text, base + max(0, s) * FRAME_S, base + max(0, e) * FRAME_S) for text, s, e in spans
                  if text]
        pos += advance
    compute = time.perf_counter() - t0
    return ModeRun(words, compute, {"windows": windows, "token_limit_windows": limits})


# ------------------------------------------------------------------------------------------ live
class _RoundClock:
    """The stream's clock: returns the number of the round being run (0 at construction)."""

    def __init__(self) -> None:
        self.value = 0.0

    def __call__(self) -> float:
        return self.value


def listed_words(reference: str, hypothesis: str, vocabulary: Sequence[str]) -> dict[str, int]:
    """The vocabulary's words in a hypothesis: ``in_reference`` (occurrences in the reference),
    ``recalled`` (of those, found in the hypothesis) and ``invented`` (found beyond the reference's
    count), each word compared in the overlap-dedup form (:func:`~captioner.engine.tokens.normalize_word`)."""
    listed = {normalize_word(w.encode()) for e in vocabulary for w in e.split()} - {b""}
    ref = [normalize_word(w.encode()) for w in reference.split()]
    hyp = [normalize_word(w.encode()) for w in hypothesis.split()]
    return {"in_reference": sum(ref.count(w) for w in listed),
            "recalled": sum(min(ref.count(w), hyp.count(w)) for w in listed),
            "invented": sum(max(0, hyp.count(w) - ref.count(w)) for w in listed)}


def run_live(model: AcousticModel, audio: np.ndarray, step_s: float, language: str = "en",
             task: str = "transcribe", vocabulary: Sequence[str] = (), config: dict[str, Any] | None = None) -> ModeRun:
    """The live engine over ``audio`` one step at a time, then ``finish()`` (module docstring);
    ``config``: other :class:`~captioner.engine.StreamConfig` fields (:mod:`captioner.bench.jitter`),
    ``language="auto"`` among them: the app's default, the language detected instead of given."""
    clock = _RoundClock()
    fields = {"step_s": step_s, "language": language, "task": task, "vocabulary": tuple(vocabulary), **(config or {})}
    stream = Stream(model, StreamConfig(**fields), clock=clock)
    step_n = round(step_s * SAMPLE_RATE)
    arrival: list[float] = [0.0]  # per round number: audio time at which its input had arrived
    compute: list[float] = [0.0]
    stops: dict[str, int] = {}
    reinferred = retried = rounds = 0
    split = dict.fromkeys(COMPUTE_SPLIT, 0.0)

    shown_text: list[bytes] = []  # the captions as shown so far, normalised words
    changed = 0

    def run(call: Callable) -> None:
        nonlocal reinferred, retried, rounds, changed
        clock.value = float(len(arrival))
        arrival.append(stream.audio_s)
        t = time.perf_counter()
        update = call()
        compute.append(time.perf_counter() - t)
        rounds += update is not None
        if update is not None:
            new = [normalize_word(w.text.encode()) for w in update.words]
            if update.retract:
                changed += changed_words(shown_text[len(shown_text) - update.retract :], new)
                del shown_text[len(shown_text) - update.retract :]
            shown_text.extend(new)
        if update is not None and update.stats is not None:
            reason = str(update.stats.stop_reason)
            stops[reason] = stops.get(reason, 0) + 1
            reinferred += update.stats.reinferred
            retried += update.stats.retried
            _split_round(split, update.stats)

    for pos in range(0, audio.size, step_n):
        stream.feed(audio[pos : pos + step_n])
        run(stream.step)
    run(stream.finish)
    shown = [0.0] * len(arrival)  # simulated real time at which each round's words appear
    for k in range(1, len(arrival)):
        shown[k] = max(arrival[k], shown[k - 1]) + compute[k]
    words = []
    for w in stream.words:
        k = round(w.emitted_at)
        words.append(TimedWord(w.text, w.start, w.end, shown[k] if 0 < k < len(shown) else math.nan))
    return ModeRun(words, sum(compute), {"rounds": rounds, "stop_reasons": stops,
                                         "reinferred_rounds": reinferred, "retried_rounds": retried,
                                         "compute_split": {k: round(v, 4) for k, v in split.items()},
                                         "changed_words": changed,
                                         "max_backlog_s": max(s - a for s, a in zip(shown, arrival, strict=True))})


COMPUTE_SPLIT = ("encoder_s", "decoder_s", "closing_s", "full_window_s")


def changed_words(retracted: Sequence[bytes], replacement: Sequence[bytes]) -> int:
    """Shown words that an update takes back and that do not come back: the ``retracted`` words
    (normalised, :func:`~captioner.engine.tokens.normalize_word`) without an equal partner among the
    update's ``replacement`` words, matched in order (``difflib``), so one word put in or taken out
    does not count the words after it. What a reader sees flicker; a word re-shown with other
    punctuation or case is not counted."""
    matcher = difflib.SequenceMatcher(None, list(retracted), list(replacement), autojunk=False)
    return len(retracted) - sum(block.size for block in matcher.get_matching_blocks())


def _split_round(split: dict[str, float], stats: RoundStats) -> None:
    """Add one round's stage timings to a live run's compute split (seconds): its encoder (log-mel
    included) and decoder, and the whole round again when it closed an utterance and when it was
    heard in the 30 s window (what deviation 27 and the retries cost). Only the rounds whose stats
    an update carries count (``finish()`` reports its last round)."""
    split["encoder_s"] += (stats.mel_ms + stats.encoder_ms) / 1000.0
    split["decoder_s"] += stats.decoder_ms / 1000.0
    if stats.closes:
        split["closing_s"] += stats.total_ms / 1000.0
    if stats.bucket == 30:
        split["full_window_s"] += stats.total_ms / 1000.0


# ------------------------------------------------------------------------------------------ scoring
def speech_onset(audio: np.ndarray) -> float | None:
    """Seconds to the first speech in ``audio`` by Silero VAD (faster-whisper's, threshold 0.5, no
    padding); None when no speech is found or faster-whisper is not installed."""
    try:
        from faster_whisper.vad import VadOptions, get_speech_timestamps
    except ImportError:
        return None
    spans = get_speech_timestamps(np.asarray(audio, np.float32), VadOptions(speech_pad_ms=0))
    return spans[0]["start"] / SAMPLE_RATE if spans else None


PAIRED_SUFFIX = "_set"  # the live modes run with ``--set`` beside the engine's defaults (``--paired``)


def _mode_names(steps: Sequence[float], paired: bool = False) -> list[str]:
    suffixes = ("", PAIRED_SUFFIX) if paired else ("",)
    return ["offline", *(f"live_{s:g}s{x}" for s in steps for x in suffixes)]


def _score(item_text: str, language: str, run: ModeRun, reference: ModeRun | None, sc: Scorer, *,
           latency: bool, onset_s: float | None = None, fw_times: Sequence[TimedWord] | None = None) -> dict:
    """One mode's scores on one item; ``onset_s`` (speech onset) only for modes with word times;
    ``fw_times``: faster-whisper's timed words, the second latency reference (``latency_fw_s``)."""
    wer = sc.word_counts(item_text, run.text, language)
    cer = sc.char_counts(item_text, run.text, language)
    stutters = find_stutters(sc.normalise(run.text, language), sc.normalise(item_text, language))
    out = {"hypothesis": run.text, "wer": wer.as_dict(), "cer": cer.as_dict(), "compute_s": run.compute_s,
           "stutters": [{"ngram": s.ngram, "repeats": s.repeats, "index": s.index} for s in stutters],
           "words": len(run.words), "info": run.info}
    if latency and reference is not None:
        lat = latency_stats(run.words, reference.words, sc, language)
        out["latency_s"] = lat["latency_s"]
        out["latency_words"] = lat["latency_words"]
        out["start_error_s"] = lat["start_error_s"]
        out["matched"] = lat["matched"]
        out["timed_words"] = [[w.text, round(w.start, 3), round(w.end, 3), round(w.emitted, 3)] for w in run.words]
        if fw_times is not None:
            fw = latency_stats(run.words, fw_times, sc, language)
            out["latency_fw_s"], out["latency_fw_words"] = fw["latency_s"], fw["latency_words"]
    if onset_s is not None:
        out["leading_words"] = leading_words(run.words, onset_s)
        if run.words:
            out["first_start_minus_onset_s"] = run.words[0].start - onset_s
    return out


def _group(items: list[dict], mode: str) -> dict:
    """Corpus rates and pooled timing of ``items`` (per-item results) for ``mode``."""
    rows = [it["modes"][mode] for it in items if mode in it["modes"]]
    if not rows:
        return {}
    wer = sum((Counts(**{k: r["wer"][k] for k in ("substitutions", "deletions", "insertions", "ref")})
               for r in rows), Counts())
    cer = sum((Counts(**{k: r["cer"][k] for k in ("substitutions", "deletions", "insertions", "ref")})
               for r in rows), Counts())
    seconds = sum(it["seconds"] for it in items if mode in it["modes"])
    out = {"items": len(rows), "seconds": seconds, "wer": wer.rate, "cer": cer.rate, "ref_words": wer.ref,
           "errors": wer.errors, "deletions": wer.deletions, "stutters": sum(len(r["stutters"]) for r in rows),
           "compute_s": sum(r["compute_s"] for r in rows)}
    out["rtf"] = out["compute_s"] / seconds if seconds else None
    splits = [r["info"]["compute_split"] for r in rows if "compute_split" in r.get("info", {})]
    if splits:
        out["compute_split"] = {k: sum(x[k] for x in splits) for k in COMPUTE_SPLIT}
    if any("changed_words" in r.get("info", {}) for r in rows):
        out["changed_words"] = sum(r.get("info", {}).get("changed_words", 0) for r in rows)
    if any("latency_s" in r for r in rows):
        out["latency_s"] = summary([x for r in rows for x in r.get("latency_s", [])])
        out["start_error_s"] = summary([x for r in rows for x in r.get("start_error_s", [])])
    if any("latency_fw_s" in r for r in rows):
        out["latency_fw_s"] = summary([x for r in rows for x in r.get("latency_fw_s", [])])
        last, rest = _last_update_split(rows)
        out["latency_fw_last_update_s"], out["latency_fw_before_s"] = summary(last), summary(rest)
    if any("leading_words" in r for r in rows):
        out["leading_words"] = sum(r.get("leading_words", 0) for r in rows)
        out["first_start_minus_onset_s"] = summary([r["first_start_minus_onset_s"] for r in rows
                                                    if "first_start_minus_onset_s" in r])
    return out


def _last_update_split(rows: list[dict]) -> tuple[list[float], list[float]]:
    """The latencies against faster-whisper's ends of the words a recording's last update first
    showed (``finish()``'s closing decode: the words it corrected and those spoken after the last
    round), and of the rest: how much of a p90 is the end of the recordings."""
    last: list[float] = []
    rest: list[float] = []
    for r in rows:
        shown = [w[3] for w in r.get("timed_words", []) if not math.isnan(w[3])]
        if not shown:
            continue
        final = max(shown)
        for i, latency in zip(r.get("latency_fw_words", []), r.get("latency_fw_s", []), strict=True):
            (last if r["timed_words"][i][3] >= final else rest).append(latency)
    return last, rest


def summarise(items: list[dict], modes: list[str]) -> dict:
    """group -> mode -> corpus figures: ``english`` (every English item), each kind of the English
    items, each half of the English items (``half:tune``, ``half:check``) and each kind within a
    half (``tune:<kind>``, ``check:<kind>``), and ``language:xx`` for each other language."""
    english = [it for it in items if it["language"] == "en"]
    groups: dict[str, list[dict]] = {"english": english}
    for kind in dict.fromkeys(it["kind"] for it in english):
        groups[kind] = [it for it in english if it["kind"] == kind]
    for h in HALVES:
        groups[f"half:{h}"] = [it for it in english if it.get("half") == h]
    for h in HALVES:
        for kind in dict.fromkeys(it["kind"] for it in english):
            groups[f"{h}:{kind}"] = [it for it in english if it.get("half") == h and it["kind"] == kind]
    for lang in dict.fromkeys(it["language"] for it in items if it["language"] != "en"):
        groups[f"language:{lang}"] = [it for it in items if it["language"] == lang]
    return {name: {mode: _group(members, mode) for mode in modes} for name, members in groups.items() if members}


# ------------------------------------------------------------------------------------------ run
def run_accuracy(model: AcousticModel, items: Sequence[Item], options: AccuracyOptions, sc: Scorer,
                 progress: Callable[[str], None]) -> dict:
    """Every mode over every item and non-speech signal; the JSON-able result (module docstring)."""
    modes = _mode_names(options.steps, options.paired)
    fw = None
    if options.reference_ct2 is not None:
        from captioner.bench.fw_reference import FasterWhisperReference

        fw = FasterWhisperReference(options.reference_ct2, threads=options.fw_threads)
        modes += list(fw.modes)
    try:
        return _run_all(model, items, options, sc, progress, modes, fw)
    finally:
        if fw is not None:
            fw.close()


def _run_all(model: AcousticModel, items: Sequence[Item], options: AccuracyOptions, sc: Scorer,
             progress: Callable[[str], None], modes: list[str], fw) -> dict:
    languages = model.vocab.languages()
    results: list[dict] = []
    skipped: list[dict] = []
    t_start = time.perf_counter()
    for n, item in enumerate(items, 1):
        if item.language not in languages:
            skipped.append({"id": item.id, "why": f"the pack has no language {item.language!r}"})
            continue
        audio = joined_audio(item.parts, item.gaps_s) if item.parts else load_audio_file(item.audio)
        audio = speed_perturbed(audio, options.speed)
        seconds = audio.size / SAMPLE_RATE
        onset = speech_onset(audio)
        offline = run_offline(model, audio, item.language)
        row: dict[str, Any] = {"id": item.id, "kind": item.kind, "language": item.language, "seconds": seconds,
               "speaker": item.speaker, "half": item.half,
               "reference": item.text, "speech_onset_s": onset,
               "offline_words": [[w.text, round(w.start, 3), round(w.end, 3)] for w in offline.words], "modes": {}}
        row["modes"]["offline"] = _score(item.text, item.language, offline, None, sc, latency=False, onset_s=onset)
        fw_times = fw.word_times(audio, item.language) if fw is not None else None
        if fw_times is not None:
            row["fw_words"] = [[w.text, round(w.start, 3), round(w.end, 3)] for w in fw_times]
        for step in options.steps:
            for suffix, config in options.live_runs(n):
                mode = f"live_{step:g}s{suffix}"
                live = run_live(model, audio, step, item.language, vocabulary=options.vocabulary, config=config)
                row["modes"][mode] = _score(item.text, item.language, live, offline, sc, latency=True,
                                            onset_s=onset, fw_times=fw_times)
                if options.vocabulary:
                    row["modes"][mode]["listed"] = listed_words(item.text, live.text, options.vocabulary)
        if fw is not None:
            for mode, run in fw.transcribe(audio, item.language).items():
                row["modes"][mode] = _score(item.text, item.language, run, None, sc, latency=False)
        results.append(row)
        wers = ", ".join(f"{m} {row['modes'][m]['wer']['rate'] or 0:.1%}" for m in modes if m in row["modes"])
        progress(f"[{n}/{len(items)}] {item.id} ({seconds:.1f} s, {item.kind}): WER {wers}")
    noise = _nonspeech(model, options, fw, progress)
    return {
        "settings": {"steps": list(options.steps), "modes": modes, "paired": options.paired,
                     "nonspeech_s": options.nonspeech_s,
                     "reference_ct2": str(options.reference_ct2) if options.reference_ct2 else None,
                     "window_s": WINDOW_S, "max_tokens": MAX_TOKENS, "vocabulary": list(options.vocabulary),
                     "stream_config": dict(options.settings), "speed": options.speed},
        "items": results,
        "skipped": skipped,
        "summary": summarise(results, modes),
        "nonspeech": noise,
        "elapsed_s": time.perf_counter() - t_start,
        "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _nonspeech(model: AcousticModel, options: AccuracyOptions, fw, progress: Callable[[str], None]) -> dict:
    """Words each mode emits on each non-speech signal (every one is invented)."""
    out: dict = {}
    if options.nonspeech_s <= 0:
        return out
    for kind in options.nonspeech_kinds:
        audio = nonspeech.generate(kind, options.nonspeech_s)
        runs = {"offline": run_offline(model, audio)}
        for step in options.steps:
            for suffix, config in options.live_runs(1):
                runs[f"live_{step:g}s{suffix}"] = run_live(model, audio, step, vocabulary=options.vocabulary,
                                                           config=config)
        if fw is not None:
            runs.update(fw.transcribe(audio, "en"))
        out[kind] = {"seconds": options.nonspeech_s, "level_dbfs": nonspeech.LEVEL_DBFS[kind],
                     "modes": {m: {"words": len(r.words), "text": r.text, "compute_s": r.compute_s}
                               for m, r in runs.items()}}
        progress(f"non-speech {kind}: words " + ", ".join(f"{m} {len(r.words)}" for m, r in runs.items()))
    return out


# ------------------------------------------------------------------------------------------ entry
def _commit() -> str | None:
    """The git commit of the source tree this runs from (with ``-dirty``), or None outside git."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                                "captioner"], capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("-dirty" if dirty else "") if rev else None


def accuracy_bench(pack, items: Sequence[Item], options: AccuracyOptions, progress: Callable[[str], None], *,
                   provider: Provider = "cpu", threads: int = 0, label: str = "", sc: Scorer | None = None) -> dict:
    """Load ``pack`` once (every graph's session created up front, so no item pays for it) and run
    :func:`run_accuracy`; the result with the pack, machine, commit and thread facts.

    Raises:
        CaptionerError: scoring packages missing (before any work), bad audio, a model error.
    """
    import platform

    import onnxruntime as ort

    from captioner import __version__
    from captioner.bench.scoring import scorer
    from captioner.engine import Transcriber

    sc = sc or scorer()
    load_at_start = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    engine = Transcriber.from_pack(pack, provider, threads=threads or None)
    runtime, model = engine.runtime, engine.model
    t0 = time.perf_counter()
    for bucket in model.buckets:
        model.preload(bucket)
    progress(f"loaded {label or pack.root.name} ({runtime.provider}, {runtime.threads} threads) "
             f"in {time.perf_counter() - t0:.1f} s; {len(items)} item(s)")
    acc = run_accuracy(model, items, options, sc, progress)
    result = {
        "captioner": __version__,
        "commit": _commit(),
        "pack": {"label": label or pack.root.name, "path": str(pack.root), "multilingual": pack.multilingual,
                 "precision": pack.precision},
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "onnxruntime": ort.__version__, "cpus": os.cpu_count(),
                    "u8s8_saturates": int8_kernel.u8s8_saturates(),
                    "load_average_at_start": load_at_start},
        "provider": runtime.provider,
        "threads": runtime.threads,
        "accuracy": acc,
    }
    runtime.close()
    return result
