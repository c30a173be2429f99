"""The bench's rule for the default tail chunk K: the fastest, if it saves more than the 5 % margin
over the paper's K = 5 by a paired one-sided t-test; otherwise a tie, and the paper's 5."""

from __future__ import annotations

import pytest

from captioner.bench.strategies import choose_tail


def _means(per_rep: dict[str, list[float]]) -> dict[str, float]:
    return {k: sorted(v)[len(v) // 2] for k, v in per_rep.items()}


def _scaled(base: list[float], factor: float) -> list[float]:
    return [x * factor for x in base]


# the whole machine drifts by 20 % between repetitions; each K keeps its place inside a repetition
DRIFT = [100.0, 118.0, 97.0, 110.0, 104.0, 120.0, 99.0]


def test_a_steady_gain_beyond_the_margin_is_chosen() -> None:
    per_rep = {"3": _scaled(DRIFT, 0.90), "5": DRIFT, "7": _scaled(DRIFT, 1.04)}
    per_rep["3"][2] *= 1.01  # not perfectly steady
    fastest, chosen, paired = choose_tail(_means(per_rep), per_rep)
    assert (fastest, chosen) == (3, 3)
    assert paired["3"]["wins"] == 7 and paired["3"]["gain"] == pytest.approx(0.099, abs=0.002)
    assert 0.05 < paired["3"]["lower"] < paired["3"]["gain"] and paired["3"]["t"] > 10
    assert paired["5"] == {"wins": 0, "gain": 0.0, "t": 0.0, "lower": 0.0}
    assert paired["7"]["wins"] == 0 and paired["7"]["gain"] < 0


def test_a_significant_gain_inside_the_margin_is_a_tie() -> None:
    # what this CPU measures for K = 3: ~4 % in every repetition (t ≈ 7), not worth leaving the NPU's K
    per_rep = {"3": [x * f for x, f in zip(DRIFT, [0.96, 0.965, 0.955, 0.962, 0.958, 0.97, 0.96], strict=True)],
               "5": DRIFT}
    fastest, chosen, paired = choose_tail(_means(per_rep), per_rep)
    assert (fastest, chosen) == (3, 5)
    assert paired["3"]["wins"] == 7 and paired["3"]["t"] > 10 and paired["3"]["lower"] < 0.05


def test_a_noisy_gain_is_a_tie() -> None:
    # a mean gain above the margin whose spread leaves its lower bound below it
    per_rep = {"3": [x * f for x, f in zip(DRIFT, [0.80, 1.02, 0.85, 1.01, 0.88, 0.99, 0.90], strict=True)],
               "5": DRIFT}
    fastest, chosen, paired = choose_tail(_means(per_rep), per_rep)
    assert fastest == 3 and chosen == 5
    assert paired["3"]["gain"] > 0.05 > paired["3"]["lower"] and 0 < paired["3"]["wins"] < 7


def test_too_few_repetitions_keep_the_paper_and_the_paper_wins_ties() -> None:
    per_rep = {"3": [80.0, 81.0, 80.0, 82.0], "5": [100.0, 101.0, 100.0, 102.0]}
    assert choose_tail(_means(per_rep), per_rep)[:2] == (3, 5)  # 4 repetitions: not enough to decide
    per_rep = {"3": [101.0] * 7, "5": [100.0, 99.0, 100.0, 98.0, 100.0, 99.0, 100.0]}
    assert choose_tail(_means(per_rep), per_rep)[:2] == (5, 5)
