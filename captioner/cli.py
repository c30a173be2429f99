"""Command line: ``captioner [options]`` starts the app; subcommands do everything headless.

Each subcommand lives in ``captioner/commands/<name>.py`` with ``register(subparsers)`` that adds
its parser and sets ``func(args, paths) -> int``. A :class:`CaptionerError` becomes one line on
stderr and exit code 2; nothing the user can cause ends in a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from captioner import __version__
from captioner.errors import CaptionerError
from captioner.storage.paths import AppPaths

__all__ = ["build_parser", "run"]

logger = logging.getLogger(__name__)

# Subcommand modules under captioner.commands, in the order --help lists them.
COMMANDS: tuple[str, ...] = ("gui", "transcribe", "listen", "sessions", "models", "settings", "devices", "doctor",
                             "bench")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="captioner",
        description="Live captions on the device: Whisper with the NPUsper streaming engine.",
    )
    parser.add_argument("--version", action="version", version=f"captioner {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"captioner.commands.{name}").register(sub)
    return parser


def _names_a_command(argv: list[str]) -> bool:
    """True when ``argv`` asks for help/version or names a subcommand anywhere."""
    return any(a in ("-h", "--help", "--version") or a in COMMANDS for a in argv)


def run(argv: list[str], paths: AppPaths) -> int:
    """Run the command in ``argv``; the GUI when no subcommand is given."""
    parser = build_parser()
    if "gui" in COMMANDS and argv and argv[0].startswith("-") and not _names_a_command(argv):
        # `captioner --source-file talk.wav ...`: the app's options without the `gui` word; the
        # top-level parser would take the option's value for a command name, so insert it here.
        top = [a for a in argv if a in ("-v", "--verbose")]
        argv = [*top, "gui", *[a for a in argv if a not in ("-v", "--verbose")]]
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        if "gui" not in COMMANDS:
            parser.print_help()
            return 0
        args = parser.parse_args(["gui", *rest])
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return int(args.func(args, paths) or 0)
    except CaptionerError as exc:
        logger.debug("command failed", exc_info=True)
        from captioner.commands._printer import fit_terminal  # only here: --version stays quick

        print(fit_terminal(sys.stderr, f"captioner: error: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("captioner: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `captioner ... | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit must not fail again
        return 0
