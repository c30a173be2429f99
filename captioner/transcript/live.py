"""Live subtitle files: an SRT or WebVTT file that grows as the session is transcribed.

A word is written once it is *final*, when no retraction can reach it
(:func:`~captioner.core.final_count`: every committed word of its source but the last; all of them
once an update says the source ``settled``). Final words go through
the same :class:`~captioner.transcript.cues.CueSegmenter` as the batch export; each cue it closes
is appended in one ``write`` and fsynced, so a crash at any moment leaves a file that parses (at
worst without the cues that were not final yet). :meth:`LiveSubtitleWriter.close` writes the
rest. The session store stays the reference: if an engine ever retracted further than the rule
above, the live file keeps the old text (with a warning) while the store and later exports are
exact.

With two sources the live file takes words in the order they became final, so its cue times may
be nudged forward where the sources overlap; the exported file interleaves them by time.

An update with a ``gap`` (the engine skipped audio it could not keep up with) makes its source's
words final (the skip ended the utterance) and appends the gap's ``[…]`` cue, as the export does.
An update that ``settled`` (nothing of its source open) makes its words final too, and closes the
open cue where the next word could not change it (:meth:`~captioner.transcript.cues.CueSegmenter.settle`):
a sentence followed by a pause is in the file during the pause.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Literal

from captioner.core import EngineUpdate, Word, apply_update, final_count
from captioner.errors import StorageError
from captioner.transcript.cues import Cue, CueOptions, CueSegmenter, Gap
from captioner.transcript.export import VTT_HEADER, srt_cue, vtt_cue

__all__ = ["LiveFormat", "LiveSubtitleWriter"]

logger = logging.getLogger(__name__)

LiveFormat = Literal["srt", "vtt"]


class LiveSubtitleWriter:
    """Appends cues to ``path`` as they become final.

    Args:
        path: the subtitle file; created (or truncated) with user-only permissions.
        fmt: "srt" or "vtt".
        options: cue limits and labels.
        labelled: label each cue with its source (sessions with two sources).

    Raises:
        StorageError: the file cannot be created.
    """

    def __init__(
        self,
        path: Path,
        fmt: LiveFormat = "srt",
        *,
        options: CueOptions | None = None,
        labelled: bool = False,
    ) -> None:
        if fmt not in ("srt", "vtt"):
            raise ValueError(f"live export format must be 'srt' or 'vtt', not {fmt!r}")
        self.path = Path(path)
        self.fmt = fmt
        self.cues_written = 0
        self._segmenter = CueSegmenter(options, labelled=labelled)
        self._pending: dict[str, list[Word]] = {}  # per source: emitted words not yet final
        self._fd: int | None = None
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            raise StorageError(
                f"cannot create the live subtitle file {self.path}: {exc.strerror or exc}"
            ) from exc
        if fmt == "vtt":
            self._append(VTT_HEADER)

    def feed(self, update: EngineUpdate) -> int:
        """Apply one engine update; returns how many cues were appended to the file.

        Raises:
            StorageError: the file cannot be written (disk full, removed medium).
        """
        if self._fd is None:
            raise StorageError(f"the live subtitle file {self.path} is closed")
        pending = self._pending.setdefault(update.source, [])
        if update.retract > len(pending):
            logger.warning(
                "a retraction of %d words reached words already written to %s; the live file keeps "
                "them, the saved session has the corrected text",
                update.retract,
                self.path,
            )
            update = EngineUpdate(len(pending), update.words, update.stats, update.source)
        apply_update(pending, update)
        if update.gap is None and update.settled is None:
            return self._finalize(pending, final_count(pending))
        written = self._finalize(pending, final_count(pending, finished=True))
        if update.gap is not None:
            written += self._write_cues(self._segmenter.push_gap(Gap(*update.gap, update.source)))
        if update.settled is not None:
            written += self._write_cues(self._segmenter.settle(update.source, round(update.settled * 1000)))
        return written

    def close(self) -> None:
        """Write every committed word still held back, close the last cue and the file."""
        if self._fd is None:
            return
        try:
            for pending in self._pending.values():
                self._finalize(pending, final_count(pending, finished=True))
            self._write_cues(self._segmenter.flush())
        finally:
            os.close(self._fd)
            self._fd = None
        logger.info("live subtitle file %s: %d cues", self.path, self.cues_written)

    def __enter__(self) -> LiveSubtitleWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _finalize(self, pending: list[Word], count: int) -> int:
        cues: list[Cue] = []
        for word in pending[:count]:
            cues += self._segmenter.push(word)
        del pending[:count]
        return self._write_cues(cues)

    def _write_cues(self, cues: list[Cue]) -> int:
        for cue in cues:
            self.cues_written += 1
            self._append(srt_cue(self.cues_written, cue) if self.fmt == "srt" else vtt_cue(cue))
        return len(cues)

    def _append(self, text: str) -> None:
        """One write per cue, then fsync: a kill between two cues leaves whole cues only."""
        assert self._fd is not None
        data = memoryview(text.encode("utf-8"))
        before = None
        try:
            before = os.lseek(self._fd, 0, os.SEEK_CUR)
            while data:
                data = data[os.write(self._fd, data) :]
            os.fsync(self._fd)
        except OSError as exc:
            if before is not None:  # a full disk can take half a cue: cut it off, the file still parses
                try:
                    os.ftruncate(self._fd, before)
                    os.lseek(self._fd, before, os.SEEK_SET)
                except OSError:
                    logger.debug("cannot cut the partial cue off %s", self.path, exc_info=True)
            raise StorageError(
                f"cannot write the live subtitle file {self.path}: {exc.strerror or exc}"
            ) from exc
