"""DTW word timing of one round's tokens (NPUSPER.md §10), on the alignment-head attention.

Steps, as in the reference: one row per token plus a dummy row of uniform value 1/M appended (it
absorbs the trailing frames so the last word gets an end time); z-score per frame across the rows
(population variance, ``sqrt(var + 1e-8)``); running median of width 7 along time per row (mirror
edges); cost = −matrix; DTW with the reference's back-trace tie-breaking (diagonal if its
accumulated cost is ≤ both others, else up if ≤ left, else left); ``jump[r]`` = first frame on the
path in row r; a word = a token starting with a space plus its continuation tokens, timed
``[jump[first token], jump[first token of the next word or the dummy row]]``.

Deliberate differences from the reference:

- M is the number of **real** frames (the attention is cropped to the audio, as the paper's NPU
  design does), not the padded encoder length, so padding frames cannot pull the last word's end
  past the audio.
- A collapsed alignment is done again with a second uniform row **before** the tokens. The
  trailing row wins the z-score of every frame where no token's attention exceeds 1/M (silence, a
  forced prefix's audio), and the path reaches it only after the last token; so where the input
  opens with enough such frames (a session's first sentence after 12 s of silence, decoded in the
  30 s window from the stream's first sample: whisper-base and tiny.en both) the cheapest path
  runs every token down the first frame and gives all the rest to the trailing row, and every word
  came out at the input's start with no length (a subtitle cue of one instant, a collapsed JSON).
  The leading row takes those frames instead, and each word goes back to its attention. Only a
  collapsed alignment (the trailing row entered on the first token's frame) is redone, so every
  other round's times are the reference's; :attr:`Alignment.collapsed` still says it collapsed (a
  live round whose words the attention did not find is unreliable all the same).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from captioner.engine.tokens import Vocabulary
from captioner.engine.validate import median_filter

__all__ = ["Alignment", "WordSpan", "align_words", "dtw_path", "split_words"]

logger = logging.getLogger(__name__)

_EPS = 1e-8  # variance epsilon of the z-score


@dataclass(frozen=True, slots=True)
class WordSpan:
    """One word of a round: tokens ``[first, first+count)`` of the candidates.

    Attributes:
        first: index of the word's first token in the round's candidate list.
        count: number of tokens (the word-initial token and its continuations/punctuation).
        start_frame, end_frame: DTW times in encoder frames (20 ms) from the start of the round's
            input; ``-1`` when the round has no valid alignment.
    """

    first: int
    count: int
    start_frame: int = -1
    end_frame: int = -1


@dataclass(frozen=True, slots=True)
class Alignment:
    """DTW result: the words and the per-row jump frames (tokens + dummy); ``collapsed``: the
    reference's path put every word on the first frame (the times are then the leading row's
    re-alignment, module doc), which says the attention did not find the words (a live round's
    reliability test, NPUSPER.md §11.2)."""

    words: tuple[WordSpan, ...]
    jumps: tuple[int, ...]
    collapsed: bool = False

    @property
    def valid(self) -> bool:
        """The reference's validity test: the last word has an end time ≥ 0."""
        return bool(self.words) and self.words[-1].end_frame >= 0


def split_words(tokens: Sequence[int], vocab: Vocabulary) -> list[tuple[int, int]]:
    """(first, count) per word: a token starting with a space opens a word, the first token always
    does, everything else (continuations, punctuation) extends the current word."""
    words: list[tuple[int, int]] = []
    for i, token in enumerate(tokens):
        if i == 0 or vocab.starts_word(token):
            words.append((i, 1))
        else:
            first, count = words[-1]
            words[-1] = (first, count + 1)
    return words


