"""Live text on a terminal or a pipe (``transcribe``, ``listen``): final words scroll up a phrase per
line, the draft stays on one live line, levels on a status line.

A :class:`Console` owns the bottom of the terminal: a *live region* of at most one draft line per
printer and one status line, redrawn in place (carriage return, cursor up, clear to the end of the screen),
each line cut to the terminal's width so nothing wraps and the redraw never drifts. Everything
else (final lines, notes on stderr) is written above the region, which is then drawn again.

Not a terminal (a pipe, a file): no escape codes at all; each final line is written and flushed as
soon as it settles, drafts are not shown, and status lines go to their own stream (stderr).

A reader that goes away (``| head`` has its lines, a ``| tee`` ended by the same Ctrl-C, a terminal
closed: :func:`reader_gone`) fails no write: every stream here is a :class:`Guarded` one, which then
points its descriptor at the null device and says so (``gone``). The command stops as on Ctrl-C where
its words' reader went (:attr:`Console.gone`) and finishes as ever: the session ended, every export
written. Before, the first write after that raised, and ``transcribe`` wrote none of its exports,
``listen`` left its session not ended.

A :class:`WordPrinter` turns one source's engine updates into those lines: a word is final once
:func:`~captioner.core.final_count` says so, or an update says its source ``settled`` (the utterance
closed and nothing is open: a sentence followed by a long silence is printed then, not when the
next speech comes); final words are held until a phrase ends (a word ending
in ``. ? ! ;`` …, closing quotes after it allowed, not a title's or an initial's full stop:
:func:`~captioner.transcript.cues.ends_phrase`), a line's worth of text is held or the source settled,
then printed as ``[mm:ss.ss] text``. The held
words lead the draft line, the engine's committed-but-open words follow in normal weight and its
speculative words dimmed. A retraction of words already printed (the engine does not do this, but
the printer does not rely on it) prints a ``(correction mm:ss.ss)`` line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import textwrap
from collections.abc import Callable
from typing import Protocol, TextIO

from captioner.core import EngineUpdate, Word, apply_update, final_count
from captioner.transcript.cues import ends_phrase, opens_phrase

__all__ = ["Console", "Guarded", "TerminalLines", "TextOut", "WordPrinter", "fit_terminal", "reader_gone"]

DIM, RESET = "\033[2m", "\033[0m"
UP, CLEAR_DOWN = "\033[1A", "\033[J"
PIPE_LINE_CHARS = 100  # a line's worth of text when there is no terminal to measure
STAMP_CHARS = 11  # "[mm:ss.ss] "


class TextOut(Protocol):
    """Where lines of text go: a text stream (stdout, stderr) or :class:`TerminalLines`."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


def fit_terminal(out: TextIO | Guarded, text: str) -> str:
    """``text`` as ``out`` should show it: on a terminal, each line wider than the terminal wrapped
    at spaces (never inside a word), the continuation indented by two spaces; elsewhere as it is."""
    if not out.isatty():
        return text
    width = shutil.get_terminal_size((80, 24)).columns - 1
    return "\n".join(
        textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)
        if len(line) > width else line
        for line in text.split("\n")
    )


def reader_gone(exc: OSError) -> bool:
    """A write failed because nothing reads the stream any more: a closed pipe (EPIPE; on Windows a
    closed pipe's EINVAL) or a terminal that was closed (EIO, after its SIGHUP)."""
    return (isinstance(exc, BrokenPipeError) or exc.errno == errno.EIO
            or (sys.platform == "win32" and exc.errno == errno.EINVAL))


class Guarded:
    """A text stream whose reader may go away (module doc): a write or flush that finds it gone
    points the stream's descriptor at the null device, so that this and every later write to it
    (a summary line, Python's own flush at exit) succeeds and goes nowhere, and sets :attr:`gone`.
    Any other error is raised as ever."""

    def __init__(self, out: TextOut) -> None:
        self.out = out
        self.gone = False

    def write(self, text: str) -> int:
        self._do(lambda: self.out.write(text))
        return len(text)

    def flush(self) -> None:
        self._do(self.out.flush)

    def isatty(self) -> bool:
        return bool(getattr(self.out, "isatty", lambda: False)())

    def _do(self, action: Callable[[], object]) -> None:
        try:
            action()
        except OSError as exc:
            if not reader_gone(exc):
                raise
            self.gone = True
            try:
                fd = self.out.fileno()  # type: ignore[attr-defined]
            except (AttributeError, OSError, ValueError):
                return  # no descriptor: nothing else can write to it
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, fd)
            finally:
                os.close(devnull)
            with contextlib.suppress(OSError):
                self.out.flush()  # what the failed write left in the buffer goes to the null device


