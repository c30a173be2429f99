"""A second, higher reference for the accuracy bench: faster-whisper on the same CTranslate2 weights.

Development only (``faster-whisper`` comes with the dev extra; never imported at run time). Two modes
per audio, both on the CPU with ``compute_type="float32"`` (the packs are float32 too):

* ``fw_default``: faster-whisper's default decoding — beam 5, temperature fallback when a window's
  compression ratio or average log-probability looks wrong, conditioned on the previous text — with
  its Silero VAD filter on;
* ``fw_greedy``: greedy (beam 1) at temperature 0 only, no fallback, no VAD.

And one unscored pass for time: the default decoding with word timestamps (cross-attention DTW),
whose word ends are the live modes' second latency reference (:meth:`FasterWhisperReference.word_times`;
issue 25 judges latency against faster-whisper's word ends). It is a pass of its own because word
timestamps change where faster-whisper's next window starts, and so its words: on the development
corpus's talk, 87 errors without them and 93 with them.

A folder whose ``model.bin`` is split into ``model.bin.part1``, ``.part2``, … is joined once into a
temporary folder (the other files are linked), which :meth:`FasterWhisperReference.close` removes.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from captioner.bench.scoring import TimedWord
from captioner.errors import CaptionerError

__all__ = ["FasterWhisperReference"]

logger = logging.getLogger(__name__)

MODES: dict[str, dict[str, Any]] = {
    "fw_default": {"beam_size": 5, "vad_filter": True},
    "fw_greedy": {"beam_size": 1, "temperature": 0.0, "vad_filter": False},
}
WORD_TIMES: dict[str, Any] = {**MODES["fw_default"], "word_timestamps": True}


def _model_folder(folder: Path) -> tuple[Path, Path | None]:
    """(folder CTranslate2 can load, temporary folder to delete or None)."""
    if (folder / "model.bin").is_file():
        return folder, None
    parts = sorted(folder.glob("model.bin.part*"), key=lambda p: int(p.name.rsplit("part", 1)[1] or 0))
    if not parts:
        raise CaptionerError(f"{folder} is not a CTranslate2 Whisper folder (no model.bin)")
    tmp = Path(tempfile.mkdtemp(prefix="captioner-fw-"))
    with (tmp / "model.bin").open("wb") as out:
        for part in parts:
            with part.open("rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
    for other in folder.iterdir():
        if other.is_file() and not other.name.startswith("model.bin"):
            (tmp / other.name).symlink_to(other.resolve())
    return tmp, tmp


class FasterWhisperReference:
    """faster-whisper's ``WhisperModel`` over one CTranslate2 folder (see module docstring).

    Raises:
        CaptionerError: faster-whisper is not installed, or the folder is not a CTranslate2 model.
    """

    modes = tuple(MODES)

    def __init__(self, folder: Path, threads: int = 2) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise CaptionerError("the faster-whisper reference needs faster-whisper; install the dev extra: "
                                 "pip install -e '.[dev]'") from exc
        path, self._tmp = _model_folder(Path(folder))
        try:
            self._model = WhisperModel(str(path), device="cpu", compute_type="float32", cpu_threads=threads)
        except Exception as exc:  # ctranslate2 raises RuntimeError/ValueError for a bad folder
            self.close()
            raise CaptionerError(f"faster-whisper cannot load {folder}: {exc}") from exc
        self.multilingual = bool(self._model.model.is_multilingual)

    def transcribe(self, audio: np.ndarray, language: str = "en") -> dict:
        """mode -> :class:`~captioner.bench.accuracy.ModeRun` of ``audio`` (16 kHz mono float32)."""
        from captioner.bench.accuracy import ModeRun

        out = {}
        for mode, kwargs in MODES.items():
            t0 = time.perf_counter()
            out[mode] = ModeRun(self._words(audio, language, kwargs), time.perf_counter() - t0)
        return out

    def word_times(self, audio: np.ndarray, language: str = "en") -> list[TimedWord]:
        """Each word's own start and end (s) in the default decoding with word timestamps."""
        return self._words(audio, language, WORD_TIMES)

    def _words(self, audio: np.ndarray, language: str, kwargs: dict[str, Any]) -> list[TimedWord]:
        segments, _ = self._model.transcribe(np.asarray(audio, np.float32), language=language, **kwargs)
        return [w for s in segments for w in _segment_words(s)]

    def close(self) -> None:
        """Remove the joined temporary folder, if any."""
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def _segment_words(segment: Any) -> list[TimedWord]:
    """A segment's words: each with its own times where faster-whisper gave word timestamps, else
    the segment's text split at spaces, every word with the segment's times."""
    if segment.words:
        return [TimedWord(w.word.strip(), w.start, w.end) for w in segment.words if w.word.strip()]
    return [TimedWord(w, segment.start, segment.end) for w in segment.text.split()]
