"""The card's rating math, as pure functions of plain numbers.

    fit_elo(outcomes)                     -> the rating R for [(item_elo, weight, correct), ...]
    fit_elo_many(item_elo, weights, correct) -> many ratings at once (numpy; one per row of weights)
    level_sums(which, n_levels, weights)  -> each row's total weight per item Elo (np.bincount)
    log_likelihood(R, outcomes)           -> the weighted log-likelihood plus the prior, at R
    elo_standard_error(R, outcomes)       -> 1 / sqrt(observed information) at R
    summarize(rows)                       -> Overall/category Elo and the accuracies, as a dict

The card gives point_weight = category_weight * difficulty_weight and
expected(R, e) = 1 / (1 + 10 ** ((e - R) / 400)), and says the rating is the weighted maximum-
likelihood Elo with "a four-game prior centered at Elo 1000". We read the prior as four games
scored 0.5 (two wins, two losses) against an opponent rated 1000, each of weight 1. The rating then
solves the score equation of that weighted log-likelihood:

    sum_i w_i * (y_i - expected(R, e_i)) + 4 * (0.5 - expected(R, 1000)) = 0

The left side falls strictly as R rises, so the root is unique; we find it by bisection.

The standard error comes from the curvature of that same objective at the fit. With
k = ln(10) / 400 and p_i = expected(R, e_i), the observed information is

    I(R) = k**2 * (sum_i w_i * p_i * (1 - p_i) + 4 * p0 * (1 - p0)),   p0 = expected(R, 1000)

and SE = 1 / sqrt(I). It treats the point weights as if they were game counts, so it is the
model-based spread of the fit; the bootstrap in stats.py gives the resampling view.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from ..items.card import ELO_SCALE, PRIOR_RATING, PRIOR_WEIGHT

ONEHOT_MAX_ELEMENTS = 1 << 22  # entries of fit_elo_many's one-hot (32 MiB); larger sets use level_sums


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
    return _bisect(lambda r: score_equation(r, outcomes) > 0, lo, hi)


def _bisect(positive, lo: float, hi: float) -> float:
    """Where the score equation crosses 0 between lo and hi, by bisection to 1e-9 Elo: `positive(r)`
    says whether it is above 0 at r (it falls as r grows)."""
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if positive(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9:
            break
    return (lo + hi) / 2.0


def fit_elo_grouped(outcomes: Iterable[tuple[float, float, float]]) -> float:
    """`fit_elo`, with the outcomes first summed per distinct item Elo (the card's items have 3 per
    category): the same equation and bisection, at a cost that does not grow with the items. Its sums
    are added in another order, so it may differ from fit_elo by float rounding (within 1e-9 Elo): the
    checked reading of a report uses it, which allows that much; a run's own numbers come from fit_elo."""
    weight: dict[float, float] = {}
    won: dict[float, float] = {}
    for e, w, y in outcomes:
        e, w = float(e), float(w)
        weight[e] = weight.get(e, 0.0) + w
        won[e] = won.get(e, 0.0) + w * float(y)
    levels = [(e, weight[e]) for e in weight]
    wins = sum(won.values())

    def positive(r: float) -> bool:
        total = PRIOR_WEIGHT * (0.5 - expected(r, PRIOR_RATING)) + wins
        for e, w in levels:
            total -= w * expected(r, e)
        return total > 0

    return _bisect(positive, -10000.0, 10000.0)


