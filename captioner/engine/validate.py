"""Per-token validation of one decoding round: the NPUsper stop conditions (NPUSPER.md §7–§9).

For every generated token, in the reference's order:

1. when it is *predicted* (:meth:`RoundValidator.on_prediction`): the EOT rule (§4.4, §9.2) — if
   EOT beats the best ordinary token (``eot_logit > token_logit``) that runner-up is kept unless it
   is garbage (special, or no ASCII alphanumeric byte), in which case the round stops with reason
   ``"eot"`` and every token decoded so far is kept;
2. when its cross-attention arrives (:meth:`RoundValidator.on_attention`, from the decoder pass that
   *consumes* it, §5): the repetition guard (3 identical ids → stop, all three dropped; ours: a
   block of 2–4 tokens three times in a row → stop, the first copy kept; both a failed decode,
   ``Stop.loop``, which a live round decodes again in the 30 s window, stream.py deviation 50), then for
   content tokens the backward cross-attention shift test (§7: ``f+ < f−`` → stop, the token and
   everything after it dropped; ours: not while the speech detector hears the speech go on
   ``backward_speech_s`` after the last passed f+, stream.py deviation 46) and the peak-margin
   stop (§8: ``f+ > input − 0.6 s`` → stop, the token kept).

The difference signal is ``MA_10(Med_7(a_i − a_prev))`` with mirror edges for the median
(``numpy.pad(mode="reflect")``) and zero edges for the moving average (``np.convolve(x,
ones(10)/10, "same")``); f+ is searched from 0.3 s (frame 15), f− over all frames, first index on
ties; the first difference of a round always passes. Everything is vectorised numpy, float32.

Two guards of ours run on every completed word (a word is complete when the next word starts, or at
the round's end), because the attention test misses Whisper's two commonest inventions on real
speech:

* **phrase repetition** (:func:`repeated_tail`): a block of 1–24 words said again right after
  itself ("on the left on the left", "gospel gospel") is where greedy Whisper loops; the round
  stops at the repeat (``"repetition"``), the words before it kept. The committed words before the
  round's audio are the context, so a loop across rounds is caught too. A lone word said twice
  counts too: Whisper doubles short words far more often than speakers do ("No. No. No." for a
  single "no"). But a repeat every token of which attends :data:`_REPEAT_AFTER_S` or more after its
  first time's counterpart (the peaks of the alignment heads' cross-attention where the decoder
  gives them, :meth:`RoundValidator.on_alignment`, else the final layer's; the round's first token,
  whose attention is spread, punctuation tokens, whose attention peaks anywhere, and peaks in the
  silence after the input left out), and before the input's last :data:`_RESTART_END_S`, was heard in later
  speech: a speaker's real repetition ("… tell you, you have …", "words, words, words"), which is
  kept; stopping there lost the rest of the sentence. A first time that begins in the context has
  no attention: its words' repeat must attend that much after the context's last word ends (its
  committed time, ``context_ends``); a sentence read twice otherwise froze the live rounds. The same single token twice is left to the
  reference's id rule (three copies stop the round and are all dropped). Greedy Whisper also
  restarts its whole sentence after the last word; the round's first five words said again stop it
  at once, before the plan runs out (real speech repeats 3–4-word phrases, "it was here that", but
  five-word restarts of a round's opening were not seen in the corpus). A closing round, which
  re-decodes a whole utterance, may meet a real one ("He could wait no longer. … but he could wait
  no longer."). A restart is Whisper's only when it hears the same audio again: the words of a
  real repeat attend to later audio (the median of their tokens' cross-attention peaks at least
  :data:`_RESTART_LATER_S` after the first time's) that is still speech (before the input's last
  :data:`_RESTART_END_S`); a restart invented after the last word attends back to the first time's
  audio or to the silence after the speech.
* **sound annotations**: a word that opens with "(", "[", "♪" or "*" is a caption of a sound
  ("(water flowing)", "[BLANK_AUDIO]"), never speech; the round stops before it (``"nonspeech"``).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from captioner.engine.model import FRAME_S
from captioner.engine.tokens import Vocabulary, normalize_word

__all__ = [
    "STOP_REASONS",
    "RoundValidator",
    "Stop",
    "exclude_index",
    "filtered_difference",
    "is_annotation",
    "median_filter",
    "moving_average",
    "repeated_tail",
    "said_in_a_loop",
    "shift_peaks",
]

logger = logging.getLogger(__name__)

STOP_REASONS = ("backward_shift", "peak_margin", "repetition", "eot", "nonspeech")
_REPEAT = 3  # identical consecutive ids that stop a round
_BLOCK = 4  # ... and blocks of 2 to this many tokens said three times in a row ("-Chi-Chi-Chi")
_MAX_BLOCK = 24  # longest repeated word block the repetition guard looks for
_LOOP_TIMES = 4  # a block of two or more words said this often in a row is a loop, not speech
_RESTART = 5  # the round's first words said again: greedy Whisper restarting its sentence
_RESTART_LATER_S = 1.0  # ... unless they attend this much later than the first time (a real repeat)
_RESTART_END_S = 0.3  # ... and not to the input's end (the silence after the speech)
_REPEAT_AFTER_S = 0.2  # a repeat every token of which attends this much later than its first time's is speech
_ANNOTATION_OPENERS = (b"(", b"[", "\u266a".encode(), "\u266b".encode(), b"*")


def repeated_tail(words: list[bytes]) -> int:
    """How many trailing words repeat the block just before them (0: no repetition).

    ``words`` are normalised (:func:`captioner.engine.tokens.normalize_word`), empty ones removed; a
    block of 1–24 words counts at its second occurrence.
    """
    for n in range(1, _MAX_BLOCK + 1):
        if len(words) < 2 * n:
            break
        if words[-n:] != words[-2 * n : -n]:
            continue
        return n
    return 0


def said_in_a_loop(words: list[bytes]) -> bool:
    """A block of 2–24 words, not all one word, said four or more times in a row anywhere in
    ``words`` (normalised, as for :func:`repeated_tail`): greedy Whisper's loop ("then apprehension,
    then apprehension, …"). A speaker may say a phrase three times ("You want to make it? …" ×3) and
    one word many times ("no, no, no, no"); the token guards judge a word said again."""
    for n in range(2, _MAX_BLOCK + 1):
        for i in range(0, len(words) - _LOOP_TIMES * n + 1):
            block = words[i : i + n]
            if len(set(block)) > 1 and all(words[i + k * n : i + (k + 1) * n] == block for k in range(1, _LOOP_TIMES)):
                return True
    return False


def is_annotation(text: bytes) -> bool:
    """The word's text opens a sound caption: "(", "[", a music note or "*" after its space."""
    return text.lstrip(b" ").startswith(_ANNOTATION_OPENERS)


