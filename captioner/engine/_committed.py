"""The committed-token log of a stream and its conversion to word updates (private to ``stream.py``).

The NPUsper reference keeps committed *tokens* and retracts tokens (``[REPLACE_PREVIOUS n]``). The
app wants words (``EngineUpdate.retract`` counts words). :class:`CommittedLog` keeps the reference's
token list and, after each round, re-derives the words from the first word a change can touch and
diffs them with the words already published, so any token operation (speculative retraction,
overlap replacement, a comma extending an earlier word) becomes a minimal word-level update.
"""

from __future__ import annotations

import bisect
import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from captioner.core import SAMPLE_RATE, Source, Word
from captioner.engine.align import WordSpan, split_words
from captioner.engine.model import SAMPLES_PER_FRAME
from captioner.engine.tokens import Vocabulary, normalize_word

__all__ = ["CommittedLog", "CommittedToken", "Shown", "keep_first_shown", "retracted_words", "token_spans"]


@dataclass(slots=True)
class CommittedToken:
    """A committed token: its id, its DTW word's audio span (absolute samples), when it was shown,
    ``heard_to``: the end of the input (absolute sample) of the round that first showed it (−1: not
    known), the latest place its word can be, and ``logprob``: its log-probability in the closing
    decode that committed it (NaN: not known; deviation 53 compares a later decode's reading with it)."""

    id: int
    start: int
    end: int
    emitted_at: float
    speculative: bool
    heard_to: int = -1
    logprob: float = math.nan