def level_sums(which: np.ndarray, n_levels: int, weights: np.ndarray) -> np.ndarray:
    """Each row's sum of weights per level: out[b, l] = sum of weights[b, i] over the items i with
    which[i] == l, added in item order (np.bincount), a block of rows at a time so that the index
    array stays within about ONEHOT_MAX_ELEMENTS entries. Shape (B, n_levels)."""
    which = np.asarray(which, dtype=np.intp)
    b_rows, n = weights.shape
    out = np.empty((b_rows, n_levels))
    step = max(1, ONEHOT_MAX_ELEMENTS // max(n, 1))
    for r0 in range(0, b_rows, step):
        block = weights[r0 : r0 + step]
        index = which[None, :] + n_levels * np.arange(block.shape[0])[:, None]
        sums = np.bincount(index.ravel(), weights=block.ravel(), minlength=block.shape[0] * n_levels)
        out[r0 : r0 + step] = sums.reshape(block.shape[0], n_levels)
    return out


def fit_elo_many(item_elo, weights, correct, lo: float = -10000.0, hi: float = 10000.0) -> np.ndarray:
    """`fit_elo` for many weightings of the same items at once, by vectorised bisection.

    `item_elo` and `correct` have shape (n,); `weights` has shape (B, n), one row per fit (a
    bootstrap resample is its item counts times the point weights). Returns the B ratings; row b
    equals fit_elo(zip(item_elo, weights[b], correct)) to within the bisection tolerance.

    Every row stops at the same step (with the default bracket, the 45th): the rows' brackets all
    start as [lo, hi] and halve together, and a rounding of a midpoint moves a width by about
    1e-12, far from the 1e-9 test (widths 1.14e-9 before the last step, 5.7e-10 after). So a
    block of rows gives the same ratings as the same rows among more rows, which lets a caller
    fit a bootstrap a block of resamples at a time.

    The total weight per item Elo is the weights times a one-hot (items x distinct Elos) matrix
    when that has at most ONEHOT_MAX_ELEMENTS entries (the card's 350 items have 21 Elos); a set
    with more items times Elos (20,000 items at 20,000 Elos would make a 3.2 GB one-hot) gets its
    sums from `level_sums`, in memory of the size of the weights.
    """
    e = np.asarray(item_elo, dtype=float)
    y = np.asarray(correct, dtype=float)
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    # The equation needs only each row's weighted wins and its total weight per distinct item Elo.
    levels, which = np.unique(e, return_inverse=True)
    wins = w @ y
    if e.size * levels.size <= ONEHOT_MAX_ELEMENTS:
        onehot = np.zeros((e.size, levels.size))
        onehot[np.arange(e.size), which] = 1.0
        per_level = w @ onehot
    else:
        per_level = level_sums(which, levels.size, w)
    lo_b = np.full(w.shape[0], float(lo))
    hi_b = np.full(w.shape[0], float(hi))
    for _ in range(200):
        mid = (lo_b + hi_b) / 2.0
        p = 1.0 / (1.0 + 10.0 ** ((levels[None, :] - mid[:, None]) / ELO_SCALE))
        p0 = 1.0 / (1.0 + 10.0 ** ((PRIOR_RATING - mid) / ELO_SCALE))
        f = PRIOR_WEIGHT * (0.5 - p0) + wins - (per_level * p).sum(axis=1)
        up = f > 0
        lo_b = np.where(up, mid, lo_b)
        hi_b = np.where(up, hi_b, mid)
        if np.all(hi_b - lo_b < 1e-9):
            break
    return (lo_b + hi_b) / 2.0


def _log_expected(rating: float, item_elo: float) -> tuple[float, float]:
    """(log p, log(1 - p)) for p = expected(rating, item_elo), without underflow."""
    x = (item_elo - rating) / ELO_SCALE * math.log(10.0)
    log_p = -(max(x, 0.0) + math.log1p(math.exp(-abs(x))))  # -log(1 + e^x)
    return log_p, log_p + x  # 1 - p = p * e^x


def log_likelihood(rating: float, outcomes: Sequence[tuple[float, float, float]]) -> float:
    """sum_i w_i * [y_i log p_i + (1 - y_i) log(1 - p_i)] plus the prior's four half-won games."""
    lp, lq = _log_expected(rating, PRIOR_RATING)
    total = PRIOR_WEIGHT * (0.5 * lp + 0.5 * lq)
    for item_elo, weight, y in outcomes:
        lp, lq = _log_expected(rating, item_elo)
        total += weight * (y * lp + (1.0 - y) * lq)
    return total


def observed_information(rating: float, outcomes: Sequence[tuple[float, float, float]]) -> float:
    """Minus the second derivative of `log_likelihood` at `rating` (it does not depend on y)."""
    k = math.log(10.0) / ELO_SCALE
    p0 = expected(rating, PRIOR_RATING)
    total = PRIOR_WEIGHT * p0 * (1.0 - p0)
    for item_elo, weight, _ in outcomes:
        p = expected(rating, item_elo)
        total += weight * p * (1.0 - p)
    return k * k * total


def elo_standard_error(rating: float, outcomes: Sequence[tuple[float, float, float]]) -> float:
    """Standard error of the fitted rating from the curvature of the objective: 1 / sqrt(I(R))."""
    return 1.0 / math.sqrt(observed_information(rating, outcomes))


def raw_accuracy(correct: Sequence[bool]) -> float:
    return sum(bool(c) for c in correct) / len(correct) if correct else math.nan


def weighted_accuracy(weights: Sequence[float], correct: Sequence[bool]) -> float:
    total = sum(weights)
    return sum(w for w, c in zip(weights, correct) if c) / total if total else math.nan


def summarize(rows: Sequence[tuple[str, str, float, float, bool]], fit=fit_elo) -> dict:
    """Ratings and accuracies for scored items.

    `rows` holds (category, difficulty, item_elo, point_weight, correct) per item. Returns
    overall Elo, per-category Elo (same prior), raw and weighted accuracy, and accuracy by
    difficulty, each with the count it was computed on. `fit` fits each Elo (fit_elo_grouped: the
    checked reading's quicker fit).
    """

    def block(sub):
        return {
            "elo": fit((e, w, 1.0 if c else 0.0) for _, _, e, w, c in sub),
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
