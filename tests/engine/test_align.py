"""DTW word timing of NPUSPER.md §10 (:mod:`captioner.engine.align`)."""

from __future__ import annotations

import numpy as np
import pytest
from oracle import bump, make_vocab
from test_validate import naive_median

from captioner.engine.align import align_words, dtw_path, split_words

V = make_vocab()
A, B, C = V.word[:3]
COMMA, ING = V.punct[1], V.subword[0]


def naive_dtw(cost: np.ndarray) -> list[tuple[int, int]]:
    """The reference's loops: cumulative first row/column, min of three, its back-trace order."""
    n, m = cost.shape
    acc = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            if i == 0 and j == 0:
                acc[i, j] = cost[i, j]
            elif i == 0:
                acc[i, j] = acc[i, j - 1] + cost[i, j]
            elif j == 0:
                acc[i, j] = acc[i - 1, j] + cost[i, j]
            else:
                acc[i, j] = cost[i, j] + min(acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1])
    i, j, path = n - 1, m - 1, [(n - 1, m - 1)]
    while i > 0 or j > 0:
        if i == 0:
            j -= 1
        elif j == 0:
            i -= 1
        elif acc[i - 1, j - 1] <= acc[i - 1, j] and acc[i - 1, j - 1] <= acc[i, j - 1]:
            i, j = i - 1, j - 1
        elif acc[i - 1, j] <= acc[i, j - 1]:
            i -= 1
        else:
            j -= 1
        path.append((i, j))
    return path[::-1]


def path_of(cost) -> list[tuple[int, int]]:
    rows, cols = dtw_path(np.asarray(cost, dtype=float))
    return list(zip(rows.tolist(), cols.tolist(), strict=True))


def test_tie_prefers_the_diagonal():
    # all costs equal: D is all zeros, every comparison ties -> diagonal, then left along row 0
    assert path_of(np.zeros((2, 3))) == [(0, 0), (0, 1), (1, 2)]


def test_up_before_left_when_they_tie():
    # D = [[0,1,2],[1,5,2],[2,2,2]]: at (2,2) diag 5 > up 2 == left 2 -> up; at (1,2) diag 1 wins
    assert path_of([[0, 1, 1], [1, 5, 1], [1, 1, 0]]) == [(0, 0), (0, 1), (1, 2), (2, 2)]


def test_left_when_it_is_strictly_smaller():
    # D = [[0,1,2],[1,5,3],[2,2,2]]: at (2,2) left 2 < up 3 < diag 5 -> left; at (2,1) diag 1 -> (1,0); up
    assert path_of([[0, 1, 1], [1, 5, 2], [1, 1, 0]]) == [(0, 0), (1, 0), (2, 1), (2, 2)]


@pytest.mark.parametrize("shape", [(1, 1), (1, 6), (5, 1), (3, 4), (8, 40), (31, 150), (40, 300)])
def test_dtw_matches_the_reference_loops(shape):
    rng = np.random.default_rng(shape[0] * 100 + shape[1])
    for cost in (rng.standard_normal(shape), rng.integers(0, 3, shape).astype(float)):  # ties included
        assert path_of(cost) == naive_dtw(cost)


def naive_align(tokens, attn, lead=False):
    """§10 step by step with loops: dummy row, z-score per frame, median 7 per row, DTW, jumps
    (``lead``: a uniform row before the tokens too)."""
    m = attn.shape[1]
    uniform = np.full((1, m), 1.0 / m)
    mat = np.vstack([uniform, attn, uniform] if lead else [attn, uniform]).astype(float)
    for j in range(m):
        col = mat[:, j]
        mean = col.mean()
        mat[:, j] = (col - mean) / np.sqrt((col**2).mean() - mean**2 + 1e-8)
    mat = np.stack([naive_median(r, 7) for r in mat])
    jumps = {}
    for i, j in naive_dtw(-mat):
        jumps.setdefault(i - lead, j)
    return [(f, k, jumps[f], jumps[f + k]) for f, k in split_words(tokens, V.vocab)]


