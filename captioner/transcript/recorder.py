"""Record one session: the store and, optionally, a live subtitle file, fed by the same updates.

This is the API ``transcribe``, ``listen`` and the app use::

    store = SessionStore.open(paths.sessions_db)      # or SessionStore.in_memory() ("don't save")
    with SessionRecorder.start(store, sources=("system",), model=pack, provider=ep,
                               language="en", settings=to_dict(settings),
                               live_path=Path("live.srt")) as rec:
        for update in engine_updates:
            rec.apply(update)
    words = store.session_words(rec.session_id)      # for an export at the end

A failing live file never stops the recording: a file that cannot be created or written is
closed, the problem is logged and kept in :attr:`SessionRecorder.warnings`, and the store goes
on. A failing store raises ``StorageError``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from captioner.core import EngineUpdate, Source
from captioner.errors import StorageError
from captioner.transcript.cues import CueOptions
from captioner.transcript.live import LiveFormat, LiveSubtitleWriter
from captioner.transcript.store import SessionStore

__all__ = ["SessionRecorder"]

logger = logging.getLogger(__name__)


class SessionRecorder:
    """Feeds engine updates of one session into the store and the live subtitle file.

    Args:
        store: where the session is recorded.
        session_id: from ``store.begin_session``.
        live: optional live subtitle writer.
    """

    def __init__(self, store: SessionStore, session_id: int, live: LiveSubtitleWriter | None = None) -> None:
        self.store = store
        self.session_id = session_id
        self.live = live
        self.warnings: list[str] = []
        self._closed = False

    @classmethod
    def start(
        cls,
        store: SessionStore,
        *,
        sources: Sequence[Source] = ("system",),
        model: str = "",
        provider: str = "",
        language: str = "",
        settings: Mapping[str, Any] | None = None,
        title: str = "",
        live_path: Path | None = None,
        live_format: LiveFormat | None = None,
        options: CueOptions | None = None,
    ) -> SessionRecorder:
        """Begin a session in ``store`` and open the live file when ``live_path`` is given.

        Args:
            live_format: "srt"/"vtt"; default from the suffix of ``live_path`` (else "srt").
            options: cue limits and labels for the live file.

        Raises:
            StorageError: the session cannot be recorded (a live file that cannot be created is
                only a warning in :attr:`warnings`).
        """
        session_id = store.begin_session(
            sources=sources, model=model, provider=provider, language=language, settings=settings, title=title
        )
        recorder = cls(store, session_id)
        if live_path is not None:
            fmt: LiveFormat = live_format or ("vtt" if Path(live_path).suffix.lower() == ".vtt" else "srt")
            try:
                recorder.live = LiveSubtitleWriter(live_path, fmt, options=options, labelled=len(set(sources)) > 1)
            except StorageError as exc:
                recorder._warn(f"no live subtitles: {exc}; the session is still being saved")
        return recorder

    def apply(self, update: EngineUpdate) -> None:
        """Record one update (store first: it is the reference), then extend the live file."""
        self.store.apply(self.session_id, update)
        if self.live is not None:
            try:
                self.live.feed(update)
            except StorageError as exc:
                self._drop_live(exc)

    def close(self, *, duration_ms: int | None = None) -> None:
        """Finish the live file and mark the session ended."""
        if self._closed:
            return
        self._closed = True
        if self.live is not None:
            try:
                self.live.close()
            except StorageError as exc:
                self._drop_live(exc)
        self.store.end_session(self.session_id, duration_ms=duration_ms)

    def discard(self) -> None:
        """Drop the session: the live file is closed and removed, the session deleted from the store."""
        self._closed = True
        live, self.live = self.live, None
        if live is not None:
            try:
                live.close()
            except StorageError:
                logger.debug("closing the discarded live file failed", exc_info=True)
            live.path.unlink(missing_ok=True)
        self.store.delete_session(self.session_id)

    def __enter__(self) -> SessionRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _warn(self, message: str) -> None:
        logger.warning("%s", message)
        self.warnings.append(message)

    def _drop_live(self, exc: StorageError) -> None:
        self._warn(f"live subtitles stopped: {exc}; the session is still being saved")
        live, self.live = self.live, None
        if live is not None:
            try:
                live.close()
            except StorageError:
                logger.debug("closing the failed live file failed too", exc_info=True)