class TerminalLines(Guarded):
    """A text stream (stderr) whose writes go through :func:`fit_terminal`: a summary line on an
    80-column terminal wraps between words ("328 words"), not inside one ("328 word" / "s"); a
    :class:`Guarded` one."""

    def write(self, text: str) -> int:
        super().write(fit_terminal(self, text))
        return len(text)


class Console:
    """The live region at the bottom of a terminal, or plain lines when ``tty`` is False.

    Args:
        out: where final lines go (stdout).
        tty: ``out`` is a terminal: keep a live region there.
        status_out: where status lines go when there is no live region (stderr); None drops them.
        note_out: where :meth:`note` writes (stderr); on a terminal the region is cleared first.
    """

    def __init__(self, out: TextIO, tty: bool, status_out: TextOut | None = None, note_out: TextOut | None = None) -> None:
        self.out, self.tty = _guarded(out), tty
        self.status_out = None if status_out is None else _guarded(status_out)
        self.note_out = None if note_out is None else _guarded(note_out)
        self._drafts: dict[str, tuple[str, str, str]] = {}  # key -> (label, plain part, dimmed part)
        self._status = ""
        self._height = 0  # lines of the region on screen now

    @property
    def gone(self) -> bool:
        """Nothing reads the final lines any more (module doc): the command stops as on Ctrl-C."""
        return self.out.gone

    @property
    def width(self) -> int:
        """Characters per line: the terminal's columns, or :data:`PIPE_LINE_CHARS`."""
        return shutil.get_terminal_size((80, 24)).columns if self.tty else PIPE_LINE_CHARS

    def line(self, text: str) -> None:
        """Write a final line above the live region; flushed at once (a pipe sees it now)."""
        self._clear()
        self.out.write(text + "\n")
        self._draw()

    def draft(self, key: str, label: str, plain: str, dimmed: str) -> None:
        """Set (or clear, when both parts are empty) the draft line of printer ``key``."""
        if not self.tty:
            return
        if plain or dimmed:
            self._drafts[key] = (label, plain, dimmed)
        else:
            self._drafts.pop(key, None)
        self._clear()
        self._draw()

    def status(self, text: str) -> None:
        """Show ``text`` on the status line (a terminal) or write it as a line to ``status_out``."""
        if self.tty:
            self._status = text
            self._clear()
            self._draw()
        elif self.status_out is not None:
            self.status_out.write(text + "\n")
            self.status_out.flush()

    def note(self, text: str) -> None:
        """A message for the person (stderr), written above the live region."""
        self._clear()
        self.out.flush()
        stream = self.note_out or self.out
        stream.write(text + "\n")
        stream.flush()
        self._draw()

    def close(self) -> None:
        """Remove the live region (drafts and status); the final lines stay."""
        self._drafts.clear()
        self._status = ""
        self._clear()
        self.out.flush()

    def _clear(self) -> None:
        if self._height:
            self.out.write("\r" + UP * (self._height - 1) + CLEAR_DOWN)
            self._height = 0

    def _draw(self) -> None:
        if self.tty:
            width = max(20, self.width - 1)  # the last column would wrap on some terminals
            lines = [_fit(label, plain, dimmed, width) for label, plain, dimmed in self._drafts.values()]
            if self._status:
                lines.append(self._status[:width])
            if lines:
                self.out.write("\n".join(lines))
                self._height = len(lines)
        self.out.flush()


def _guarded(out: TextOut) -> Guarded:
    """``out`` as a :class:`Guarded` stream."""
    return out if isinstance(out, Guarded) else Guarded(out)


