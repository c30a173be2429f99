"""Live text a person can read in a terminal (issue 26, item 2): the real ``captioner transcribe`` with the
real tiny.en on real speech, in a pseudo-terminal and in tmux (a real terminal emulator).

Final words scroll up a phrase per line (``[mm:ss.ss] text``, at a phrase end or a line's worth of
text); the draft stays on one live line cut to the terminal's width, with only the speculative
words dimmed; nothing is left of the live region at the end; a pipe gets no escape codes at all
(tests/commands/test_transcribe_interrupt.py reads the first final line from a pipe before the run
ends). The Console's status line (``listen``'s levels) is checked on a fake terminal.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from captioner.commands._printer import DIM, Console, TerminalLines, WordPrinter, fit_terminal
from captioner.core import EngineUpdate, Word

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
WIDTH = 60


def _cmd(pack: Path, wav: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "captioner", "transcribe", str(wav), "--model", str(pack), "--provider", "cpu",
            "--no-save", *extra]


def test_in_a_pseudo_terminal_drafts_fit_one_line_and_final_lines_are_the_words(real_tiny_en_pack, reading: Path,
                                                                                tmp_path: Path) -> None:
    import fcntl
    import pty
    import struct
    import termios

    out_json = tmp_path / "out.json"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, WIDTH, 0, 0))
    env = dict(os.environ, CAPTIONER_HOME=str(tmp_path / "home"), COLUMNS=str(WIDTH))
    proc = subprocess.Popen(_cmd(real_tiny_en_pack.root, reading, "--json", str(out_json)), env=env, stdin=slave,
                            stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    raw = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    os.close(master)
    assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    if proc.stderr is not None:
        proc.stderr.close()
    text = raw.decode("utf-8")
    assert DIM in text  # the speculative words were drawn, dimmed

    # every drawing of the live region: each of its lines fits the terminal, so nothing wraps
    regions = [part.split("\r", 1)[0] for part in text.split("\x1b[J")[1:]]
    drafts = [line for region in regions for line in region.split("\r\n") if line]
    assert drafts, text
    assert max(len(ANSI.sub("", line)) for line in drafts) <= WIDTH - 1
    assert any(ANSI.sub("", d).startswith("…") for d in drafts)  # a long draft keeps its end, cut at the start

    # the final lines: plain (never dimmed), a phrase each, and together exactly the exported words
    finals = [ANSI.sub("", line.rsplit("\x1b[J", 1)[-1]) for line in text.split("\r\n")]
    finals = [line for line in finals if re.match(r"^\[\d\d:\d\d\.\d\d\] ", line)]
    words = [w["text"] for w in json.loads(out_json.read_text(encoding="utf-8"))["words"]]
    assert [w for line in finals for w in line.split("] ", 1)[1].split()] == words
    assert len(finals) >= 4  # one per sentence at least: nothing waits for the end of the reading
    for line in finals:
        body = line.split("] ", 1)[1]
        assert body.endswith((".", "?", "!")) or len(line) >= WIDTH - 20, line


def test_in_tmux_the_scrollback_holds_the_final_lines_and_the_draft_stays_on_one_line(
        real_tiny_en_pack, reading: Path, tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("needs tmux")
    socket = str(tmp_path / "tmux.sock")
    env = dict(os.environ, CAPTIONER_HOME=str(tmp_path / "home"))
    env.pop("TMUX", None)
    command = " ".join(_cmd(real_tiny_en_pack.root, reading, "--realtime")) + "; echo DONE; sleep 60"

    def tmux(*args: str) -> str:
        return subprocess.run(["tmux", "-S", socket, *args], env=env, capture_output=True, text=True,
                              timeout=30).stdout

    tmux("new-session", "-d", "-x", str(WIDTH), "-y", "12", command)
    captures: list[tuple[str, str]] = []  # (plain, with escapes) every half second while it runs
    try:
        deadline = time.monotonic() + 120
        while "DONE" not in (screen := tmux("capture-pane", "-p", "-J", "-S", "-")):
            assert time.monotonic() < deadline, screen
            captures.append((tmux("capture-pane", "-p", "-S", "-"), tmux("capture-pane", "-p", "-e", "-S", "-")))
            time.sleep(0.5)  # watching the run in tmux
    finally:
        tmux("kill-server")
    running = [(plain, escaped) for plain, escaped in captures if "s of audio in" not in plain]
    # final lines reached the scrollback while the reading still ran, the draft on one line below them
    settled = [plain for plain, _ in running if re.search(r"^\[00:", plain, re.M)]
    assert settled, captures[-1][0]
    drafting = [[line for line in plain.splitlines() if line.strip()] for plain, _ in running]
    drafting = [lines for lines in drafting if lines and not lines[-1].startswith(("[00:", "transcribing", "v (18.8", "-C stops"))]
    assert drafting and all(len(lines[-1]) <= WIDTH - 1 for lines in drafting)
    assert any("\x1b[2m" in escaped for _, escaped in running)  # the draft's speculative words are dim
    assert not any(line.startswith("[00:") and "\x1b[2m" in line
                   for _, escaped in running for line in escaped.splitlines())  # final lines never are
    lines = [line for line in screen.splitlines() if line.strip()]
    finals = [line for line in lines if line.startswith("[00:")]
    assert finals[-1].endswith("form.") and len(finals) >= 4, lines
    assert lines[lines.index(finals[-1]) + 1].startswith("18.8 s of audio"), lines  # no draft left behind


def test_console_status_line_and_pipe_mode() -> None:
    """``listen``: the level is a status line under the draft on a terminal; on a pipe, words on stdout
    as lines and levels on stderr, no escape codes anywhere."""
    word = lambda text, start, spec=False: Word(text, start, start + 0.3, speculative=spec)  # noqa: E731
    updates = [EngineUpdate(0, (word("Hello", 0.0), word("there.", 0.4), word("How", 0.8, True))),
               EngineUpdate(1, (word("How", 0.8), word("are", 1.1), word("you", 1.4, True)))]

    tty = io.StringIO()
    console = Console(tty, True)
    printer = WordPrinter(console)
    console.status("level    1.0 s system rms  -20.0 dBFS")
    for u in updates:
        printer.update(u)
    console.status("level    2.0 s system rms  -21.0 dBFS")
    console.close()
    out = tty.getvalue()
    assert "[00:00.00] Hello there.\n" in out  # the phrase is final once "How" commits after it
    last_region = out.rsplit("\x1b[J", 2)[-2]
    assert last_region == "How are \x1b[2myou\x1b[0m\nlevel    2.0 s system rms  -21.0 dBFS\r\x1b[1A"
    assert out.endswith("\x1b[J")  # closed: the region is gone

    pipe, err = io.StringIO(), io.StringIO()
    console = Console(pipe, False, status_out=err)
    printer = WordPrinter(console)
    console.status("level 1.0 s")
    for u in updates:
        printer.update(u)
    printer.update(EngineUpdate(), final=True)
    assert pipe.getvalue() == "[00:00.00] Hello there.\n[00:00.80] How are\n"
    assert err.getvalue() == "level 1.0 s\n" and "\x1b" not in pipe.getvalue() + err.getvalue()


def test_held_words_are_printed_when_the_stream_ends_even_without_a_last_update() -> None:
    """A phrase still open when the stream ends (the engine's last update empty or None) is printed by
    ``finish`` (``listen`` lost such words once: nothing was printed for a random pack's gibberish)."""
    pipe = io.StringIO()
    printer = WordPrinter(Console(pipe, False))
    printer.update(EngineUpdate(0, tuple(Word(t, i * 0.4, i * 0.4 + 0.3) for i, t in enumerate(("so", "we", "went")))))
    assert pipe.getvalue() == ""  # no phrase end yet: held (on a terminal they lead the draft line)
    printer.finish()
    printer.finish()
    assert pipe.getvalue() == "[00:00.00] so we went\n"


def test_a_sentence_before_a_pause_is_printed_once_the_source_settles() -> None:
    """On a pipe a line waits for its words to be final, and the engine keeps a stream's last word
    back, so a sentence followed by silence was printed only when the next speech came (``listen |
    tee``: the last thing said before a pause was not in the file). An update that says the source
    settled prints it; words held without a phrase end go out as a line then too, and a later update
    that shows only drafts takes nothing back (the rule of the last word would have printed it twice)."""
    pipe = io.StringIO()
    printer = WordPrinter(Console(pipe, False))
    printer.update(EngineUpdate(0, tuple(Word(t, i * 0.4, i * 0.4 + 0.3) for i, t in enumerate(("We", "left.")))))
    assert pipe.getvalue() == ""
    printer.update(EngineUpdate(settled=3.0))
    assert pipe.getvalue() == "[00:00.00] We left.\n"
    printer.update(EngineUpdate(0, (Word("so", 5.0, 5.2), Word("we", 5.2, 5.4))))
    printer.update(EngineUpdate(settled=8.0))
    printer.update(EngineUpdate(0, (Word("and", 9.0, 9.2, speculative=True),)))
    printer.update(EngineUpdate(1, (Word("and", 9.0, 9.2), Word("then.", 9.2, 9.6), Word("Yes", 10.0, 10.2))))
    printer.finish()
    assert pipe.getvalue() == "[00:00.00] We left.\n[00:05.00] so we\n[00:09.00] and then.\n[00:10.00] Yes\n"


def test_a_title_ends_no_line_and_a_quoted_sentence_does() -> None:
    """Seen in `captioner transcribe` of A Tale of Two Cities (`corpus/`): "[01:19.18] Mrs." was a line
    of its own, "Southcott had recently attained …" the next; and a sentence ending in a closing quote
    ('been."') ended no line. The printer's phrase end is the subtitles' (titles, initials, quotes)."""
    text = 'Mrs. Southcott had heard it. "Why?" he said, "I knew it." So did I. John F. Kennedy spoke.'
    pipe = io.StringIO()
    printer = WordPrinter(Console(pipe, False))
    printer.update(EngineUpdate(0, tuple(Word(t, i * 0.4, i * 0.4 + 0.3) for i, t in enumerate(text.split()))))
    printer.finish()
    lines = [line.split("] ", 1)[1] for line in pipe.getvalue().splitlines()]
    assert lines == ["Mrs. Southcott had heard it.", '"Why?"', 'he said, "I knew it."', "So did I.",
                     "John F. Kennedy spoke."]


def test_a_long_sentence_breaks_before_a_phrase_not_after_it() -> None:
    """A sentence longer than a line (88 characters on a pipe) broke just before the word that did
    not fit ("… authorities insisted on" / "its being received …" in `transcribe` of A Tale of Two
    Cities); it now breaks before the last word there that opens a phrase, the line at least half full."""
    text = ("In short, the period was so far like the present period that some of its noisiest authorities "
            "insisted on its being received for good or for evil in the superlative degree of comparison only.")
    pipe = io.StringIO()
    printer = WordPrinter(Console(pipe, False))
    printer.update(EngineUpdate(0, tuple(Word(t, i * 0.4, i * 0.4 + 0.3) for i, t in enumerate(text.split()))))
    printer.finish()
    lines = [line.split("] ", 1)[1] for line in pipe.getvalue().splitlines()]
    assert lines == ["In short, the period was so far like the present period that some",
                     "of its noisiest authorities insisted on its being received for good or for evil",
                     "in the superlative degree of comparison only."]
    assert " ".join(lines) == text and all(len(line) <= 88 for line in lines)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_long_status_lines_wrap_between_words_on_a_terminal(monkeypatch) -> None:
    """`transcribe`'s summary on an 80-column terminal wrapped inside a word ("328 word" / "s",
    seen in tmux at 120 columns); on a terminal it now wraps between words, the rest indented, and a
    pipe gets the one line as before."""
    monkeypatch.setenv("COLUMNS", "80")
    summary = ("123.6 s of audio in 15.8 s on CPU (opening the model 2.9 s, compute 12.8 s, RTF 0.104); "
               "language en (detected); 328 words\n")
    tty = _Terminal()
    TerminalLines(tty).write(summary)
    lines = tty.getvalue().split("\n")
    assert lines[-1] == "" and all(len(line) < 80 for line in lines)
    assert lines[0].endswith("12.8 s, RTF") and lines[1] == "  0.104); language en (detected); 328 words"
    assert " ".join(line.strip() for line in lines).strip() == summary.strip()
    pipe = io.StringIO()
    TerminalLines(pipe).write(summary)
    assert pipe.getvalue() == summary
    assert fit_terminal(tty, "short line") == "short line"


@pytest.mark.parametrize("closed", ["pipe", "terminal"])
def test_a_reader_that_went_away_fails_no_write_and_is_said(closed: str) -> None:
    """A pipe whose reader exited (EPIPE) and a terminal that was closed (its master end gone: EIO,
    as after SIGHUP): the Console's writes raise nothing, ``gone`` says so, and the descriptor
    now takes every later write (a summary, Python's flush at exit) without an error."""
    import pty

    if closed == "pipe":
        read_end, write_end = os.pipe()
        os.close(read_end)
    else:
        master, write_end = pty.openpty()
        os.close(master)
    out = os.fdopen(write_end, "w", encoding="utf-8")
    try:
        console = Console(out, tty=False)
        assert not console.gone
        console.line("[00:00.50] He could wait no longer.")  # raised BrokenPipeError / OSError(EIO) before
        assert console.gone
        console.line("[00:02.00] For a full hour")
        console.close()
        print("summary", file=out, flush=True)  # the descriptor is the null device's now
    finally:
        out.close()
