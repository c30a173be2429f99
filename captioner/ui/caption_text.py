"""What the caption bar shows, without Qt: words in arrival order, retraction in place, word wrap.

:class:`CaptionText` keeps the words the bar may still show (one list for both sources, in the
order they arrived), applies each :class:`~captioner.core.EngineUpdate` and wraps the words into
lines with a caller-supplied ``measure(text) -> width`` function (the widget passes its font
metrics; tests pass ``len``). The first line of the wrap is always the bar's top visible line:
when the bar scrolls, :meth:`CaptionText.drop_lines` forgets the words of the lines that left, so
wrapping always starts at a line start and the lines above never re-flow.

A retraction removes the source's last ``retract`` words *where they are* and inserts the new
words at that place, so a corrected word is replaced in place even when the other source spoke
in between ("both" mode). An update with a ``gap`` (the engine skipped audio it could not keep up
with) adds a :data:`GAP_MARK` after its words; retractions never count or remove a mark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from captioner.core import EngineUpdate, Source, Word

__all__ = ["GAP_MARK", "MAX_ENTRIES", "CaptionText", "LinePiece"]

MAX_ENTRIES = 4_000  # words kept for display; older ones are forgotten (the store keeps them all)
GAP_MARK = "[…]"  # where the engine skipped audio (the transcript's exports show the same mark)


@dataclass(frozen=True, slots=True)
class LinePiece:
    """One drawable piece of a caption line.

    Attributes:
        text: the word, or a source label such as ``"You:"``.
        source: the source it belongs to (colour in "both" mode).
        speculative: drawn dimmed; may still be replaced.
        label: True for a source label (not a transcribed word).
        entry_id: serial number of the word it draws (labels carry their word's id); unique for
            the lifetime of the :class:`CaptionText`.
    """

    text: str
    source: Source
    speculative: bool
    label: bool
    entry_id: int


@dataclass(frozen=True, slots=True)
class _Entry:
    entry_id: int
    word: Word
    source: Source
    mark: bool = False  # a gap mark, not an engine word


class CaptionText:
    """The words on (or about to come onto) the caption bar.

    Args:
        measure: width of a piece of text in the bar's font, any unit (pixels in the widget).
    """

    def __init__(self, measure: Callable[[str], float]) -> None:
        self._measure = measure
        self._entries: list[_Entry] = []
        self._next_id = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def words(self) -> list[Word]:
        """The words held, in display order (speculative ones included)."""
        return [e.word for e in self._entries]

    def set_measure(self, measure: Callable[[str], float]) -> None:
        """Use another width function (the font changed)."""
        self._measure = measure

    def clear(self) -> None:
        """Forget every word (the bar goes blank)."""
        self._entries.clear()

    def apply(self, update: EngineUpdate) -> bool:
        """Apply one engine update; returns True when the held words changed.

        The source's last ``update.retract`` words are removed where they are and
        ``update.words`` take their place; with no retraction the words are appended. Words
        already scrolled off the bar cannot be retracted from it any more (the store still does
        it): only those still held are removed, and with none held the new words are appended.
        """
        if update.is_empty:
            return False
        pos = len(self._entries)
        if update.retract:
            found: list[int] = []
            for i in range(len(self._entries) - 1, -1, -1):
                if self._entries[i].source == update.source and not self._entries[i].mark:
                    found.append(i)
                    if len(found) == update.retract:
                        break
            if found:
                pos = min(found)
                keep = set(found)
                self._entries = [e for i, e in enumerate(self._entries) if i not in keep]
        new = [self._entry(w, update.source) for w in update.words]
        if update.gap is not None:
            self._next_id += 1
            mark = Word(GAP_MARK, update.gap[0], update.gap[1], source=update.source)
            new.append(_Entry(self._next_id, mark, update.source, mark=True))
        self._entries[pos:pos] = new
        if len(self._entries) > MAX_ENTRIES:
            del self._entries[: len(self._entries) - MAX_ENTRIES]
        return True

    def _entry(self, word: Word, source: Source) -> _Entry:
        self._next_id += 1
        return _Entry(self._next_id, word, source)

    def pieces(self, *, stable_only: bool = False, labels: dict[str, str] | None = None) -> list[LinePiece]:
        """The drawable pieces in order; with ``labels``, a label piece starts each change of source.
        ``stable_only``: without drafts (speculative words but a closed sentence's, which only a second
        reading may still change: :attr:`~captioner.core.Word.rereadable`, drawn dimmed as well)."""
        out: list[LinePiece] = []
        last_source: str | None = None
        for e in self._entries:
            if stable_only and e.word.speculative and not e.word.rereadable:
                continue
            if labels is not None and e.source != last_source and labels.get(e.source):
                out.append(LinePiece(f"{labels[e.source]}:", e.source, False, True, e.entry_id))
            last_source = e.source
            out.append(LinePiece(e.word.text, e.source, e.word.speculative, False, e.entry_id))
        return out

    def wrap(
        self, width: float, *, stable_only: bool = False, labels: dict[str, str] | None = None
    ) -> list[list[LinePiece]]:
        """Greedy word wrap of :meth:`pieces` into lines no wider than ``width``.

        A single word wider than the line gets a line of its own (it is clipped when drawn).

        Returns:
            lines, top first; each a non-empty list of pieces.
        """
        return wrap_pieces(self.pieces(stable_only=stable_only, labels=labels), width, self._measure)

    def drop_through(self, entry_id: int) -> None:
        """Forget every word displayed before, and including, the one with ``entry_id``.

        Ids are not in display order (a replacement gets a new id where the old word stood), so
        the cut is by position.
        """
        for i, e in enumerate(self._entries):
            if e.entry_id == entry_id:
                del self._entries[: i + 1]
                return

    def drop_lines(self, lines: list[list[LinePiece]]) -> None:
        """Forget the words of ``lines`` (the top lines of the last wrap, now scrolled off)."""
        for line in reversed(lines):
            for tok in reversed(line):
                if not tok.label:  # a label at a line end belongs to the next line's word
                    self.drop_through(tok.entry_id)
                    return


def wrap_pieces(pieces: list[LinePiece], width: float, measure: Callable[[str], float]) -> list[list[LinePiece]]:
    """Greedy wrap: pieces separated by one space, each line at most ``width`` wide."""
    space = measure(" ")
    lines: list[list[LinePiece]] = []
    line: list[LinePiece] = []
    used = 0.0
    for tok in pieces:
        w = measure(tok.text)
        if line and used + space + w > width:
            lines.append(line)
            line, used = [], 0.0
        used += (space if line else 0.0) + w
        line.append(tok)
    if line:
        lines.append(line)
    return lines
