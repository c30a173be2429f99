"""Speech activity for the streaming policy: Silero VAD v6 on ONNX Runtime, fed as audio arrives.

Whisper invents words where nobody speaks (sound captions over noise and music, "you" in silence,
loops after the last word), and an RMS floor cannot tell speech from noise. Silero VAD (MIT, ~1 MB,
the batched export that faster-whisper ships; licence beside the file) gives a speech probability
per 32 ms window (512 samples at 16 kHz, each seen with the 64 samples before it); the policy asks
where speech starts and ends inside a round's input (:mod:`captioner.engine.stream`).

Windows are analysed lazily in one batched ``session.run`` per query with the LSTM state carried
over, so the result is the same however the audio was split into blocks (tested). It always runs on
the CPU provider with one thread: ~0.1 ms of compute per second of audio on this machine, far below
anything the NPU could save, and it keeps the NPU's session count down.
"""

from __future__ import annotations

import logging
from collections import deque
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import numpy as np

from captioner.core import SAMPLE_RATE
from captioner.errors import CaptionerError

__all__ = ["DIGITAL_SILENCE_DB", "VAD_MODEL", "VAD_WINDOW", "SpeechDetector", "SpeechSpan"]

logger = logging.getLogger(__name__)

VAD_WINDOW = 512  # samples per probability (32 ms at 16 kHz)
_CONTEXT = 64  # samples of the previous window each window is seen with
_FAINT_FLOOR = 0.1  # a window of a faint stretch is speech when at most this much below ``faint``
_FLOOR_N = 312  # windows (10 s) over which the recording's quiet level (its 10th percentile) is read
DIGITAL_SILENCE_DB = -90.0  # windows below this are left out of the quiet level (joins, muted players)
_PHRASE_N = 31  # the last windows the threshold heard (1 s) whose median level is the phrase's level
_PHRASE_DB = 10.0  # a loud window is at most this far below the phrase's level
VAD_MODEL = "silero_vad_v6.onnx"


def _model_path() -> Path:
    return Path(str(resources.files("captioner") / "resources" / VAD_MODEL))


class SpeechSpan(NamedTuple):
    """Detected speech: absolute sample indices, ``end`` exclusive."""

    start: int
    end: int