class CommittedLog:
    """The committed tokens of one stream and the words last published from them."""

    def __init__(self, vocab: Vocabulary, source: Source):
        self.vocab = vocab
        self.source: Source = source
        self.tokens: list[CommittedToken] = []
        self.words: list[Word] = []
        self._firsts: list[int] = []  # token index of each published word's first token
        self._mark = 0  # first token index that may differ from what was published
        self.draft_from: int | None = None  # tokens from here on are an open utterance's draft
        self.reread_from: int | None = None  # ... or words the next closing decode may read again (53)
        self._sealed: int | None = None  # tokens before this index are final: the next one opens a word

    def __len__(self) -> int:
        return len(self.tokens)

    def truncate(self, n: int) -> list[CommittedToken]:
        """Drop the tokens from index ``n`` on; returns them."""
        removed = self.tokens[n:]
        del self.tokens[n:]
        self._mark = min(self._mark, n)
        if self._sealed is not None and n < self._sealed:  # final words taken back (the stream never does)
            self._sealed = None
        if self.draft_from is not None:
            self.draft_from = min(self.draft_from, n)
        if self.reread_from is not None:
            self.reread_from = min(self.reread_from, n)
        return removed

    def set_draft(self, start: int | None) -> None:
        """Publish the words of tokens ``[start, end)`` as drafts (``Word.speculative``: shown dimmed,
        not final, since the utterance's closing round may still correct them); None: none are."""
        if start != self.draft_from:
            changed = [i for i in (start, self.draft_from) if i is not None]
            self._mark = min(self._mark, *changed)
            self.draft_from = start

    def set_reread(self, start: int | None) -> None:
        """Publish the words of tokens ``[start, end)`` as not final (``Word.speculative``) although
        their utterance closed: the last closed utterance's words, which the next closing decode may
        read again and correct (deviation 53); None: every closed utterance's words are final."""
        if start is not None and start >= len(self.tokens):
            start = None
        if start != self.reread_from:
            changed = [i for i in (start, self.reread_from) if i is not None]
            self._mark = min(self._mark, *changed)
            self.reread_from = start

    def seal(self) -> None:
        """Every token so far is final (their utterance closed, no decode reads them again): the
        next token opens a new word, so no later publish re-derives, and retracts, the last word
        (a next utterance whose first token has no leading space, or a language written without
        spaces, would otherwise join it)."""
        self._sealed = len(self.tokens)

    def confirm(self, start: int) -> None:
        """Make the speculative tokens from index ``start`` on committed (no later round will
        re-decode their audio)."""
        for tok in self.tokens[start:]:
            tok.speculative = False
        self._mark = min(self._mark, start)

    def extend(self, tokens: Sequence[CommittedToken]) -> None:
        """Append committed tokens."""
        self.tokens.extend(tokens)

    def tail_ids(self, n: int) -> tuple[int, ...]:
        """The ids of the last ``n`` tokens (empty if there are fewer)."""
        return tuple(t.id for t in self.tokens[len(self.tokens) - n :]) if n <= len(self.tokens) else ()

    def tail_words(self, n: int) -> list[bytes]:
        """Normalised texts of the last ``n`` committed words (fewer if there are fewer)."""
        return list(self.words_upto(len(self.tokens), n))

    def words_before(self, sample: int, n: int) -> tuple[bytes, ...]:
        """Normalised texts of the last ``n`` committed, non-speculative words that start before and
        end by audio position ``sample`` (the context of a round whose input starts there; a word
        that DTW collapsed onto the input's first sample is part of that input, which a closing
        round re-decodes: taken for context, it made the repetition guard stop that decode at once)."""
        return tuple(w for w, _ in self.timed_words_before(sample, n))

    def timed_words_before(self, sample: int, n: int) -> tuple[tuple[bytes, int], ...]:
        """:meth:`words_before`, each with its end (absolute sample of its last token's DTW end)."""
        upto = len(self.tokens)
        while upto and (self.tokens[upto - 1].end > sample or self.tokens[upto - 1].start >= sample
                        or self.tokens[upto - 1].speculative):
            upto -= 1
        return self._words_upto(upto, n)

    def context_before(self, sample: int, n: int, prefix: Sequence[int] = (),
                       redo_from: int | None = None) -> tuple[tuple[bytes, int], ...]:
        """The last ``n`` committed words that a round whose input starts at ``sample`` decodes on
        from (the repetition guard's context), each with its end sample.

        Without a forced ``prefix``: the words before the input by their times
        (:meth:`timed_words_before`). With one: the words before the prefix's committed run in the
        log, whatever their times (the drafted word a revising round reaches back to, just before
        ``redo_from``; else the carry's word, its last committed run). The round decodes on from
        that word, and DTW can time a word seconds off where a phrase is read again ("it was the
        epoch of belief, it was the epoch of …"): by their times, the words after the carry's word
        were context too, the decode's first word repeated them, and every live round stopped at
        its first token until the utterance closed."""
        at = None
        if prefix:
            at = redo_from - len(prefix) if redo_from is not None else None
            if at is None or at < 0 or [t.id for t in self.tokens[at : at + len(prefix)]] != list(prefix):
                at = self.run_at(prefix)
        return self.timed_words_before(sample, n) if at is None else self._words_upto(at, n)

    def words_upto(self, upto: int, n: int) -> tuple[bytes, ...]:
        """Normalised texts of the last ``n`` words of tokens ``[0, upto)``."""
        return tuple(w for w, _ in self._words_upto(upto, n))

    def _words_upto(self, upto: int, n: int) -> tuple[tuple[bytes, int], ...]:
        """(normalised text, end sample) of the last ``n`` words of tokens ``[0, upto)``."""
        ids: list[int] = []
        words: list[tuple[bytes, int]] = []
        end = 0
        for tok in reversed(self.tokens[:upto]):
            if not ids:
                end = tok.end
            ids.append(tok.id)
            if self.vocab.starts_word(tok.id):
                words.append((normalize_word(self.vocab.text_bytes(reversed(ids))), end))
                ids = []
                if len(words) == n:
                    break
        return tuple(words[::-1])

    def run_at(self, ids: Sequence[int], near: int | None = None, within: int = 64) -> int | None:
        """Token index of the run of tokens equal to ``ids`` among the last ``within`` tokens whose
        start is nearest to ``near`` (where a forced prefix, a committed word, was heard: just after
        its round's input start; None: the last run not shown speculatively), else None."""
        k = len(ids)
        runs = [i for i in range(max(0, len(self.tokens) - within), len(self.tokens) - k + 1)
                if k and [t.id for t in self.tokens[i : i + k]] == list(ids)]
        if near is None:  # the last committed run (drafts shown speculatively are not committed)
            runs = [i for i in runs if not any(t.speculative for t in self.tokens[i : i + k])]
        if not runs:
            return None
        return runs[-1] if near is None else min(runs, key=lambda i: abs(self.tokens[i].start - near))

    def end_of(self, ids: Sequence[int], near: int, within: int = 64) -> int | None:
        """End sample of the run :meth:`run_at` finds, else None."""
        i = self.run_at(ids, near, within)
        return None if i is None else self.tokens[i + len(ids) - 1].end

    def first_word_since(self, sample: int, lo: int = 0) -> int:
        """Token index of the first committed word that starts at or after audio position
        ``sample`` (``len(self)`` if none), searched from token ``lo`` on (the open utterance's first
        token, for a caller that asks every round: the log grows for the whole session)."""
        for i in range(lo, len(self.tokens)):
            tok = self.tokens[i]
            if (i == 0 or self.vocab.starts_word(tok.id)) and tok.start >= sample:
                return i
        return len(self.tokens)

    def word_start_since(self, sample: int, default: int) -> int:
        """Audio start of the first committed word that starts at or after ``sample`` (``default``
        if none)."""
        i = self.first_word_since(sample)
        return self.tokens[i].start if i < len(self.tokens) else default

    def words_since(self, sample: int) -> list[bytes]:
        """Normalised texts of the committed words whose first token starts at or after ``sample``
        (empty ones left out)."""
        # every word before the first that starts there starts before it: only the rest is read
        return [w for i, w in self.words_from(self.first_word_since(sample)) if self.tokens[i].start >= sample]

    def words_from(self, lo: int) -> list[tuple[int, bytes]]:
        """(first token index, normalised text) of each word of tokens ``[lo, end)`` (``lo`` a word's
        first token; empty words left out)."""
        out: list[tuple[int, bytes]] = []
        first = lo
        for i in range(lo + 1, len(self.tokens) + 1):
            if i == len(self.tokens) or self.vocab.starts_word(self.tokens[i].id):
                word = normalize_word(self.vocab.text_bytes(t.id for t in self.tokens[first:i]))
                if word:
                    out.append((first, word))
                first = i
        return out

    def publish(self) -> tuple[int, tuple[Word, ...]]:
        """(retract, words) turning the published words into the words of the current tokens."""
        mark = self._mark
        w0 = max(bisect.bisect_right(self._firsts, mark - 1) - 1, 0) if mark > 0 else 0
        t_from = self._firsts[w0] if w0 < len(self._firsts) else 0
        if self._sealed is not None and mark >= self._sealed:  # the words before the seal stay as they are
            w0, t_from = bisect.bisect_left(self._firsts, self._sealed), self._sealed
        new_words, new_firsts = self._derive(t_from, self.words[w0 - 1] if w0 > 0 else None)
        old = self.words[w0:]
        common = 0
        while common < min(len(old), len(new_words)) and _same_word(old[common], new_words[common]):
            common += 1
        self.words[w0:] = old[:common] + new_words[common:]  # a word already shown keeps its first-shown time
        self._firsts[w0:] = new_firsts
        self._mark = len(self.tokens)
        return len(old) - common, tuple(new_words[common:])

    def _derive(self, t_from: int, prev: Word | None) -> tuple[list[Word], list[int]]:
        """Words of tokens ``[t_from, end)``; times clamped to be monotonic after ``prev``; a word
        is shown from its first token's emission; text-less words (a lone space) are skipped."""
        ids = [t.id for t in self.tokens[t_from:]]
        words: list[Word] = []
        firsts: list[int] = []
        prev_end = prev.end if prev is not None else 0.0
        for f, k in split_words(ids, self.vocab):
            toks = self.tokens[t_from + f : t_from + f + k]
            text = self.vocab.decode(t.id for t in toks).strip()
            if not text:
                continue
            draft = any(t.speculative for t in toks) or (self.draft_from is not None and t_from + f >= self.draft_from)
            reread = self.reread_from is not None and t_from + f >= self.reread_from
            start = max(toks[0].start / SAMPLE_RATE, prev_end)
            end = max(max(t.end for t in toks) / SAMPLE_RATE, start)
            words.append(
                Word(
                    text=text,
                    start=start,
                    end=end,
                    emitted_at=min(t.emitted_at for t in toks),
                    source=self.source,
                    speculative=draft or reread,
                    rereadable=reread and not draft,
                )
            )
            firsts.append(t_from + f)
            prev_end = end
        return words, firsts


