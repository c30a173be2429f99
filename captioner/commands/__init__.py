"""CLI subcommands, one module each (``register(subparsers)``); like ``cli`` they may import every layer."""

from __future__ import annotations

__all__ = ["described"]


def described(doc: str | None) -> str:
    """A module docstring's first paragraph as ``--help`` text: the reST ````literal```` marks dropped."""
    return (doc or "").split("\n\n")[0].replace("``", "")
