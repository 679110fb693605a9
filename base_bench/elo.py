"""The card's rating math, as pure functions of plain numbers.

    fit_elo(outcomes)            -> the rating R for [(item_elo, weight, correct), ...]
    summarize(items, results)    -> Overall/category Elo and the accuracies, as a dict

The card gives point_weight = category_weight * difficulty_weight and
expected(R, e) = 1 / (1 + 10 ** ((e - R) / 400)), and says the rating is the weighted maximum-
likelihood Elo with "a four-game prior centered at Elo 1000". We read the prior as four games
scored 0.5 (two wins, two losses) against an opponent rated 1000, each of weight 1. The rating then
solves the score equation of that weighted log-likelihood:

    sum_i w_i * (y_i - expected(R, e_i)) + 4 * (0.5 - expected(R, 1000)) = 0

The left side falls strictly as R rises, so the root is unique; we find it by bisection.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from .card import ELO_SCALE, PRIOR_RATING, PRIOR_WEIGHT


def expected(rating: float, item_elo: float) -> float:
    """Probability that a model rated `rating` gets an item rated `item_elo` right."""
    return 1.0 / (1.0 + 10.0 ** ((item_elo - rating) / ELO_SCALE))


def score_equation(rating: float, outcomes: Sequence[tuple[float, float, float]]) -> float:
    """Left side of the weighted ML equation with the prior; zero at the fitted rating."""
    total = PRIOR_WEIGHT * (0.5 - expected(rating, PRIOR_RATING))
    for item_elo, weight, y in outcomes:
        total += weight * (y - expected(rating, item_elo))
    return total


def fit_elo(outcomes: Iterable[tuple[float, float, float]], lo: float = -10000.0, hi: float = 10000.0) -> float:
    """Solve the score equation for R. `outcomes` holds (item_elo, point_weight, 1 or 0).

    With no outcomes, the prior alone gives 1000.
    """
    outcomes = [(float(e), float(w), float(y)) for e, w, y in outcomes]
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if score_equation(mid, outcomes) > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9:
            break
    return (lo + hi) / 2.0


def raw_accuracy(correct: Sequence[bool]) -> float:
    return sum(bool(c) for c in correct) / len(correct) if correct else math.nan


def weighted_accuracy(weights: Sequence[float], correct: Sequence[bool]) -> float:
    total = sum(weights)
    return sum(w for w, c in zip(weights, correct) if c) / total if total else math.nan


def summarize(rows: Sequence[tuple[str, str, float, float, bool]]) -> dict:
    """Ratings and accuracies for scored items.

    `rows` holds (category, difficulty, item_elo, point_weight, correct) per item. Returns
    overall Elo, per-category Elo (same prior), raw and weighted accuracy, and accuracy by
    difficulty, each with the count it was computed on.
    """

    def block(sub):
        return {
            "elo": fit_elo((e, w, 1.0 if c else 0.0) for _, _, e, w, c in sub),
            "n": len(sub),
            "n_correct": sum(1 for r in sub if r[4]),
            "raw_accuracy": raw_accuracy([r[4] for r in sub]),
            "weighted_accuracy": weighted_accuracy([r[3] for r in sub], [r[4] for r in sub]),
        }

    out = {"overall": block(rows), "categories": {}, "difficulties": {}}
    for cat in dict.fromkeys(r[0] for r in rows):
        out["categories"][cat] = block([r for r in rows if r[0] == cat])
    for diff in ("easy", "medium", "hard"):
        sub = [r for r in rows if r[1] == diff]
        if sub:
            out["difficulties"][diff] = {
                "n": len(sub),
                "n_correct": sum(1 for r in sub if r[4]),
                "raw_accuracy": raw_accuracy([r[4] for r in sub]),
            }
    return out