@functools.lru_cache(maxsize=64)
def _mirror_index(n: int, width: int) -> np.ndarray:
    """int [n, width]: indices of the centred windows with whole-sample mirroring (index −k → k,
    n−1+k → n−1−k), clamped to [0, n−1] where a very short signal is still out of range."""
    half = width // 2
    idx = np.arange(-half, n + half)
    idx = np.where(idx < 0, -idx, idx)
    idx = np.where(idx > n - 1, 2 * (n - 1) - idx, idx)
    idx = np.clip(idx, 0, n - 1)
    windows = sliding_window_view(idx, width).copy()
    windows.flags.writeable = False  # cached and shared
    return windows


def median_filter(x: np.ndarray, width: int = 7) -> np.ndarray:
    """Centred running median along the last axis with mirror edges (NPUSPER.md §7.3 step 1).

    Args:
        x: float [..., n].
        width: odd window; ``width <= 1`` returns ``x`` unchanged.

    Returns:
        Same shape and dtype as ``x``; equals ``scipy.ndimage.median_filter(x, width, mode="mirror")``
        row by row (and ``numpy.pad(mode="reflect")`` + median for signals longer than the window).
    """
    if width <= 1 or x.shape[-1] == 0:
        return x
    windows = x[..., _mirror_index(x.shape[-1], width)]  # [..., n, width]
    return np.partition(windows, width // 2, axis=-1)[..., width // 2]


def moving_average(x: np.ndarray, width: int = 10) -> np.ndarray:
    """Moving average along the last axis, zeros outside, divisor always ``width`` (§7.3 step 2).

    ``out[f] = sum(x[f−width//2 : f+(width−1)//2+1]) / width``, which is
    ``np.convolve(x, np.ones(width)/width, "same")`` for a 1-D signal at least ``width`` long; each
    window is summed on its own so that equal windows give bit-equal outputs (ties stay ties).
    """
    if width <= 1 or x.shape[-1] == 0:
        return x
    left, right = width // 2, (width - 1) // 2
    pad = [(0, 0)] * (x.ndim - 1) + [(left, right)]
    padded = np.pad(x, pad)
    return (sliding_window_view(padded, width, axis=-1).sum(axis=-1) / x.dtype.type(width)).astype(x.dtype)


def filtered_difference(current: np.ndarray, previous: np.ndarray, median: int = 7, average: int = 10) -> np.ndarray:
    """float32 [n]: ``MA_average(Med_median(current − previous))`` (paper Eq. 6–7)."""
    delta = np.asarray(current, dtype=np.float32) - np.asarray(previous, dtype=np.float32)
    return moving_average(median_filter(delta, median), average)


def exclude_index(exclude_s: float, n: int) -> int:
    """First frame searched for f+: ``int(float32(exclude_s) / float32(0.02))`` as in the C++ (0.3 → 15),
    clamped to [0, n−1]."""
    idx = int(np.float32(exclude_s) / np.float32(FRAME_S))
    return min(max(idx, 0), max(n - 1, 0))


def shift_peaks(signal: np.ndarray, exclude_idx: int) -> tuple[int, int]:
    """(f+, f−) frame indices: argmax over ``[exclude_idx, n)`` and argmin over all frames (§7.4);
    numpy's argmax/argmin return the first index on ties, as the reference does."""
    f_plus = exclude_idx + int(np.argmax(signal[exclude_idx:]))
    return f_plus, int(np.argmin(signal))


@dataclass(frozen=True, slots=True)
class Stop:
    """Why and where a round stopped decoding.

    Attributes:
        reason: one of :data:`STOP_REASONS`.
        index: the stop index: the round's candidates are the decoded tokens ``[0, index)``
            (backward shift: the flagged token i → i; peak margin: i + 1; repetition: i − 2;
            EOT: every decoded token; phrase repetition: the repeat's first token; nonspeech: the
            annotation's first token).
        token: the flagged token id (backward shift only; the 30 s re-inference tracker uses it).
        loop: a repetition stop of the token guards (one id three times, a block inside a word three
            times): the decode itself failed, which no speech sounds like (a live round so stopped is
            decoded again in the 30 s window, stream.py deviation 50).
    """

    reason: str
    index: int
    token: int | None = None
    loop: bool = False


class WordGuard:
    """The repetition and annotation guards over one round's decoded tokens (module docstring)."""

    def __init__(self, vocab: Vocabulary, context: tuple[bytes, ...] = (), peaks: list[int] | None = None,
                 input_s: float = 0.0, align_peaks: list[int] | None = None, context_ends: tuple[float, ...] = (),
                 phrases: bool = True, kept_after: tuple[int, ...] | None = None):
        self.vocab = vocab
        self._phrases = phrases  # False: the annotation guard only
        self._kept_after = kept_after  # decoded tokens before a repeat that is kept once (RoundValidator)
        self._peaks = peaks if peaks is not None else []  # decoded index -> attention peak frame
        self._align = align_peaks if align_peaks is not None else []  # ... of the alignment heads, when known
        self._input_s = input_s
        self._words = [w for w in context if w]  # normalised completed words, context first
        self._context = len(self._words)
        timed = len(context_ends) == len(context)
        self._ends = [e for w, e in zip(context, context_ends, strict=False) if w] if timed else []  # seconds
        self._firsts: list[int] = []  # decoded index of the first token of each completed word
        self._open: int | None = None  # decoded index where the current (incomplete) word starts

    def on_token(self, decoded: list[int], token: int | None) -> Stop | None:
        """``token`` is about to be appended to ``decoded`` (None: the round ends). When it starts
        a word, the word before it is complete and checked; returns a stop, if any."""
        starts = token is None or not decoded or self.vocab.starts_word(token)
        if starts and self._open is not None and self._open < len(decoded):
            text = self.vocab.text_bytes(decoded[self._open :])
            if is_annotation(text):
                return Stop("nonspeech", self._open)
            word = normalize_word(text)
            if word and self._phrases:
                self._words.append(word)
                self._firsts.append(self._open)
                n = repeated_tail(self._words)
                if n == 1 and len(self._firsts) >= 2 and self._single_token_double(decoded):
                    n = 0  # one token said twice: the id rule (three copies, all dropped) decides
                at = len(self._words) - n - self._context
                first = self._firsts[at] if n and at >= 0 else 0  # the repeat's first decoded token
                if n and not self._heard_after(at, n, decoded) and not self._kept(decoded, first):
                    return Stop("repetition", first)
                own = self._words[self._context :]
                if (len(own) >= 2 * _RESTART and own[-_RESTART:] == own[:_RESTART]
                        and not self._heard_again(len(own), len(decoded))
                        and not self._kept(decoded, self._firsts[len(own) - _RESTART])):
                    return Stop("repetition", self._firsts[len(own) - _RESTART])
        if starts:
            self._open = len(decoded)
        return None

    def _kept(self, decoded: list[int], at: int) -> bool:
        """The repeat starting at decoded index ``at`` is the one the round was told to keep (its
        tokens before it are ``kept_after``); once."""
        if self._kept_after is None or tuple(decoded[:at]) != self._kept_after:
            return False
        self._kept_after = None
        return True

    def _heard_again(self, n_own: int, n_decoded: int) -> bool:
        """The round's first :data:`_RESTART` words, said again as its last ones, attend to later
        speech than the first time (a real repeat, module docstring)."""
        first = self._peaks[self._firsts[0] : self._firsts[_RESTART]]  # own words' tokens (the context has none)
        again = self._peaks[self._firsts[n_own - _RESTART] : n_decoded]
        if not first or not again:
            return False
        later = float(np.median(again)) * FRAME_S
        return later >= float(np.median(first)) * FRAME_S + _RESTART_LATER_S and later <= self._input_s - _RESTART_END_S

    def _heard_after(self, at: int, n: int, decoded: list[int]) -> bool:
        """The repeat (own words ``[at, at + n)``, the round's last) attends to later speech than its
        first time (words ``[at − n, at)``), every token later than its counterpart: a real
        repetition ("words, words"), not a loop, which attends back to the first time's audio, creeps
        on by a frame or two, or moves some of its tokens only. Where the first time begins in the
        context (committed words, the forced prefix), which has no attention, the repeat of those
        words must attend that much after the context's last word ends (its committed time); a
        context without times, or a repeat that begins in it, is a loop as before. Punctuation
        tokens, whose attention peaks anywhere (a "." at the input's end), are compared only where
        no other token is ("No, no": the first "No" is the round's first token)."""
        n_decoded = len(decoded)
        c = max(0, n - at)  # words of the first time in the context
        if at < 0 or len(self._peaks) < n_decoded or (c and len(self._ends) != self._context):
            return False
        peaks = self._align if len(self._align) >= n_decoded else self._peaks  # alignment heads where given
        end = self._input_s / FRAME_S  # peaks past the input (the silence it is heard with) say nothing
        lo, mid = self._firsts[at - n + c], self._firsts[at]  # the first time's own tokens
        again = self._firsts[at + c] if at + c < len(self._firsts) else n_decoded  # ... their repeat's first
        pairs = zip(peaks[lo:mid], peaks[again:n_decoded], strict=False)  # token by token
        punct = self.vocab.punctuation
        # (move in seconds, a punctuation token); the round's first token attends everywhere
        timed = [((b - a) * FRAME_S, bool(punct[decoded[lo + i]] or punct[decoded[again + i]]))
                 for i, (a, b) in enumerate(pairs) if lo + i > 0 and a < end and b < end]
        if c:  # the repeat of the context's words: after the context's last word ends
            timed += [(peaks[i] * FRAME_S - self._ends[-1], bool(punct[decoded[i]]))
                      for i in range(mid, again) if i > 0 and peaks[i] < end]
        moves = [m for m, p in timed if not p] or [m for m, _ in timed]
        later = peaks[mid:n_decoded]
        return (bool(moves) and min(moves) >= _REPEAT_AFTER_S
                and float(np.median(later)) * FRAME_S <= self._input_s - _RESTART_END_S)

    def _single_token_double(self, decoded: list[int]) -> bool:
        """The last two completed words are the same single token (left to the id rule)."""
        a, b = self._firsts[-2], self._firsts[-1]
        return b - a == 1 and len(decoded) == b + 1 and decoded[a] == decoded[b]


def _token_loop(tokens: list[int]) -> int:
    """Length p (2 … :data:`_BLOCK`) of a block of tokens that ends ``tokens`` three times in a row,
    else 0. Greedy Whisper can loop on syllables inside one word ("Chói-Chi-Chi-Chi-…" to the token
    limit), where no word repeats and no id repeats back to back; speech says a syllable block three
    times over almost never (a word said thrice is three words, which the word guards see)."""
    for p in range(2, _BLOCK + 1):
        if len(tokens) >= 3 * p and tokens[-p:] == tokens[-2 * p : -p] == tokens[-3 * p : -2 * p]:
            return p
    return 0


class RoundValidator:
    """The stop conditions of one round, fed token by token (see the module docstring).

    Args:
        vocab: token classes.
        input_s: the round's effective input length in seconds (the peak-margin reference).
        peak_margin_s: stop when f+ enters the last ``peak_margin_s`` of the input; 0 disables it
            (it is also disabled for the final round of a stream). The default is the paper's 0.6 s;
            the stream passes its own, ``StreamConfig.peak_margin_s`` (0.15 s, deviation 41).
        exclude_s: f+ is searched from this time on.
        median, average: filter widths.
        context: normalised words said just before this round's tokens (the committed words
            before its audio, then the forced prefix) for the repetition guard.
        context_ends: where each context word ends, seconds from the input's start (≤ 0 before
            it; its committed DTW time), so that a repeat of them can be judged by its attention;
            empty: unknown (a repeat of the context is a loop).
        closing: the input ends after the speech (an utterance end or the stream's end): decode
            it as offline Whisper does — EOT ends the round whenever it wins, and neither the
            backward-shift test nor the peak margin applies (the speech is complete, so the
            last words attend to the end of the input; the word guards still apply).
        phrases: False: no phrase-repetition guard (a closing decode heard again as offline Whisper
            decodes it, which has none; judged afterwards by Whisper's own signs instead).
        speech_end_s: where the speech detector hears the input's speech end, seconds from its start;
            None: unknown.
        backward_speech_s: a backward shift is not a stop while the speech goes on at least this
            long after the last passed test's f+ (``speech_end_s − f+``): the decoder has not run out
            of audio, and the shift is the attention's noise between two words; 0: the paper's test
            everywhere.
        kept_after: the decoded tokens before a repeat that the word guards stopped the last round at,
            on the same input and prefix (a live round): the same repeat after exactly these tokens
            is kept, once. The guard's evidence did not change with a step more of audio, and
            stopping again froze the captions; a loop's next copy is judged as before.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        *,
        input_s: float,
        peak_margin_s: float = 0.6,
        exclude_s: float = 0.3,
        median: int = 7,
        average: int = 10,
        context: tuple[bytes, ...] = (),
        context_ends: tuple[float, ...] = (),
        closing: bool = False,
        phrases: bool = True,
        speech_end_s: float | None = None,
        backward_speech_s: float = 0.0,
        kept_after: tuple[int, ...] | None = None,
    ):
        self.vocab = vocab
        self.input_s = float(input_s)
        self.peak_margin_s = float(peak_margin_s)
        self.exclude_s = exclude_s
        self.median = median
        self.average = average
        self.decoded: list[int] = []  # generated tokens so far (forced prefix excluded)
        self.checked = 0  # tokens whose attention has been validated
        self.last_peak_s = 0.0  # f+ of the last passed test, seconds
        self.stop: Stop | None = None
        self._prev_attn: np.ndarray | None = None
        self._first_delta = True
        self.peaks: list[int] = []  # per checked token: the frame its attention peaks at
        self.align_peaks: list[int] = []  # ... its alignment heads' attention (when the decoder gives them)
        self._words = WordGuard(vocab, context, self.peaks, self.input_s, self.align_peaks, context_ends, phrases,
                                kept_after)
        self.closing = closing
        self._speech_end_s = speech_end_s
        self._backward_speech_s = backward_speech_s

    def on_prediction(self, token: int, token_logit: float, eot_logit: float) -> Stop | None:
        """A new generated token was predicted; apply the EOT rule and the word guards. Returns
        the stop, if any."""
        if self.stop is not None:
            return self.stop
        ends = eot_logit > token_logit and (self.closing or self.vocab.is_garbage(token))
        self.stop = self._words.on_token(self.decoded, None if ends else int(token))
        if self.stop is None and ends:
            self.stop = Stop("eot", len(self.decoded))
        if self.stop is None:
            self.decoded.append(int(token))
        return self.stop

    def close(self) -> Stop | None:
        """The round ended without a stop (the plan ran out): check its last word."""
        if self.stop is None:
            self.stop = self._words.on_token(self.decoded[: self.checked], None)
        return self.stop

    def _speech_ahead(self) -> bool:
        """The speech goes on at least ``backward_speech_s`` after the last passed test's f+."""
        if self._backward_speech_s <= 0 or self._speech_end_s is None:
            return False
        return self._speech_end_s - self.last_peak_s >= self._backward_speech_s

    def on_alignment(self, attn_align: np.ndarray) -> None:
        """The alignment heads' attention (float32 [n_frames]) of the next unchecked decoded token,
        given just before :meth:`on_attention`: the repetition guard reads where it peaks."""
        if self.stop is None:
            self.align_peaks.append(int(np.argmax(attn_align)))

    def on_attention(self, attn_last: np.ndarray) -> Stop | None:
        """The final-layer attention (float32 [n_frames]) of the next unchecked decoded token."""
        if self.stop is not None:
            return self.stop
        i = self.checked
        self.checked += 1
        token = self.decoded[i]
        self.peaks.append(int(np.argmax(attn_last)))
        if i >= _REPEAT - 1 and len(set(self.decoded[i - _REPEAT + 1 : i + 1])) == 1:
            self.stop = Stop("repetition", i - (_REPEAT - 1), loop=True)
            return self.stop
        block = _token_loop(self.decoded[: i + 1])
        if block and not any(self.vocab.starts_word(t) for t in self.decoded[i + 1 - block : i + 1]):
            # a loop inside one word, which the word guards cannot see: the first copy stays (a
            # block that starts a word is words, "words, words, words": the word guards judge it)
            self.stop = Stop("repetition", i + 1 - 2 * block, loop=True)
            return self.stop
        if self.closing or not self.vocab.is_content(token):
            return None
        attn = np.asarray(attn_last, dtype=np.float32)
        if self._prev_attn is None or self._prev_attn.shape != attn.shape:
            self._prev_attn = attn
            return None
        signal = filtered_difference(attn, self._prev_attn, self.median, self.average)
        f_plus, f_minus = shift_peaks(signal, exclude_index(self.exclude_s, signal.shape[0]))
        if self._first_delta:  # the first difference of a round always passes (§7.4)
            f_minus, self._first_delta = 0, False
        if f_plus < f_minus:
            if not self._speech_ahead():
                self.stop = Stop("backward_shift", i, token)
                return self.stop
            self._prev_attn = attn  # speech still to come: the next token is compared with this one
            return None
        self.last_peak_s = f_plus * FRAME_S
        self._prev_attn = attn
        if self.peak_margin_s > 0 and f_plus * FRAME_S > self.input_s - self.peak_margin_s:
            self.stop = Stop("peak_margin", i + 1)
            return self.stop
        return None
