"""Scoring maths of the accuracy bench: WER/CER, word matching, latency, stutters.

Word and character error rates come from ``jiwer`` after Whisper's text normalisers
(``whisper_normalizer``: the English one for English, the basic one for other languages); both are
development dependencies (the ``dev`` extra) and are imported only when scoring starts
(:func:`scorer`). Corpus rates are total errors ÷ total reference units, never a mean of item rates.

Latency matching: every word (hypothesis and time reference) is normalised on its own, so a word may
become zero or several normalised tokens; the two token sequences are aligned with jiwer's
Levenshtein alignment, and each hypothesis word is paired with the reference word of its first
*equal* token. Normalising word by word is consistent on both sides, which is all the pairing needs.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from captioner.errors import CaptionerError

__all__ = [
    "CHARACTER_LANGUAGES",
    "Counts",
    "Scorer",
    "Stutter",
    "TimedWord",
    "find_stutters",
    "latency_stats",
    "leading_words",
    "match_words",
    "scorer",
    "summary",
]

logger = logging.getLogger(__name__)

CHARACTER_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "km", "yue"})  # no spaces between words: CER
_MAX_NGRAM = 4
_MIN_REPEATS = 3


@dataclass(frozen=True, slots=True)
class Counts:
    """Edit counts of one comparison: ``errors = substitutions + deletions + insertions``,
    ``ref`` = reference units (words or characters)."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    ref: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate(self) -> float | None:
        """errors ÷ reference units; None without reference units."""
        return self.errors / self.ref if self.ref else None

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.substitutions + other.substitutions, self.deletions + other.deletions,
                      self.insertions + other.insertions, self.ref + other.ref)

    def as_dict(self) -> dict:
        return {"substitutions": self.substitutions, "deletions": self.deletions, "insertions": self.insertions,
                "errors": self.errors, "ref": self.ref, "rate": self.rate}


@dataclass(frozen=True, slots=True)
class TimedWord:
    """A word as shown, with audio times (s) and, for live words, the simulated emission time (s)."""

    text: str
    start: float
    end: float
    emitted: float = math.nan


@dataclass(frozen=True, slots=True)
class Stutter:
    """An n-gram repeated ``repeats`` times in a row from normalised word ``index`` on."""

    ngram: str
    repeats: int
    index: int


class Scorer:
    """Normalisers and jiwer behind one object (see :func:`scorer`)."""

    def __init__(self) -> None:
        import jiwer
        from whisper_normalizer.basic import BasicTextNormalizer
        from whisper_normalizer.english import EnglishTextNormalizer

        self._jiwer = jiwer
        self._english = EnglishTextNormalizer()
        self._basic = BasicTextNormalizer()

    def normaliser(self, language: str) -> Callable[[str], str]:
        """Whisper's English normaliser for ``en``, the basic one for every other language."""
        return self._english if language == "en" else self._basic

    def normalise(self, text: str, language: str = "en") -> list[str]:
        """The normalised words of ``text``; for languages written without spaces (zh, ja, …) one
        "word" per character."""
        norm = self.normaliser(language)(text)
        if language in CHARACTER_LANGUAGES:
            return [c for c in norm if not c.isspace()]
        return norm.split()

    def word_counts(self, reference: str, hypothesis: str, language: str = "en") -> Counts:
        """Word edit counts after normalisation (characters for languages without spaces)."""
        return self._counts(self.normalise(reference, language), self.normalise(hypothesis, language))

    def char_counts(self, reference: str, hypothesis: str, language: str = "en") -> Counts:
        """Character edit counts of the normalised texts (single spaces between words; none for
        languages without spaces)."""
        sep = "" if language in CHARACTER_LANGUAGES else " "
        ref = [c if c != " " else "\u2581" for c in sep.join(self.normalise(reference, language))]
        hyp = [c if c != " " else "\u2581" for c in sep.join(self.normalise(hypothesis, language))]
        return self._counts(ref, hyp)

    def _counts(self, ref: list[str], hyp: list[str]) -> Counts:
        """Edit counts of two token lists (tokens hold no whitespace; jiwer splits at spaces)."""
        if not ref:
            return Counts(insertions=len(hyp))
        out = self._jiwer.process_words(" ".join(ref), " ".join(hyp)) if hyp else None
        if out is None:
            return Counts(deletions=len(ref), ref=len(ref))
        return Counts(out.substitutions, out.deletions, out.insertions, len(ref))

    def alignment(self, ref: list[str], hyp: list[str]) -> list[tuple[int, int]]:
        """(ref index, hyp index) of the tokens that jiwer's alignment marks equal."""
        if not ref or not hyp:
            return []
        out = self._jiwer.process_words(" ".join(ref), " ".join(hyp))
        pairs = []
        for chunk in out.alignments[0]:
            if chunk.type == "equal":
                pairs += [(chunk.ref_start_idx + k, chunk.hyp_start_idx + k)
                          for k in range(chunk.ref_end_idx - chunk.ref_start_idx)]
        return pairs


