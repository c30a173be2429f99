"""Prints an engine's words on a terminal or a pipe as they become final (``transcribe``, ``listen``)."""

from __future__ import annotations

from typing import TextIO

from captioner.core import EngineUpdate, Word, apply_update, final_count

__all__ = ["WordPrinter"]

DIM, RESET, CLEAR_LINE = "\033[2m", "\033[0m", "\r\033[K"


class WordPrinter:
    """Prints words as they become final (:func:`~captioner.core.final_count`). A terminal also sees the pending tail,
    dimmed, redrawn in place; a retraction of printed words prints a ``(correction)`` line. An
    update with a ``gap`` (audio skipped because the engine fell behind real time) prints its words
    and then a ``[…] (skipped N s: behind real time)`` line.

    Args:
        out: where words go (stdout).
        tty: redraw the pending tail in place.
        label: printed before each line (e.g. ``"You: "`` when two sources share the output).
    """

    def __init__(self, out: TextIO, tty: bool, label: str = "") -> None:
        self.out, self.tty, self.label = out, tty, label
        self.words: list[Word] = []
        self.printed: list[Word] = []
        self._tail_shown = False

    def update(self, update: EngineUpdate, final: bool = False) -> None:
        apply_update(self.words, update)
        stable = self.words[: final_count(self.words, finished=final or update.gap is not None)]
        same = 0
        while same < min(len(self.printed), len(stable)) and self.printed[same] == stable[same]:
            same += 1
        self._clear_tail()
        if same < len(self.printed):
            redo = stable[same:]
            if redo:
                self.out.write(f"{self.label}(correction {_clock(redo[0].start)}) {_text(redo)}\n")
            self.printed = list(stable)
        elif len(stable) > len(self.printed):
            new = stable[len(self.printed):]
            self.out.write(f"{self.label}[{_clock(new[0].start)}] {_text(new)}\n")
            self.printed = list(stable)
        if update.gap is not None:
            start, end = update.gap
            self.out.write(f"{self.label}[{_clock(start)}] […] (skipped {end - start:.1f} s: behind real time)\n")
        if self.tty and not final and len(self.words) > len(stable):
            self.out.write(f"{DIM}{_text(self.words[len(stable):])[-70:]}{RESET}")
            self._tail_shown = True
        self.out.flush()

    def _clear_tail(self) -> None:
        if self._tail_shown:
            self.out.write(CLEAR_LINE)
            self._tail_shown = False


def _text(words: list[Word]) -> str:
    return " ".join(w.text for w in words)


def _clock(seconds: float) -> str:
    minutes, sec = divmod(max(0.0, seconds), 60.0)
    return f"{int(minutes):02d}:{sec:05.2f}"
