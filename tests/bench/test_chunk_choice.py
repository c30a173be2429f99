"""The bench's rule for the default tail chunk K: the fastest, if its gain over the paper's K = 5 is
significant when paired by repetition; otherwise a tie, and the paper's 5."""

from __future__ import annotations

import pytest

from captioner.bench.strategies import choose_tail


def _means(per_rep: dict[str, list[float]]) -> dict[str, float]:
    return {k: sorted(v)[len(v) // 2] for k, v in per_rep.items()}


def test_a_steady_gain_in_every_repetition_is_chosen() -> None:
    # the whole machine drifts by 20 % between repetitions; K = 3 stays 3-5 % faster than K = 5
    per_rep = {"3": [100.0, 118.0, 97.0, 110.0, 104.0, 120.0, 99.0],
               "5": [104.0, 123.0, 101.0, 114.0, 109.0, 124.0, 104.0],
               "7": [108.0, 125.0, 104.0, 120.0, 112.0, 130.0, 106.0]}
    fastest, chosen, paired = choose_tail(_means(per_rep), per_rep)
    assert (fastest, chosen) == (3, 3)
    assert paired["3"]["wins"] == 7 and paired["3"]["gain"] == pytest.approx(0.039, abs=0.005)
    assert paired["3"]["t"] > 10 and paired["5"] == {"wins": 0, "gain": 0.0, "t": 0.0}
    assert paired["7"]["wins"] == 0 and paired["7"]["gain"] < 0


def test_a_gap_that_comes_and_goes_is_a_tie() -> None:
    per_rep = {"3": [100.0, 110.0, 96.0, 104.0, 99.0, 112.0, 101.0],
               "5": [104.0, 105.0, 101.0, 100.0, 103.0, 107.0, 100.0]}
    fastest, chosen, paired = choose_tail(_means(per_rep), per_rep)
    assert fastest == 3 and chosen == 5
    assert 0 < paired["3"]["wins"] < 7 and paired["3"]["t"] < 1.943


def test_too_few_repetitions_keep_the_paper_and_the_paper_wins_ties() -> None:
    per_rep = {"3": [90.0, 91.0, 90.0, 92.0], "5": [100.0, 101.0, 100.0, 102.0]}
    assert choose_tail(_means(per_rep), per_rep)[:2] == (3, 5)  # 4 repetitions: not enough to decide
    per_rep = {"3": [101.0] * 7, "5": [100.0, 99.0, 100.0, 98.0, 100.0, 99.0, 100.0]}
    assert choose_tail(_means(per_rep), per_rep)[:2] == (5, 5)