def _same_word(shown: Word, derived: Word) -> bool:
    """The same word to a reader: text, place, source and state; not ``emitted_at``.

    A word's emission time is a measurement (the clock of the round that made its tokens, wall
    time in a fast replay), so it must not decide what an update retracts: two runs of the same
    audio give the same updates whatever the machine's load, and a word shown once keeps the
    time it was first shown (:meth:`CommittedLog.publish`)."""
    return (shown.text, shown.start, shown.end, shown.source, shown.speculative, shown.rereadable) == (
        derived.text, derived.start, derived.end, derived.source, derived.speculative, derived.rereadable)


def token_spans(words: Sequence[WordSpan], n_tokens: int, start: int, end: int | None = None) -> list[tuple[int, int]]:
    """Absolute (start, end) samples of each token's DTW word, clamped to ``end`` (the real audio's
    end, when silence was appended for the encoder); empty without a valid alignment."""
    if not words:
        return []
    spans: list[tuple[int, int]] = [(start, start)] * n_tokens
    stop = end if end is not None else 2**62
    for w in words:
        span = (min(start + w.start_frame * SAMPLES_PER_FRAME, stop), min(start + w.end_frame * SAMPLES_PER_FRAME, stop))
        for i in range(w.first, min(w.first + w.count, n_tokens)):
            spans[i] = span
    return spans