def _fit(label: str, plain: str, dimmed: str, width: int) -> str:
    """``label plain dimmed`` in at most ``width`` characters: the end is kept (the newest words), a
    cut start becomes ``…``; only the dimmed part is dimmed."""
    body = f"{plain} {dimmed}" if plain and dimmed else plain or dimmed
    room = width - len(label)
    if len(body) > room:
        body = "…" + body[len(body) - room + 1:]
    cut = len(body) - len(dimmed)
    if dimmed and cut >= 0:
        return f"{label}{body[:cut]}{DIM}{body[cut:]}{RESET}"
    return f"{label}{DIM}{body}{RESET}" if dimmed else f"{label}{body}"


class WordPrinter:
    """Prints one source's words on a :class:`Console` as they become final, a phrase per line.

    An update with a ``gap`` (audio skipped because the engine fell behind real time) prints the
    words before it and then a ``[…] (skipped N s: behind real time)`` line.

    Args:
        console: where lines and the draft go.
        label: printed before each line (e.g. ``"You: "`` when two sources share the output).
    """

    def __init__(self, console: Console, label: str = "") -> None:
        self.console, self.label = console, label
        self.words: list[Word] = []  # every word shown so far (the source's transcript)
        self.printed: list[Word] = []  # final words written as lines
        self.held: list[Word] = []  # final words not yet written: the phrase is still open
        self._final_n = 0  # leading words known final (an update that settled): later rules keep them

    def update(self, update: EngineUpdate, final: bool = False) -> None:
        """Apply one update; ``final``: the stream has finished (every committed word is final)."""
        kept = len(self.words) - update.retract
        apply_update(self.words, update)
        over = final or update.gap is not None or update.settled is not None  # nothing of the source is open
        self._final_n = max(min(self._final_n, kept), final_count(self.words, finished=over))
        stable = self.words[: self._final_n]
        shown = self.printed + self.held
        same = 0
        while same < min(len(shown), len(stable)) and shown[same] == stable[same]:
            same += 1
        if same < len(self.printed):  # words already on a line changed
            redo = stable[same:]
            if redo:
                self.console.line(f"{self.label}(correction {_clock(redo[0].start)}) {_text(redo)}")
            self.printed, self.held = list(stable), []
        else:
            self.held = stable[len(self.printed):]
        self._print_phrases(flush=over)
        if update.gap is not None:
            start, end = update.gap
            self.console.line(f"{self.label}[{_clock(start)}] […] (skipped {end - start:.1f} s: behind real time)")
        open_words = self.words[len(stable):]
        committed = [w for w in open_words if not w.speculative]
        speculative = [w for w in open_words if w.speculative]
        if final:
            self.console.draft(self.label, self.label, "", "")
        else:
            self.console.draft(self.label, self.label, _text(self.held + committed), _text(speculative))

    def finish(self) -> None:
        """The stream has ended: print every word held or open, clear the draft (safe to call twice)."""
        self.update(EngineUpdate(), final=True)

    def _print_phrases(self, *, flush: bool) -> None:
        limit = max(20, min(self.console.width, 120) - STAMP_CHARS - len(self.label) - 1)
        while self.held:
            end = _phrase_end(self.held, limit)
            if end is None:
                if not flush:
                    return
                end = len(self.held)
            line, self.held = self.held[:end], self.held[end:]
            self.console.line(f"{self.label}[{_clock(line[0].start)}] {_text(line)}")
            self.printed += line


def _phrase_end(words: list[Word], limit: int) -> int | None:
    """How many leading ``words`` make a line: up to the first phrase end, or, when the held text
    is longer than ``limit`` characters, as many as fit, ending before the last word there that
    opens a phrase if the line stays at least half full; None: wait for more."""
    length = 0
    for i, w in enumerate(words):
        length += len(w.text) + (i > 0)
        if length > limit:
            half, before = limit / 2, len(_text(words[:i]))
            for j in range(i, 1, -1):
                before -= len(words[j - 1].text) + 1  # the length of words[: j - 1]
                if before < half:
                    break
                if opens_phrase(words[j - 2].text, words[j - 1].text):
                    return j - 1
            return max(1, i)
        if ends_phrase(w.text):
            return i + 1
    return None


def _text(words: list[Word]) -> str:
    return " ".join(w.text for w in words)


def _clock(seconds: float) -> str:
    minutes, sec = divmod(max(0.0, seconds), 60.0)
    return f"{int(minutes):02d}:{sec:05.2f}"
