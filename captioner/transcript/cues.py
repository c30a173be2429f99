"""Words → subtitle cues: readable line lengths, sane durations, times that players accept.

A cue holds at most ``max_lines`` lines of at most ``max_line_chars`` characters and lasts 1–7 s.
Cues end at sentence ends (not after a title such as "Mrs." or an initial such as "J.", whose full
stop ends no sentence), at a change of source and after a long silence; when a cue would grow
past its limits it is split at the last comma, else at the longest pause of at least 0.5 s, where
the part before holds a third of its text, else before the last word that opens a phrase ("to",
"the", "and", …) where half of it does, else just before the word that does not fit: no cue of a
sentence's last word alone, none that ends on "to the". A cue of two lines breaks them after a
clause or before a phrase where that keeps them near even, never after "as to" or inside a name.
Times are integer milliseconds on the audio clock (0 = the first captured sample): monotonic,
non-overlapping, never ending before they start. A cue is stretched to ``min_duration_ms``, and to
the time its text takes to read at :data:`READING_CPS` characters a second, where the next cue
leaves room (a fast speaker's line stays up into the pause after it).

The :class:`CueSegmenter` decides every break when a word arrives, looking at that word only, so
the cues it has closed never change when more words come: the batch export
(:func:`build_cues`) and the live subtitle file (``live.py``) produce the same cues.

A :class:`Gap` is audio the engine skipped undecoded because it fell behind real time
(``EngineUpdate.gap``, ``engine/overload.py``): it closes the open cue and becomes a cue of its
own whose text is :data:`GAP_TEXT`, so a reader sees that words are missing there rather than a
silence. It follows the words of its source that start before its end (those were heard before
the skip) and starts no earlier than they end (:func:`merge_with_gaps`).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from captioner.core import Source, Word
from captioner.storage.settings import TranscriptConfig

__all__ = ["GAP_TEXT", "Cue", "CueOptions", "CueSegmenter", "Gap", "build_cues", "ends_phrase", "ends_sentence",
           "merge_sources", "merge_with_gaps", "normalize_text", "opens_phrase"]

GAP_TEXT = "[…]"  # the text of a gap's cue (the caption bar shows the same mark)

SENTENCE_END = (".", "!", "?", "…", "。", "！", "？", "؟", "।")
CLAUSE_END = (",", ";", ":", "，", "、", "；", "：", "،", "—", "–")
CLOSING = "\"')]}»”’」』"  # closing quotes/brackets after the punctuation: 'end."'
MIN_BREAK_SHARE = 1 / 3  # a clause end or pause splits a full cue where at least this share of its text is before it
MIN_PHRASE_SHARE = 1 / 2  # the same for a break before a word that opens a phrase
CARRY_WORDS = 3  # words (the one that did not fit included) a break before a phrase carries over, if it can
# Words that open a phrase (conjunctions, prepositions, articles, determiners, relative words): a
# cue or a line that must break where no clause ends breaks before one of them, not after it. English,
# and the same words of German, French, Spanish, Italian, Portuguese and Dutch (one set for every
# language: a session may mix them, and its language is not known where text is wrapped), less the
# ones that are common English words of another kind ("was", "am", "want", "door", "met", "do", "no",
# "son", "car", "pour", "par", "sin", "con", "ai", "i"; a word a language above has is not repeated):
# "über das | neue Budget" and a cue ending "… und dann die" read as badly as "of the |".
PHRASE_WORDS = frozenset({
    # English
    "and", "but", "or", "nor", "so", "yet", "because", "although", "though", "while",
    "when", "where", "whether", "if", "unless", "until", "since", "than", "that", "which", "who", "whom",
    "whose", "what", "as", "of", "to", "in", "on", "at", "for", "from", "with", "by", "about", "into",
    "onto", "over", "under", "after", "before", "between", "through", "during", "without", "within", "upon",
    "against", "among", "around", "toward", "towards", "like", "the", "a", "an", "this", "these", "those",
    "his", "her", "its", "their", "my", "your", "our",
    # German
    "und", "oder", "aber", "denn", "sondern", "weil", "dass", "wenn", "als", "ob", "obwohl", "damit",
    "der", "die", "das", "den", "dem", "des", "ein", "eine", "einen", "einem", "einer", "eines",
    "mit", "von", "zu", "zum", "zur", "bei", "nach", "aus", "für", "über", "unter", "vor", "durch",
    "ohne", "gegen", "auf", "im", "vom", "beim", "ins", "seit", "bis", "zwischen", "während",
    # French
    "et", "ou", "mais", "donc", "que", "qui", "dont", "quand", "parce", "le", "la", "les", "un",
    "une", "du", "de", "au", "aux", "dans", "sur", "avec", "sans", "chez", "vers",
    "entre", "depuis", "pendant", "ce", "cette", "ces", "sa", "ses", "leur", "leurs",
    # Spanish
    "y", "o", "pero", "porque", "aunque", "cuando", "donde", "el", "los", "las", "una", "unos", "unas",
    "del", "al", "en", "por", "para", "sobre", "hasta", "desde", "hacia", "según", "este", "esta",
    "estos", "estas", "su", "sus",
    # Italian
    "e", "ma", "che", "perché", "quando", "dove", "il", "lo", "gli", "uno", "di", "della", "dello",
    "dei", "delle", "alla", "allo", "alle", "nel", "nella", "nei", "da", "dal", "dalla", "per",
    "tra", "fra", "questo", "questa",
    # Portuguese
    "mas", "os", "um", "uma", "dos", "em", "na", "nos", "nas", "com", "sem", "pelo", "pela",
    "até",
    # Dutch
    "maar", "omdat", "dat", "het", "een", "van", "naar", "op", "bij", "uit", "tot", "om",
})
READING_CPS = 17  # characters per second a cue is given to be read in, where the next cue leaves room
LINE_BREAK_COST = 20  # characters of imbalance worth avoiding a line that ends "as to" or splits a name
LINE_BREAK_BONUS = 8  # characters of imbalance worth a line break after a comma or before "and", "of", …
PUNCTUATION = "".join(SENTENCE_END + CLAUSE_END) + CLOSING + "\"'(["
# English titles before a name, whose full stop ends no sentence ("Mrs. Southcott": not a cue of "Mrs." alone)
TITLES = frozenset({"mr.", "mrs.", "ms.", "messrs.", "dr.", "prof.", "st.", "mt.", "rev.", "fr.", "sr.", "jr.",
                    "capt.", "col.", "gen.", "lt.", "sgt.", "gov.", "sen.", "rep.", "hon.", "vs."})


@dataclass(frozen=True, slots=True)
class CueOptions:
    """Limits and labels of the cue layout.

    Attributes:
        max_line_chars: characters per line (a source label counts on the first line).
        max_lines: lines per cue.
        min_duration_ms, max_duration_ms: a cue lasts at least / at most this long (ms); the
            minimum yields to the next cue's start.
        pause_ms: a gap between words of at least this long is a split point (ms).
        silence_ms: a gap at least this long always ends the cue (ms).
        label_mic, label_system: labels per source when labels are shown.
    """

    max_line_chars: int = 42
    max_lines: int = 2
    min_duration_ms: int = 1000
    max_duration_ms: int = 7000
    pause_ms: int = 500
    silence_ms: int = 2000
    label_mic: str = "You"
    label_system: str = "Others"

    def __post_init__(self) -> None:
        if self.max_line_chars < 8 or self.max_lines < 1:
            raise ValueError("CueOptions: max_line_chars must be >= 8 and max_lines >= 1")
        if not 0 < self.min_duration_ms <= self.max_duration_ms:
            raise ValueError("CueOptions: need 0 < min_duration_ms <= max_duration_ms")

    @classmethod
    def from_config(cls, config: TranscriptConfig) -> CueOptions:
        """The options the user chose in the settings."""
        return cls(
            max_line_chars=config.max_line_chars,
            max_lines=config.max_lines,
            label_mic=config.label_mic,
            label_system=config.label_system,
        )

    def label(self, source: Source) -> str:
        """The label shown for ``source``, cut so that it leaves half of the first line for words."""
        label = normalize_text(self.label_mic if source == "mic" else self.label_system)
        return label[: max(1, self.max_line_chars // 2 - 2)]


@dataclass(frozen=True, slots=True)
class Cue:
    """One subtitle.

    Attributes:
        start_ms, end_ms: audio-clock milliseconds, ``end_ms > start_ms``.
        lines: the text lines (without the label), each within the line limit.
        source: the source of every word in the cue.
        label: source label to show ("" = none).
        words: the words in the cue, in order (a word longer than a line appears as pieces).
        gap: the cue marks skipped audio (:class:`Gap`; its text is :data:`GAP_TEXT`).
    """

    start_ms: int
    end_ms: int
    lines: tuple[str, ...]
    source: Source
    label: str = ""
    words: tuple[str, ...] = ()
    gap: bool = False

    @property
    def text(self) -> str:
        """The lines joined with newlines (no label)."""
        return "\n".join(self.lines)


@dataclass(frozen=True, slots=True)
class Gap:
    """Audio of ``source`` the engine skipped undecoded (it fell behind real time).

    Attributes:
        start, end: the skipped span on the source's audio clock, seconds.
        source: whose audio.
    """

    start: float
    end: float
    source: Source = "system"

    @property
    def seconds(self) -> float:
        """Length of the skipped span."""
        return max(0.0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class Mark:
    """A moment the user marked in a session ("Mark this moment"): a bookmark in its transcript.

    Attributes:
        at: the moment on the session's audio clock, seconds.
        note: what the user said about it ("" for none).
    """

    at: float
    note: str = ""


@dataclass(frozen=True, slots=True)
class _Piece:
    """A word ready for layout: normalised text, integer ms, and whether it glues to the previous
    piece (the 2nd+ piece of a word longer than a line)."""

    text: str
    start: int
    end: int
    source: Source
    glued: bool = False


def normalize_text(text: str) -> str:
    """Collapse every run of whitespace (newlines, tabs, U+2028, ...) into one space and strip."""
    return " ".join(text.split())


def _ms(seconds: float, fallback: int) -> int:
    if not math.isfinite(seconds):
        return fallback
    return max(0, round(seconds * 1000))


def _ends_with(text: str, marks: tuple[str, ...]) -> bool:
    """``text`` ends with one of ``marks`` (closing quotes after it allowed); a full stop after a title
    (:data:`TITLES`) or an initial ("John F. Kennedy"; not the pronoun: "So did I.") ends nothing: a
    break missed costs a longer cue, one too many a cue of one word."""
    text = text.rstrip(CLOSING)
    if not text.endswith(marks):
        return False
    word = text.strip()
    initial = len(word) == 2 and word[0].isupper() and word[0] != "I"
    return not (word.endswith(".") and (word.lower() in TITLES or initial))


def ends_sentence(text: str) -> bool:
    """``text`` (a word) ends a sentence: a full stop, question or exclamation mark, closing quotes
    after it allowed, not a title's or an initial's full stop (``"Mrs."``, ``"F."``)."""
    return _ends_with(text, SENTENCE_END)


def ends_phrase(text: str) -> bool:
    """``text`` ends a sentence (:func:`ends_sentence`) or a clause with a semicolon: where a
    terminal line of final words may end."""
    return _ends_with(text, (*SENTENCE_END, ";", "；"))


def _ends_clause(text: str) -> bool:
    """``text`` (a word) ends a sentence or a clause (a comma, a colon, a dash, ...): where a cue or a
    line reads best broken."""
    return _ends_with(text, SENTENCE_END + CLAUSE_END)


def opens_phrase(before: str, word: str) -> bool:
    """``word`` opens a phrase (:data:`PHRASE_WORDS`) after ``before``, which does not, nor waits for
    the word after ``word`` ("Leibs- und Lebensgefahr"): a place to break a line or a cue inside a
    clause ("… paid attention" / "to the subject.")."""
    return _bare(word) in PHRASE_WORDS and _bare(before) not in PHRASE_WORDS and not _waits_for_next(before)


def _waits_for_next(word: str) -> bool:
    """A word cut short that the next one's end completes ("Leibs-" in "Leibs- und Lebensgefahr"):
    no line or cue ends after it."""
    return word.endswith("-")


def _bare(text: str) -> str:
    """A word without the punctuation around it, lower case ("To," → "to")."""
    return text.strip(PUNCTUATION).lower()


def merge_sources(words: Iterable[Word]) -> list[Word]:
    """Interleave the words of each source by start time, keeping each source's own order.

    Args:
        words: words of one or more sources; within a source in emission order.
    """
    by_source: dict[str, list[Word]] = {}
    for word in words:
        by_source.setdefault(word.source, []).append(word)
    if len(by_source) <= 1:
        return [w for ws in by_source.values() for w in ws]
    # A fixed source order makes ties (same start) come out the same wherever the words came from.
    ordered = [by_source[s] for s in sorted(by_source)]
    return list(heapq.merge(*ordered, key=lambda w: w.start))


def merge_with_gaps(words: Iterable[Word], gaps: Iterable[Gap]) -> list[Word | Gap]:
    """Words and gaps in one time-ordered list (sources interleaved as :func:`merge_sources`).

    Within a source a gap comes after every word that starts before the gap's end (the engine
    heard those before it skipped) and is moved to start where the last of them ends, so the
    marked span holds no word.

    Args:
        words: words of one or more sources; within a source in emission order.
        gaps: the session's gaps, any order.
    """
    by_source: dict[str, list[Word | Gap]] = {}
    for word in words:
        by_source.setdefault(word.source, []).append(word)
    for gap in sorted(gaps, key=lambda g: (g.start, g.end)):
        items = by_source.setdefault(gap.source, [])
        at = len(items)
        while at > 0 and isinstance(items[at - 1], Word) and items[at - 1].start >= gap.end:
            at -= 1
        start = max(gap.start, items[at - 1].end) if at else gap.start  # after what was heard
        items.insert(at, Gap(start, max(gap.end, start), gap.source))
    ordered = [by_source[s] for s in sorted(by_source)]
    return list(heapq.merge(*ordered, key=lambda w: w.start))


class CueSegmenter:
    """Turns a stream of committed words into cues, one word at a time.

    Args:
        options: limits and labels.
        labelled: show the source label on every cue (sessions with two sources).
    """

    def __init__(self, options: CueOptions | None = None, *, labelled: bool = False) -> None:
        self.options = options or CueOptions()
        self.labelled = labelled
        self._labels: dict[str, str] = {s: self.options.label(s) for s in ("mic", "system")}
        self._open: list[_Piece] = []
        self._prev_end = 0  # end of the last closed cue, ms
        self._last_end = 0  # end of the last word seen, ms (fallback for non-finite times)

    def push(self, word: Word) -> list[Cue]:
        """Add one committed word; returns the cues this closed (often none)."""
        closed: list[Cue] = []
        for piece in self._pieces(word):
            closed += self._push_piece(piece)
        return closed

    def flush(self) -> list[Cue]:
        """Close the open cue (end of the session)."""
        if not self._open:
            return []
        cue = self._close(self._open, None)
        self._open = []
        return [cue]

    def settle(self, source: Source, at_ms: int) -> list[Cue]:
        """``source`` will say nothing that starts before ``at_ms`` (``EngineUpdate.settled``): close
        its open cue now where its next word, whenever it comes, would close it (a sentence end, or
        the silence to ``at_ms`` already long enough) and would not change its end (it ends by
        ``at_ms``), so the cue is the one :meth:`push` would close then. A sentence followed by a
        long pause reaches a live file during the pause, not when the next speech comes."""
        if not self._open or self._open[-1].source != source:
            return []
        if not self._opens_cue(self._open[-1], at_ms):
            return []
        if self._span(self._open, None)[1] > at_ms:  # its reading time runs past what was heard
            return []
        return self.flush()

    def push_gap(self, gap: Gap) -> list[Cue]:
        """Add a gap: closes the open cue (yielding at the gap's start) and returns it with the
        gap's own cue, which spans the gap (moved after the previous cue when they overlap)."""
        start = _ms(gap.start, self._last_end)
        closed: list[Cue] = []
        if self._open:
            closed.append(self._close(self._open, start))
            self._open = []
        start = max(start, self._prev_end)
        end = max(_ms(gap.end, start), start + 1)
        self._prev_end = self._last_end = end
        label = self._label(gap.source) if self.labelled else ""
        return [*closed, Cue(start, end, (GAP_TEXT,), gap.source, label, (), gap=True)]

    def _pieces(self, word: Word) -> list[_Piece]:
        text = normalize_text(word.text)
        if not text:
            return []
        start = _ms(word.start, self._last_end)
        end = max(start, _ms(word.end, start))
        self._last_end = end
        width = self.options.max_line_chars - (self._label_width(word.source) if self.labelled else 0)
        if len(text) <= width:
            return [_Piece(text, start, end, word.source)]
        # A word longer than a line (a URL, a run-on token) is cut into line-sized pieces whose
        # times share the word's duration.
        chunks = [text[i : i + width] for i in range(0, len(text), width)]
        span = end - start
        return [
            _Piece(
                chunk,
                start + span * i // len(chunks),
                start + span * (i + 1) // len(chunks),
                word.source,
                glued=i > 0,
            )
            for i, chunk in enumerate(chunks)
        ]

    def _push_piece(self, piece: _Piece) -> list[Cue]:
        closed: list[Cue] = []
        last = self._open[-1] if self._open else None
        if last is not None and (piece.source != last.source or self._opens_cue(last, piece.start, piece.glued)):
            closed.append(self._close(self._open, piece.start))
            self._open = []
        while self._open and not self._fits([*self._open, piece]):
            cut = self._split_point(piece)
            rest = self._open[cut:]
            closed.append(self._close(self._open[:cut], rest[0].start if rest else piece.start))
            self._open = rest
        self._open.append(piece)
        return closed

    def _opens_cue(self, last: _Piece, start_ms: int, glued: bool = False) -> bool:
        """A word of ``last``'s source starting at ``start_ms`` opens a cue of its own: ``last`` ends
        a sentence (unless the word is glued to it) or the silence between is ``silence_ms`` or more."""
        return (not glued and _ends_with(last.text, SENTENCE_END)) or start_ms - last.end >= self.options.silence_ms

    def _split_point(self, incoming: _Piece) -> int:
        """How many open pieces to close when ``incoming`` does not fit. Never splits a glued word.

        In order: after the last clause end, else at the longest pause >= pause_ms, where the part
        closed holds at least :data:`MIN_BREAK_SHARE` of the text (a cue of "But of course," alone
        flashes by); else before the last word that opens a phrase (:data:`PHRASE_WORDS`) and does
        not follow one, where the part closed holds at least :data:`MIN_PHRASE_SHARE`, the last
        that carries :data:`CARRY_WORDS` words or more into the next cue if one does (so neither
        cue ends on "to the" and the sentence's last words are not left alone: "… paid attention" /
        "to the subject.", not "… on the throne" / "of England."); else the same clause end or pause
        however short; else all of them.
        """
        pieces = self._open
        total = sum(len(p.text) + 1 for p in pieces) + len(incoming.text)
        before = list(itertools.accumulate((len(p.text) + 1 for p in pieces), initial=0))
        candidates = [n for n in range(len(pieces), 0, -1)
                      if not (pieces[n] if n < len(pieces) else incoming).glued]  # latest first

        def clause_end(n: int) -> bool:
            return _ends_clause(pieces[n - 1].text)

        def pause(n: int) -> int:
            return (pieces[n] if n < len(pieces) else incoming).start - pieces[n - 1].end

        def phrase_start(n: int) -> bool:
            return opens_phrase(pieces[n - 1].text, (pieces[n] if n < len(pieces) else incoming).text)

        def first(found: Iterable[int]) -> int | None:
            return next(iter(found), None)

        def longest_pause(ns: Iterable[int]) -> int | None:
            paused = [n for n in ns if pause(n) >= self.options.pause_ms]
            return max(paused, key=pause) if paused else None  # max keeps the latest of equal pauses

        full = [n for n in candidates if before[n] >= MIN_BREAK_SHARE * total]
        phrases = [n for n in candidates if phrase_start(n) and before[n] >= MIN_PHRASE_SHARE * total]
        for choice in (
            first(n for n in full if clause_end(n)),
            longest_pause(full),
            first(n for n in phrases if len(pieces) - n >= CARRY_WORDS - 1),
            first(phrases),
            first(n for n in candidates if clause_end(n)),
            longest_pause(candidates),
        ):
            if choice is not None:
                return choice
        return len(pieces)

    def _label(self, source: Source) -> str:
        label = self._labels.get(source)
        if label is None:
            label = self._labels[source] = self.options.label(source)
        return label

    def _label_width(self, source: Source) -> int:
        return len(self._label(source)) + 2  # "You: "

    def _fits(self, pieces: Sequence[_Piece]) -> bool:
        if pieces[-1].end - pieces[0].start > self.options.max_duration_ms:
            return False
        first = self.options.max_line_chars - (self._label_width(pieces[0].source) if self.labelled else 0)
        if sum(len(p.text) + 1 for p in pieces) - 1 <= first:
            return True  # fits on one line (the common case; the layout below is exact)
        return self._layout(pieces, self.options.max_line_chars) is not None

    def _layout(self, pieces: Sequence[_Piece], width: int) -> list[str] | None:
        """Greedy line fill at ``width``; None when it needs more than ``max_lines`` lines."""
        first = width - (self._label_width(pieces[0].source) if self.labelled else 0)
        lines: list[str] = []
        current = ""
        for piece in pieces:
            cap = first if not lines else width
            if not current:  # a cue may open with a long word's later piece, which may start with a space
                joined = piece.text.lstrip()
            else:
                joined = current + piece.text if piece.glued else f"{current} {piece.text}"
            if len(joined) <= cap:
                current = joined
                continue
            if current:
                lines.append(current.rstrip())
            current = piece.text.lstrip()  # a piece of a word with a space in it may start with it
            if len(current) > width:  # cannot happen for pieces cut to width; guard the invariant
                return None
        lines.append(current.rstrip())
        if len(lines) > self.options.max_lines or len(lines[0]) > first:
            return None
        return lines

    def _balanced(self, pieces: Sequence[_Piece]) -> list[str]:
        """The lines of a closed cue: two lines broken where they read best (:meth:`_two_lines`),
        else the narrowest layout that still fits in ``max_lines`` lines (balanced line lengths)."""
        best = self._layout(pieces, self.options.max_line_chars)
        assert best is not None  # _fits was checked before the piece joined the cue
        if len(best) == 1:
            return best
        if len(best) == 2 and (two := self._two_lines(pieces)) is not None:
            return two
        lo, hi = 1, self.options.max_line_chars
        while lo < hi:
            mid = (lo + hi) // 2
            if self._layout(pieces, mid) is not None:
                hi = mid
            else:
                lo = mid + 1
        narrow = self._layout(pieces, lo)
        return narrow if narrow is not None and len(narrow) == len(best) else best

    def _two_lines(self, pieces: Sequence[_Piece]) -> list[str] | None:
        """Two lines broken at the word boundary of least cost: the lines' length difference (the
        first with its source label), plus :data:`LINE_BREAK_COST` for a first line that ends on a
        word opening a phrase ("as to" / "symptoms"), that splits a name ("San" / "Francisco") or
        a word that waits for the next one's end ("Leibs-" / "und Lebensgefahr"),
        less :data:`LINE_BREAK_BONUS` for a first line ending a clause or a second line opening a
        phrase. None if no break fits."""
        label = self._label_width(pieces[0].source) if self.labelled else 0  # "You: " on the first line
        first = self.options.max_line_chars - label
        best: tuple[int, list[str]] | None = None
        for n in range(1, len(pieces)):
            if pieces[n].glued:
                continue
            lines = [self._join(pieces[:n]), self._join(pieces[n:])]
            if len(lines[0]) > first or len(lines[1]) > self.options.max_line_chars:
                continue
            end, start = pieces[n - 1].text, pieces[n].text
            cost = abs(label + len(lines[0]) - len(lines[1]))
            if _ends_clause(end):
                cost -= LINE_BREAK_BONUS
            elif _bare(end) in PHRASE_WORDS or (end[:1].isupper() and start[:1].isupper()) or _waits_for_next(end):
                cost += LINE_BREAK_COST  # "as to" /, "San" / "Francisco", "Leibs-" / "und Lebensgefahr"
            if _bare(start) in PHRASE_WORDS:
                cost -= LINE_BREAK_BONUS
            if best is None or cost < best[0]:
                best = (cost, lines)
        return None if best is None else best[1]

    @staticmethod
    def _join(pieces: Sequence[_Piece]) -> str:
        """The pieces as one line: words spaced, a long word's pieces glued."""
        return "".join(p.text if p.glued or i == 0 else f" {p.text}" for i, p in enumerate(pieces)).strip()

    def _span(self, pieces: Sequence[_Piece], next_start: int | None) -> tuple[int, int]:
        """(start, end) in ms of the cue of ``pieces`` when the next piece starts at ``next_start``."""
        opts = self.options
        start = max(pieces[0].start, self._prev_end)
        natural_end = min(max(pieces[-1].end, start), start + opts.max_duration_ms)
        chars = sum(len(p.text) + (not p.glued) for p in pieces) - 1
        readable = max(opts.min_duration_ms, math.ceil(1000 * chars / READING_CPS))  # time to read it
        end = min(max(natural_end, start + readable), start + opts.max_duration_ms)
        if next_start is not None and end > next_start:
            end = max(next_start, natural_end)  # the minimum yields; the words' own end does not
        return start, max(end, start + 1)

    def _close(self, pieces: Sequence[_Piece], next_start: int | None) -> Cue:
        start, end = self._span(pieces, next_start)
        self._prev_end = end
        words: list[str] = []
        for piece in pieces:
            if piece.glued and words:
                words[-1] += piece.text
            else:
                words.append(piece.text)
        source = pieces[0].source
        return Cue(
            start_ms=start,
            end_ms=end,
            lines=tuple(self._balanced(pieces)),
            source=source,
            label=self._label(source) if self.labelled else "",
            words=tuple(words),
        )


def build_cues(
    words: Iterable[Word], options: CueOptions | None = None, *, labelled: bool | None = None,
    gaps: Iterable[Gap] = (),
) -> list[Cue]:
    """Cues for a whole session.

    Args:
        words: the session's words, each source in emission order; speculative words are skipped.
        options: limits and labels.
        labelled: show source labels; None = when the words come from more than one source.
        gaps: audio the engine skipped (each becomes a :data:`GAP_TEXT` cue).

    Returns:
        Cues in time order, monotonic and non-overlapping.
    """
    committed = [w for w in words if not w.speculative]
    merged = merge_with_gaps(committed, gaps)
    if labelled is None:  # two sources said something (a blank word makes no cue)
        labelled = len({w.source for w in committed if normalize_text(w.text)}) > 1
    segmenter = CueSegmenter(options, labelled=labelled)
    cues: list[Cue] = []
    for item in merged:
        cues += segmenter.push_gap(item) if isinstance(item, Gap) else segmenter.push(item)
    cues += segmenter.flush()
    return cues