class Shown(NamedTuple):
    """A retracted word: normalised text, first emission time, its audio span (absolute samples)
    where it was timed reliably (``None`` for a speculative word: its DTW was unreliable), and the
    end of the input of the round that first showed it (``heard_to``, −1: not known)."""

    text: bytes
    emitted_at: float
    span: tuple[int, int] | None
    heard_to: int = -1


# a re-emitted word is the shown one where their ends are within 0.5 s (DTW re-times a word that came
# out the same: whisper-base, 1 s step, 2 499 such words: end −0.28 … +0.26 s for 98 %, start ±0.77 s)
_SAME_PLACE_N = SAMPLE_RATE // 2


def retracted_words(tokens: Sequence[CommittedToken], vocab: Vocabulary) -> list[Shown]:
    """Each word of retracted ``tokens``, as :class:`Shown`."""
    words = []
    for f, k in split_words([t.id for t in tokens], vocab):
        toks = tokens[f : f + k]
        span = None if any(t.speculative for t in toks) else (toks[0].start, max(t.end for t in toks))
        words.append(Shown(normalize_word(vocab.text_bytes(t.id for t in toks)), toks[0].emitted_at, span,
                           toks[0].heard_to))
    return words


def keep_first_shown(new_tokens: list[CommittedToken], retracted: list[Shown], vocab: Vocabulary) -> None:
    """Words that re-emit retracted words with equal normalised text, at the same place, keep the
    earlier ``emitted_at`` (``stream.py`` deviations 10, 17, 20 and 51): the two word lists are aligned
    in order (``difflib``), so a word changed by a correction does not cost the words after it the time
    they were first shown, and an equal word elsewhere in the audio (a repeated "the") does not take
    a time from before it was spoken.

    The same place: the ends within 0.5 s, or the two spans overlap (a word that one decode's DTW
    stretched over the pause after it ends later there than in another); for a word whose DTW span
    collapsed onto one frame (a live round's last words squeezed onto a pause), a start before the
    end of the input of the round that showed it (that round had heard it); for a speculative word
    (its DTW was unreliable), anywhere."""
    if not retracted or not new_tokens:
        return
    groups = split_words([t.id for t in new_tokens], vocab)
    texts = [normalize_word(vocab.text_bytes(t.id for t in new_tokens[f : f + k])) for f, k in groups]
    old = [shown.text for shown in retracted]
    for block in difflib.SequenceMatcher(None, old, texts, autojunk=False).get_matching_blocks():
        for n in range(block.size):
            f, k = groups[block.b + n]
            shown, word = retracted[block.a + n], new_tokens[f : f + k]
            if not _same_place(shown, word[0].start, max(t.end for t in word)):
                continue  # an equal word elsewhere in the audio (a repeated "the")
            if shown.emitted_at < word[0].emitted_at:
                for t in word:
                    t.emitted_at, t.heard_to = shown.emitted_at, shown.heard_to


def _same_place(shown: Shown, start: int, end: int) -> bool:
    """Whether a re-emitted word spanning samples [start, end) is where ``shown`` was (:func:`keep_first_shown`)."""
    if shown.span is None:
        return True
    if abs(end - shown.span[1]) <= _SAME_PLACE_N or (start < shown.span[1] and shown.span[0] < end):
        return True
    collapsed = shown.span[1] - shown.span[0] < SAMPLES_PER_FRAME
    return collapsed and shown.span[0] - _SAME_PLACE_N <= start < shown.heard_to