def naive_words(tokens, attn):
    """:func:`naive_align`, done again with the leading row where every word collapsed onto the
    first token's frame (the trailing row entered there)."""
    words = naive_align(tokens, attn)
    return naive_align(tokens, attn, lead=True) if words[-1][3] == words[0][2] else words


def test_word_split_by_leading_space():
    assert split_words([A, ING, COMMA, B, C, COMMA], V.vocab) == [(0, 3), (3, 1), (4, 2)]
    assert split_words([ING, A], V.vocab) == [(0, 1), (1, 1)]  # the first token always opens a word
    assert split_words([], V.vocab) == []


def test_words_follow_the_attention_peaks():
    tokens = [A, ING, B, COMMA, C]
    centers = [20, 28, 50, 60, 80]
    attn = np.stack([bump(c, 100) for c in centers])
    al = align_words(tokens, attn, V.vocab)
    got = [(w.first, w.count, w.start_frame, w.end_frame) for w in al.words]
    assert got == naive_words(tokens, attn) == naive_align(tokens, attn)  # nothing collapsed: the reference's
    assert al.valid and len(al.jumps) == len(tokens) + 1 and not al.collapsed
    assert [w.first for w in al.words] == [0, 2, 4]
    (a, b, c) = al.words
    assert a.start_frame == 0 and a.end_frame == b.start_frame and b.end_frame == c.start_frame
    assert 28 < b.start_frame <= 50 and 60 < c.start_frame <= 80 < c.end_frame <= 100


def test_random_attention_matches_the_reference_steps():
    rng = np.random.default_rng(7)
    for n_tok, m in [(1, 30), (3, 75), (12, 300)]:
        tokens = [V.word[int(i)] if rng.random() < 0.7 else ING for i in rng.integers(0, 50, n_tok)]
        attn = rng.dirichlet(np.ones(m) * 0.3, size=n_tok).astype(np.float32)
        got = [(w.first, w.count, w.start_frame, w.end_frame) for w in align_words(tokens, attn, V.vocab).words]
        assert got == naive_words(tokens, attn)


def test_an_input_that_opens_with_silence_keeps_each_word_at_its_attention() -> None:
    """450 frames (9 s) of silence, then three words: where no token's attention beats 1/M the
    trailing uniform row wins every frame, and the reference's cheapest path ran every token down
    frame 0 and gave all 600 frames to that row: each word at the input's start, with no length (a
    session's first sentence after 12 s of silence, in the whole-stream decode: real tiny.en in
    tests/engine/test_real_speech_policy.py). Redone with a uniform row before the tokens, each word
    is at its attention again."""
    m, centers = 600, (470, 510, 560)
    attn = np.stack([0.5 * bump(c, m, width=12.0, floor=0.0) + 0.3 / m for c in centers])
    attn /= attn.sum(axis=1, keepdims=True)
    tokens = [A, B, C]
    assert [w[2:] for w in naive_align(tokens, attn)] == [(0, 0)] * 3  # the reference collapses
    al = align_words(tokens, attn, V.vocab)
    got = [(w.first, w.count, w.start_frame, w.end_frame) for w in al.words]
    assert got == naive_words(tokens, attn) == naive_align(tokens, attn, lead=True)
    assert al.valid and len(al.jumps) == len(tokens) + 1
    assert al.collapsed  # the reference's path did: a live round takes it as unreliable (stream.py §11.2)
    for (_, _, start, end), center in zip(got, centers, strict=True):
        assert start < end and 400 < start <= center <= end + 15, got  # around its peak, with a length


def test_shape_mismatch_is_invalid():
    al = align_words([A, B], np.ones((3, 50), np.float32), V.vocab)
    assert not al.valid and [(w.first, w.count) for w in al.words] == [(0, 1), (1, 1)]