def dtw_path(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost monotone path through ``cost`` (float [N, M]) from (0, 0) to (N−1, M−1).

    Accumulated cost: first row and column are cumulative sums, interior
    ``D[i,j] = c[i,j] + min(D[i−1,j−1], D[i−1,j], D[i,j−1])``. Each row is computed with numpy as a
    min-plus prefix scan: with ``a[j] = c[i,j] + min(D[i−1,j−1], D[i−1,j])`` and ``S`` the running sum
    of ``c[i]``, ``D[i,j] = S[j] + min_{k≤j}(a[k] − S[k])``.

    Returns:
        (rows, cols): int arrays of the path from (0, 0) to the end.
    """
    c = np.asarray(cost, dtype=np.float64)
    n, m = c.shape
    acc = np.empty((n, m))
    acc[0] = np.cumsum(c[0])
    for i in range(1, n):
        a = np.empty(m)
        a[0] = c[i, 0] + acc[i - 1, 0]
        a[1:] = c[i, 1:] + np.minimum(acc[i - 1, :-1], acc[i - 1, 1:])
        s = np.cumsum(c[i])
        acc[i] = s + np.minimum.accumulate(a - s)
    # back-trace with the reference's tie-breaking (differs from OpenAI timing.py)
    i, j = n - 1, m - 1
    rows, cols = [i], [j]
    while i > 0 or j > 0:
        if i == 0:
            j -= 1
        elif j == 0:
            i -= 1
        else:
            diag, up, left = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
            if diag <= up and diag <= left:
                i, j = i - 1, j - 1
            elif up <= left:
                i -= 1
            else:
                j -= 1
        rows.append(i)
        cols.append(j)
    return np.array(rows[::-1]), np.array(cols[::-1])


def align_words(tokens: Sequence[int], attn_align: np.ndarray, vocab: Vocabulary, median: int = 7, *,
                redo_collapsed: bool = True) -> Alignment:
    """Word times of a round's candidate tokens.

    Args:
        tokens: the candidate token ids (no prompt, no prefix), length T ≥ 1.
        attn_align: float [T, M], per token the alignment-head mean attention over the M real frames.
        vocab: for the word split.
        median: median width along time.
        redo_collapsed: a collapsed alignment is done again with the leading row (module doc); False:
            the reference's times as they are (the accuracy bench's offline Whisper).

    Returns:
        The words with their frame times; ``valid`` is False when the shapes do not fit.
    """
    spans = split_words(tokens, vocab)
    attn = np.asarray(attn_align, dtype=np.float64)
    if not spans or attn.ndim != 2 or attn.shape[0] != len(tokens) or attn.shape[1] == 0:
        return Alignment(tuple(WordSpan(f, k) for f, k in spans), ())
    jumps = _jumps(attn, median, lead=False)
    collapsed = bool(jumps[-1] == jumps[0])  # every word on one frame, with no length (module doc)
    if collapsed and redo_collapsed:
        jumps = _jumps(attn, median, lead=True)
    words = tuple(WordSpan(f, k, int(jumps[f]), int(jumps[f + k])) for f, k in spans)
    return Alignment(words, tuple(int(x) for x in jumps), collapsed)


def _jumps(attn: np.ndarray, median: int, *, lead: bool) -> np.ndarray:
    """The first frame of each row (the T tokens, then the trailing uniform row) on the DTW path:
    int [T + 1]; ``lead``: with a uniform row before the tokens too (its frame left out)."""
    m = attn.shape[1]
    uniform = np.full((1, m), 1.0 / m)
    matrix = np.vstack([uniform, attn, uniform] if lead else [attn, uniform])
    mean = matrix.mean(axis=0)
    std = np.sqrt((matrix * matrix).mean(axis=0) - mean * mean + _EPS)
    matrix = median_filter((matrix - mean) / std, median)
    rows, cols = dtw_path(-matrix)
    jumps = np.full(matrix.shape[0], -1)
    # the path is monotone, so the first visit of a row is its first occurrence in path order
    first = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    jumps[rows[first]] = cols[first]
    return jumps[1:] if lead else jumps