class SpeechDetector:
    """Speech probabilities of one stream's audio, indexed by absolute sample position.

    Args:
        threshold: a window with probability ≥ this is speech (Silero's default 0.5).
        model_path: the ONNX model (default: the packaged one).
        hold: a window whose probability is at most this much below ``threshold``, right after a
            speech window, is speech too (Silero's own hysteresis: its speech ends below threshold
            − 0.15, ``neg_threshold``); 0: none. Decided window by window in order, so the answer
            does not depend on how the audio was split or asked for.
        faint: speech that never reaches ``threshold`` (band-limited radio: Silero rates whole Apollo
            air-to-ground turns 0.25–0.45): a stretch of ``faint_s`` seconds in which no window
            reaches ``threshold`` and whose mean probability is at least ``faint`` is speech, except
            its windows more than 0.1 below ``faint`` (``_FAINT_FLOOR``); 0: off. Speech that reaches the threshold
            anywhere in a stretch is left to the threshold, so where Silero hears speech clearly
            nothing changes. A stretch counts once its last window is analysed: a query can see it
            become speech as more audio arrives, the final answer does not depend on the splits.
        faint_s: the stretch, seconds.
        weak: radio speech that Silero hardly rates (a clipped, edited air-to-ground channel 15 dB
            above its noise, rated 0.05–0.4 word after word): a ``faint_s`` stretch in which no
            window reaches ``threshold``, whose mean probability is at least ``weak`` and whose
            median level stands ``weak_db`` or more above the recording's quiet level (as for
            ``loud_db``) is speech where its windows stand that high (the pauses between its
            words, at the quiet level, stay out); 0: off. Stationary sound (hum, fans, noise, a
            tone) is its own quiet level and never stands above it.
        weak_db: that height, dB.
        loud_db: the speaker goes on where Silero lets go (a meeting's soft "I mean", "we could"
            between two phrases, rated under 0.1): a window as loud as speech there, at least
            ``loud_db`` dB above the recording's quiet level (the 10th percentile of the window
            levels of the last 10 s, digital silence left out) and at most 10 dB under the level of
            the phrase before it (the median of its last second), between two windows the threshold
            hears at most ``bridge_s`` apart, is speech; until the second comes (or the bridge
            ends), such windows after the first count as speech, so an utterance does not close
            while its speaker may be going on. 0: off. Where the recording is not that quiet between
            words (noise, music, radio) no window is loud enough, nor is breath or room sound well
            under the voice; loud sound that no speech follows within the bridge is not speech in
            the end.
        bridge_s: the longest stretch between two windows the threshold hears that loud windows
            join, seconds.

    Raises:
        CaptionerError: the model file is missing or ONNX Runtime cannot load it.
    """

    def __init__(self, threshold: float = 0.5, model_path: Path | None = None, *, hold: float = 0.0,
                 faint: float = 0.0, faint_s: float = 1.0, weak: float = 0.0, weak_db: float = 12.0,
                 loud_db: float = 0.0, bridge_s: float = 1.5):
        import onnxruntime as ort

        path = model_path or _model_path()
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.enable_cpu_mem_arena = False
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own exception types
            raise CaptionerError(f"cannot load the speech detector {path}: {exc}") from exc
        self.threshold = float(threshold)
        self._hold_from = self.threshold - hold if hold > 0 else self.threshold
        self._h = np.zeros((1, 1, 128), np.float32)
        self._c = np.zeros((1, 1, 128), np.float32)
        self._context = np.zeros(_CONTEXT, np.float32)
        self._pending: list[np.ndarray] = []
        self._pending_n = 0
        self._probs = np.zeros(1024, np.float32)
        self._speech = np.zeros(1024, bool)
        self._n = 0  # windows analysed
        self._faint = float(faint)
        self._faint_need = max(1, -(-round(faint_s * SAMPLE_RATE) // VAD_WINDOW))
        self._weak, self._weak_db = float(weak), float(weak_db)
        self._levels = np.zeros(1024, np.float32)  # dBFS of each window
        self._detected = np.zeros(1024, bool)  # speech by the threshold (and hold)
        self._faint_speech = np.zeros(1024, bool)  # speech by ``faint`` or ``weak``
        self._loud = np.zeros(1024, bool)  # speech by its level between two phrases (``loud_db``)
        self._loud_db = float(loud_db)
        self._bridge_need = max(1, round(bridge_s * SAMPLE_RATE / VAD_WINDOW))
        self._last_detected = -1
        self._phrase: deque[float] = deque(maxlen=_PHRASE_N)  # levels of the last windows the threshold heard
        self._waiting: list[int] = []  # loud windows since the last detected one: speech until the bridge ends

    @property
    def analysed(self) -> int:
        """Samples covered by probabilities so far (a multiple of :data:`VAD_WINDOW`)."""
        self._analyse()
        return self._n * VAD_WINDOW

    def feed(self, samples: np.ndarray) -> None:
        """Queue 16 kHz mono float32 samples (analysed when next asked)."""
        if samples.size:
            self._pending.append(np.asarray(samples, np.float32))
            self._pending_n += samples.size

    def flush(self) -> None:
        """Zero-pad the queued remainder to a whole window (end of the stream)."""
        if self._pending_n % VAD_WINDOW:
            self.feed(np.zeros(VAD_WINDOW - self._pending_n % VAD_WINDOW, np.float32))

    def _analyse(self) -> None:
        whole = self._pending_n // VAD_WINDOW * VAD_WINDOW
        if not whole:
            return
        data = np.concatenate(self._pending)
        rest = data[whole:]
        self._pending = [rest] if rest.size else []
        self._pending_n = rest.size
        windows = data[:whole].reshape(-1, VAD_WINDOW)
        context = np.concatenate([self._context[None], windows[:-1, -_CONTEXT:]])
        probs, self._h, self._c = self._session.run(
            None, {"input": np.concatenate([context, windows], axis=1), "h": self._h, "c": self._c}
        )
        self._context = windows[-1, -_CONTEXT:].copy()
        probs = np.asarray(probs, np.float32).reshape(-1)
        if self._n + probs.size > self._probs.size:
            size = max(2 * self._probs.size, self._n + probs.size)
            self._probs = np.concatenate([self._probs[: self._n], np.zeros(size - self._n, np.float32)])
            self._levels = np.concatenate([self._levels[: self._n], np.zeros(size - self._n, np.float32)])
            for name in ("_speech", "_detected", "_faint_speech", "_loud"):
                mask = getattr(self, name)
                setattr(self, name, np.concatenate([mask[: self._n], np.zeros(size - self._n, bool)]))
        self._probs[self._n : self._n + probs.size] = probs
        speech = probs >= self.threshold
        if self._hold_from < self.threshold:  # held: a window above the lower bound after a speech window
            held = probs >= self._hold_from
            before = bool(self._detected[self._n - 1]) if self._n else False
            for i in range(probs.size):
                before = speech[i] = speech[i] or (held[i] and before)
        first, end = self._n, self._n + probs.size
        self._detected[first:end] = speech
        self._levels[first:end] = 10 * np.log10(np.mean(np.square(windows, dtype=np.float64), axis=1) + 1e-12)
        if self._faint > 0 or self._weak > 0:
            self._mark_faint(first, end)
        if self._loud_db > 0:
            self._mark_loud(first, end)
        lo = max(0, first - max(self._faint_need, self._bridge_need))  # how far back the rules change windows
        self._speech[lo:end] = self._detected[lo:end] | self._faint_speech[lo:end] | self._loud[lo:end]
        self._n = end

    def _mark_faint(self, first: int, end: int) -> None:
        """Mark the faint and weak speech of every ``faint_s`` stretch that ends in the new windows
        ``[first, end)`` and has no window at or above the threshold: one whose mean probability is
        at least ``faint`` has its windows within ``_FAINT_FLOOR`` of ``faint`` made speech (the dips
        between its words stay out, so its pauses stay pauses); else one whose mean is at least
        ``weak`` and whose median level stands ``weak_db`` above the quiet level has its windows that
        stand that high made speech."""
        need = self._faint_need
        lo = max(0, first - need + 1)
        if end - lo < need:
            return
        probs = self._probs[lo:end]
        sums = np.cumsum(np.concatenate([[0.0], probs.astype(np.float64)]))
        strong = np.cumsum(np.concatenate([[0], probs >= self.threshold]))
        mean, under = (sums[need:] - sums[:-need]) / need, strong[need:] == strong[:-need]
        faint = (mean >= self._faint) & under if self._faint > 0 else np.zeros(mean.size, bool)
        for k in np.flatnonzero(faint).tolist():  # the stretch [lo + k, lo + k + need)
            self._faint_speech[lo + k : lo + k + need] |= probs[k : k + need] >= self._faint - _FAINT_FLOOR
        if self._weak <= 0:
            return
        for k in np.flatnonzero((mean >= self._weak) & under & ~faint).tolist():
            levels = self._levels[lo + k : lo + k + need]
            high = self._quiet_level(lo + k + need - 1) + self._weak_db
            if float(np.median(levels)) >= high:
                self._faint_speech[lo + k : lo + k + need] |= levels >= high

    def _quiet_level(self, j: int) -> float:
        """dBFS: the 10th percentile of the window levels of the 10 s up to window ``j``, digital
        silence left out (−inf when that is all there is)."""
        levels = self._levels[max(0, j - _FLOOR_N + 1) : j + 1]
        levels = levels[levels > DIGITAL_SILENCE_DB]
        return float(np.percentile(levels, 10)) if levels.size else float("-inf")

    def _loud_enough(self, j: int) -> bool:
        """Window ``j`` is as loud as speech here: ``loud_db`` above the quiet level and at most
        ``_PHRASE_DB`` below the level of the phrase before it."""
        level = float(self._levels[j])
        return level >= float(np.median(self._phrase)) - _PHRASE_DB and level >= self._quiet_level(j) + self._loud_db

    def _mark_loud(self, first: int, end: int) -> None:
        """Decide the new windows ``[first, end)`` in order of arrival: a loud window within
        ``bridge_s`` after the last window the threshold heard is speech while that bridge lasts; a
        window the threshold hears keeps the loud windows before it, and the bridge's end without
        one takes them back."""
        detected, loud, levels, bridge = self._detected, self._loud, self._levels, self._bridge_need
        for j in range(first, end):
            if self._waiting and j - self._last_detected > bridge:  # no speech came: a tail of sound
                loud[self._waiting] = False
                self._waiting.clear()
            if detected[j]:
                self._last_detected = j
                self._waiting.clear()  # the speaker went on: the loud windows stay speech
                self._phrase.append(float(levels[j]))
            elif self._last_detected >= 0 and j - self._last_detected <= bridge and self._loud_enough(j):
                loud[j] = True
                self._waiting.append(j)

    def probabilities(self, start: int, end: int) -> np.ndarray:
        """float32 [windows]: the probabilities of the windows that overlap samples [start, end)."""
        return self._probs[self._windows(start, end)].copy()

    def levels(self, start: int, end: int) -> np.ndarray:
        """float32 [windows]: the levels (dBFS, mean square) of the windows that overlap samples
        [start, end), the ones the faint, weak and loud rules compare with the quiet level."""
        return self._levels[self._windows(start, end)].copy()

    def _windows(self, start: int, end: int) -> slice:
        """The analysed windows that overlap samples [start, end) (empty where none); the pending
        audio is analysed first, which may grow the per-window arrays (index them after this call)."""
        self._analyse()
        first = max(0, start // VAD_WINDOW)
        return slice(first, max(first, min(self._n, -(-end // VAD_WINDOW))))

    def pause(self, start: int, end: int, *, min_s: float) -> SpeechSpan | None:
        """The latest run of at least ``min_s`` seconds of non-speech windows that lies whole inside
        [start, end) and has speech before it there (where a long utterance can be cut between two
        phrases), as its first and end sample; None when there is none. Loud windows that join two
        phrases (``loud_db``) count as non-speech here: they keep an utterance open, but a long one
        can still be cut where Silero hears a pause."""
        self._analyse()
        first = -(-max(0, start) // VAD_WINDOW)
        last = min(self._n, end // VAD_WINDOW)
        if last - first < 2:
            return None
        speech = self._detected[first:last] | self._faint_speech[first:last]  # the loud ones excepted
        onsets = np.flatnonzero(speech[1:] & ~speech[:-1]) + 1  # a pause ends where speech resumes
        need = -(-round(min_s * SAMPLE_RATE) // VAD_WINDOW)
        for stop in onsets[::-1]:
            run = stop - 1
            while run >= 0 and not speech[run]:
                run -= 1
            if run >= 0 and stop - run - 1 >= need:
                return SpeechSpan((first + int(run) + 1) * VAD_WINDOW, (first + int(stop)) * VAD_WINDOW)
        return None

    def speech(self, start: int, end: int, *, min_s: float = 0.1) -> SpeechSpan | None:
        """The first and last speech sample of [start, end) (whole windows), or None when it holds
        less than ``min_s`` seconds of speech windows (a lone 32 ms blip in noise is not speech)."""
        windows = self._windows(start, end)
        first = windows.start
        speech = np.flatnonzero(self._speech[windows])
        if not speech.size or speech.size * VAD_WINDOW < min_s * SAMPLE_RATE:
            return None
        return SpeechSpan(
            max(start, (first + int(speech[0])) * VAD_WINDOW),
            min(end, (first + int(speech[-1]) + 1) * VAD_WINDOW),
        )
