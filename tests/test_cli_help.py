"""Every ``--help`` a person can ask for reads as plain text: no reST ````literal```` marks (issue 26)."""

from __future__ import annotations

import argparse

from captioner.cli import build_parser


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def test_no_help_text_shows_double_backticks() -> None:
    helps = {p.prog: p.format_help() for p in _parsers(build_parser())}
    assert len(helps) >= 15  # the commands and their actions
    assert "captioner settings" in helps and "captioner transcribe" in helps
    raw = {prog: [line for line in text.splitlines() if "``" in line] for prog, text in helps.items()}
    assert not {prog: lines for prog, lines in raw.items() if lines}
