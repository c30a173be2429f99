"""transcript layer: the session store, words → cues, exports and live subtitle files."""

from captioner.transcript.cues import Cue, CueOptions, CueSegmenter, Gap, build_cues
from captioner.transcript.export import (
    EXPORT_FORMATS,
    ExportFormat,
    atomic_write_text,
    export_session,
    export_words,
)
from captioner.transcript.live import LiveSubtitleWriter
from captioner.transcript.recorder import SessionRecorder
from captioner.transcript.store import SearchHit, SessionInfo, SessionStore

__all__ = [
    "EXPORT_FORMATS",
    "Cue",
    "CueOptions",
    "CueSegmenter",
    "ExportFormat",
    "Gap",
    "LiveSubtitleWriter",
    "SearchHit",
    "SessionInfo",
    "SessionRecorder",
    "SessionStore",
    "atomic_write_text",
    "build_cues",
    "export_session",
    "export_words",
]
