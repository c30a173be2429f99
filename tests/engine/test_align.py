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


def naive_align(tokens, attn):
    """§10 step by step with loops: dummy row, z-score per frame, median 7 per row, DTW, jumps."""
    m = attn.shape[1]
    mat = np.vstack([attn, np.full((1, m), 1.0 / m)]).astype(float)
    for j in range(m):
        col = mat[:, j]
        mean = col.mean()
        mat[:, j] = (col - mean) / np.sqrt((col**2).mean() - mean**2 + 1e-8)
    mat = np.stack([naive_median(r, 7) for r in mat])
    jumps = {}
    for i, j in naive_dtw(-mat):
        jumps.setdefault(i, j)
    return [(f, k, jumps[f], jumps[f + k]) for f, k in split_words(tokens, V.vocab)]


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
    assert got == naive_align(tokens, attn)
    assert al.valid and len(al.jumps) == len(tokens) + 1
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
        assert got == naive_align(tokens, attn)


def test_shape_mismatch_is_invalid():
    al = align_words([A, B], np.ones((3, 50), np.float32), V.vocab)
    assert not al.valid and [(w.first, w.count) for w in al.words] == [(0, 1), (1, 1)]
