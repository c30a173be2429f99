"""CLI subcommands, one module each (``register(subparsers)``); like ``cli`` they may import every layer."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from captioner.transcript.recorder import SessionRecorder

__all__ = ["described", "saved_line"]


def described(doc: str | None) -> str:
    """A module docstring's first paragraph as ``--help`` text: the reST ````literal```` marks dropped."""
    return (doc or "").split("\n\n")[0].replace("``", "")


def saved_line(recorder: SessionRecorder, tail: str = "") -> str:
    """What became of a recorded session, said after its command: its id in the history, or,
    where the store could not take it (a full disk), why and the file it was written to instead."""
    if recorder.fallback_export is not None:
        return (f"not saved in the history ({recorder.unsaved_reason}); the session was written to "
                f"{recorder.fallback_export} (and .txt): captioner sessions import {recorder.fallback_export} "
                "adds it once there is room")
    return f"saved as session {recorder.session_id} (captioner sessions show {recorder.session_id}){tail}"
