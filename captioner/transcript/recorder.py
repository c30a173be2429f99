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
on.

A store that stops taking writes during a session (disk full, the file or its folder made
read-only, a removed medium) does not stop it either, and loses nothing: the updates it refused are
folded per source into one pending update (:class:`_Backlog`: the words since the last stored one,
and how many stored words they retract), held in memory, and written in one transaction per source
as soon as a later update finds the store writable again (tried at most every
``retry_interval_s``). :attr:`SessionRecorder.store_problem` says why while words are held back;
the app tells the user once. If the store is still unwritable when the session closes, the whole
session (stored words plus the held-back ones) is exported as JSON and plain text to the first
writable of ``fallback_dirs``, the export folder, the temporary folder or the home folder, and
:attr:`SessionRecorder.fallback_export` names the JSON file. A store that cannot even be opened
or begin the session: :meth:`SessionRecorder.start_or_keep` records it in memory and exports it
the same way at close (``export_reason``).
"""

from __future__ import annotations

import datetime as dt
import logging
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from captioner.core import EngineUpdate, Source, Word, apply_update
from captioner.errors import StorageError
from captioner.transcript.cues import CueOptions, Gap
from captioner.transcript.export import export_words
from captioner.transcript.live import LiveFormat, LiveSubtitleWriter
from captioner.transcript.store import SessionStore

__all__ = ["SessionRecorder"]

logger = logging.getLogger(__name__)


RETRY_INTERVAL_S = 2.0  # while the store refuses writes, try again at most this often (one engine step)


class _Backlog:
    """The updates of one source the store refused, folded into one: retract ``retract`` stored
    words, then append ``words``. Folding keeps it to the words since the failure, however many
    updates came (a retraction eats pending words first, then stored ones)."""

    def __init__(self) -> None:
        self.retract = 0
        self.words: list[Word] = []
        self.gaps: list[tuple[float, float]] = []  # skipped spans (EngineUpdate.gap), stored with the words

    def add(self, update: EngineUpdate) -> None:
        eaten = min(update.retract, len(self.words))
        del self.words[len(self.words) - eaten:]
        self.retract += update.retract - eaten
        self.words += update.words
        if update.gap is not None:
            self.gaps.append(update.gap)

    def update(self, source: Source) -> EngineUpdate:
        return EngineUpdate(self.retract, tuple(self.words), source=source)


class SessionRecorder:
    """Feeds engine updates of one session into the store and the live subtitle file.

    Args:
        store: where the session is recorded.
        session_id: from ``store.begin_session``.
        live: optional live subtitle writer.
        fallback_dirs: where to export the session at :meth:`close` when the store cannot take its
            last words (tried in order, then the temporary folder, then the home folder).
        retry_interval_s: while the store refuses writes, retry at most this often (0: every update).

    Attributes:
        store_problem: why words are being held in memory ("" while the store takes every update).
        export_reason: set when the session is recorded in memory only because the real store could
            not even begin it (``App``): :meth:`close` then exports it like an unwritable store.
        fallback_export: the JSON file the session was exported to at close, when the store could
            not take it; None otherwise.
    """

    def __init__(self, store: SessionStore, session_id: int, live: LiveSubtitleWriter | None = None, *,
                 fallback_dirs: Sequence[Path] = (), retry_interval_s: float = RETRY_INTERVAL_S) -> None:
        self.store = store
        self.session_id = session_id
        self.live = live
        self.warnings: list[str] = []
        self.fallback_dirs = [Path(d) for d in fallback_dirs]
        self.retry_interval_s = retry_interval_s
        self.store_problem = ""
        self.export_reason = ""
        self.fallback_export: Path | None = None
        self._backlog: dict[Source, _Backlog] = {}
        self._next_try = 0.0
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
        fallback_dirs: Sequence[Path] = (),
    ) -> SessionRecorder:
        """Begin a session in ``store`` and open the live file when ``live_path`` is given.

        Args:
            store: the session store to record into.
            sources: the engine streams recorded ("system", "mic").
            model: the pack's name (for the history window).
            provider: the execution provider running it.
            language: the transcription language ("auto" when detected).
            settings: the settings the session ran with (stored as JSON).
            title: the session's title (default: its start time).
            live_path: the live subtitle file to write while recording, or None.
            live_format: "srt"/"vtt"; default from the suffix of ``live_path`` (else "srt").
            options: cue limits and labels for the live file.
            fallback_dirs: see the class.

        Raises:
            StorageError: the session cannot be recorded (a live file that cannot be created is
                only a warning in :attr:`warnings`).
        """
        session_id = store.begin_session(
            sources=sources, model=model, provider=provider, language=language, settings=settings, title=title
        )
        recorder = cls(store, session_id, fallback_dirs=fallback_dirs)
        if live_path is not None:
            fmt: LiveFormat = live_format or ("vtt" if Path(live_path).suffix.lower() == ".vtt" else "srt")
            try:
                recorder.live = LiveSubtitleWriter(live_path, fmt, options=options, labelled=len(set(sources)) > 1)
            except StorageError as exc:
                recorder._warn(f"no live subtitles: {exc}; the session is still being saved")
        return recorder

    @classmethod
    def start_or_keep(cls, open_store: Callable[[], SessionStore], **kwargs: Any) -> SessionRecorder:
        """:meth:`start` in the store ``open_store`` opens (its arguments are :meth:`start`'s but
        the store); where that store cannot be opened or cannot begin a session (a full disk, a
        folder it cannot write), the session is recorded in memory instead with
        :attr:`export_reason` saying why, so that :meth:`close` exports it to a fallback folder:
        the command goes on and loses nothing."""
        try:
            store = open_store()
        except StorageError as exc:
            reason = str(exc)
        else:
            try:
                return cls.start(store, **kwargs)
            except StorageError as exc:
                store.close()
                reason = str(exc)
        logger.info("the session is kept in memory and exported when it ends: %s", reason)  # the caller says it
        recorder = cls.start(SessionStore.in_memory(), **kwargs)
        recorder.export_reason = reason
        return recorder

    def apply(self, update: EngineUpdate) -> None:
        """Record one update (store first: it is the reference), then extend the live file.

        A store that refuses the write (StorageError) does not raise here: the update is held in
        memory with the others since the failure (module docstring) and :attr:`store_problem` set.

        Raises:
            ValueError: the update retracts more words than the source has.
        """
        if not update.is_empty:
            self._store(update)
        if self.live is not None:
            try:
                self.live.feed(update)
            except StorageError as exc:
                self._drop_live(exc)

    @property
    def unsaved_reason(self) -> str:
        """Why the session is not (all) in its store: :attr:`store_problem` or :attr:`export_reason`."""
        return self.store_problem or self.export_reason

    @property
    def held_words(self) -> int:
        """Words held in memory because the store refused them (0 when everything is stored)."""
        return sum(len(b.words) for b in self._backlog.values())

    def flush(self) -> bool:
        """Write the held-back words now if the store takes them; True when nothing is held back."""
        if self._backlog:
            self._next_try = 0.0
            self._store(None)
        return not self._backlog

    def session_words(self, *, include_speculative: bool = False) -> list[Word]:
        """The session's committed words (and speculative ones when asked): those stored and those
        held back, each source in emission order, as ``SessionStore.session_words`` gives them."""
        words = self.store.session_words(self.session_id, include_speculative=True)
        if not self._backlog:
            return [w for w in words if include_speculative or not w.speculative]
        out: list[Word] = []
        for source in dict.fromkeys([*(w.source for w in words), *self._backlog]):
            own = [w for w in words if w.source == source]
            if source in self._backlog:
                apply_update(own, self._backlog[source].update(source))
            out += own
        return [w for w in out if include_speculative or not w.speculative]

    def session_gaps(self) -> list[Gap]:
        """The session's gaps (skipped audio): those stored and those held back."""
        held = [Gap(a, b, source) for source, backlog in self._backlog.items() for a, b in backlog.gaps]
        try:
            stored = self.store.session_gaps(self.session_id)
        except StorageError:
            logger.warning("the stored gaps of session %d cannot be read", self.session_id)
            stored = []
        return sorted([*stored, *held], key=lambda g: (g.start, g.source))

    def _store(self, update: EngineUpdate | None) -> None:
        """Store ``update`` after the held-back ones; hold it back if the store refuses."""
        if update is not None and self._backlog:
            self._hold(update)
            update = None
        if self._backlog and time.monotonic() < self._next_try:
            return
        try:
            for source in list(self._backlog):
                held = self._backlog[source]
                self.store.apply(self.session_id, held.update(source), gaps=held.gaps)
                del self._backlog[source]
            if update is not None:
                self.store.apply(self.session_id, update)
        except StorageError as exc:
            if update is not None:
                self._hold(update)
            self._next_try = time.monotonic() + self.retry_interval_s
            if not self.store_problem:
                logger.warning("the session store refused a write (%s); holding the words in memory", exc)
            self.store_problem = str(exc)
            return
        if self.store_problem:
            logger.info("the session store takes writes again; every held-back word is stored")
        self.store_problem = ""

    def _hold(self, update: EngineUpdate) -> None:
        self._backlog.setdefault(update.source, _Backlog()).add(update)

    def close(self, *, duration_ms: int | None = None, language: str = "") -> None:
        """Finish the live file and mark the session ended (``language``: the language(s) heard,
        "de, en", recorded where given: a session begun with "auto").

        Held-back words are written first; if the store still refuses them, the session is
        exported to a fallback folder (:attr:`fallback_export`) instead. A store that takes the
        words but not the end or the language loses only those (logged).

        Raises:
            StorageError: the store refused the words and no fallback folder could be written.
        """
        if self._closed:
            return
        self._closed = True
        if self.live is not None:
            try:
                self.live.close()
            except StorageError as exc:
                self._drop_live(exc)
        stored = self.flush()
        if stored:
            try:
                if language:
                    self.store.set_language(self.session_id, language)
                self.store.end_session(self.session_id, duration_ms=duration_ms)
            except StorageError as exc:  # every word is stored; only the end (or language) is missing
                logger.warning("the session's end could not be recorded: %s", exc)
        if not stored or self.export_reason:
            self.fallback_export = self._export_fallback(duration_ms, language)

    def _export_fallback(self, duration_ms: int | None, language: str = "") -> Path:
        """Export the whole session (JSON with every word's times, and plain text) to the first
        writable fallback folder, ended (its length ``duration_ms`` where the store could not take
        its end) and with the ``language`` heard where given; returns the JSON file."""
        words = self.session_words()
        try:
            info: dict[str, Any] = self.store.get_session(self.session_id).to_json()
            marks = self.store.session_marks(self.session_id)  # a session kept in memory has its marks
        except StorageError:
            info, marks = {"id": self.session_id}, []
        if info.get("ended_at") is None:
            info["ended_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            info["duration_ms"] = duration_ms
        if language:
            info["language"] = language
        stem = f"unsaved-session-{self.session_id}-{time.strftime('%Y-%m-%d_%H-%M-%S')}"
        folders = [*self.fallback_dirs, Path(tempfile.gettempdir()), Path.home()]
        problems = []
        for folder in dict.fromkeys(folders):
            try:
                folder.mkdir(parents=True, exist_ok=True)
                gaps = self.session_gaps()
                path = export_words(words, folder / f"{stem}.json", "json", session=info, gaps=gaps, marks=marks)
                export_words(words, folder / f"{stem}.txt", "txt", timestamps=True, gaps=gaps, marks=marks)
            except (StorageError, OSError) as exc:
                problems.append(f"{folder}: {exc}")
                continue
            logger.info("the session store could not be written (%s); the session's %d words were exported "
                        "to %s (and .txt)", self.unsaved_reason, len(words), path)  # the caller says it
            return path
        raise StorageError(f"the session store could not be written ({self.unsaved_reason}) and no fallback folder "
                           f"could take the transcript either: {'; '.join(problems)}")

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