def scorer() -> Scorer:
    """A :class:`Scorer`.

    Raises:
        CaptionerError: jiwer or whisper_normalizer is not installed (they come with the dev extra).
    """
    try:
        return Scorer()
    except ImportError as exc:
        raise CaptionerError(f"the accuracy bench needs jiwer and whisper-normalizer ({exc.name} is missing); "
                             "install the dev extra: pip install -e '.[dev]'") from exc


def _word_tokens(words: Sequence[TimedWord], sc: Scorer, language: str) -> tuple[list[str], list[int]]:
    """Normalised tokens of each word on its own, and the word index of each token."""
    tokens: list[str] = []
    owner: list[int] = []
    for i, w in enumerate(words):
        for t in sc.normalise(w.text, language):
            tokens.append(t)
            owner.append(i)
    return tokens, owner


def match_words(hyp: Sequence[TimedWord], ref: Sequence[TimedWord], sc: Scorer,
                language: str = "en") -> list[tuple[int, int]]:
    """(hyp word index, ref word index) for every hypothesis word that has an equal token in the
    reference's alignment (its first such token decides), in hypothesis order."""
    h_tokens, h_owner = _word_tokens(hyp, sc, language)
    r_tokens, r_owner = _word_tokens(ref, sc, language)
    pairs: dict[int, int] = {}
    for ri, hi in sc.alignment(r_tokens, h_tokens):
        pairs.setdefault(h_owner[hi], r_owner[ri])
    return sorted(pairs.items())


def latency_stats(hyp: Sequence[TimedWord], ref: Sequence[TimedWord], sc: Scorer, language: str = "en") -> dict:
    """Per-word latency and start error of ``hyp`` against the time reference ``ref``.

    Returns:
        ``latency_s`` (emission − matched reference end, per matched word), ``latency_words`` (the
        index in ``hyp`` of the word each latency belongs to: unmatched words have none, so the
        latencies do not line up with ``hyp``), ``start_error_s`` (|start − matched reference
        start|), ``matched`` (count).
    """
    pairs = match_words(hyp, ref, sc, language)
    timed = [(h, r) for h, r in pairs if not math.isnan(hyp[h].emitted)]
    latency = [hyp[h].emitted - ref[r].end for h, r in timed]
    start_error = [abs(hyp[h].start - ref[r].start) for h, r in pairs]
    return {"latency_s": latency, "latency_words": [h for h, _ in timed], "start_error_s": start_error,
            "matched": len(pairs)}


def leading_words(words: Sequence[TimedWord], onset_s: float, margin_s: float = 0.1) -> int:
    """Words that start more than ``margin_s`` before the speech onset (words in leading silence)."""
    return sum(1 for w in words if w.start < onset_s - margin_s)


def summary(values: Sequence[float]) -> dict:
    """median / mean / p90 / count of ``values`` (None entries when empty)."""
    if not values:
        return {"median": None, "mean": None, "p90": None, "n": 0}
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]  # nearest-rank percentile
    return {"median": statistics.median(ordered), "mean": statistics.fmean(ordered), "p90": p90, "n": len(ordered)}


def _repeats(words: Sequence[str], i: int, n: int) -> int:
    """How many times ``words[i:i+n]`` occurs back to back from ``i`` on."""
    gram = list(words[i : i + n])
    count = 1
    while words[i + count * n : i + (count + 1) * n] == gram:
        count += 1
    return count


def _has_run(words: Sequence[str], gram: Sequence[str], repeats: int) -> bool:
    n = len(gram)
    target = list(gram) * repeats
    return any(list(words[i : i + n * repeats]) == target for i in range(len(words) - n * repeats + 1))


def find_stutters(hyp: Sequence[str], ref: Sequence[str], max_n: int = _MAX_NGRAM,
                  min_repeats: int = _MIN_REPEATS) -> list[Stutter]:
    """Runs of an n-gram (n ≤ ``max_n``) repeated ``min_repeats``+ times in a row in ``hyp`` that the
    reference does not have (the same n-gram ``min_repeats`` times in a row).

    ``hyp`` and ``ref`` are normalised words. Each run counts once, as its shortest repeating
    n-gram ("no no no no" is one 1-gram ×4, not also a 2-gram ×2); scanning resumes after the run.
    """
    found: list[Stutter] = []
    i = 0
    while i < len(hyp):
        hit = None
        for n in range(1, max_n + 1):
            if i + n * min_repeats > len(hyp):
                break
            reps = _repeats(hyp, i, n)
            if reps >= min_repeats:
                hit = (n, reps)
                break
        if hit is None:
            i += 1
            continue
        n, reps = hit
        gram = hyp[i : i + n]
        if not _has_run(ref, gram, min_repeats):
            found.append(Stutter(" ".join(gram), reps, i))
        i += n * reps
    return found
