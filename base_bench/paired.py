"""Paired statistics for two runs scored on the same items, as pure functions of arrays.

    mcnemar_exact(b, c)                                -> two-sided exact p for the discordant counts
    counts = stratified_counts(categories, 2000, seed) -> (resamples, n) how often each item is drawn
    fit_elo_batch(item_elo, counts * weight, correct)  -> one fitted rating per resample
    paired_difference(item_elo, weight, y_a, y_b, counts) -> {"elo_a", "elo_b", "diff", "ci95", ...}

The bootstrap draws items with replacement within each category (the card fixes 50 per category),
and both runs get the SAME draws, so the spread of the difference reflects which items were drawn,
not two independent samples. A drawn item counts `k` times, so its weight is `k * point_weight`.

`fit_elo_batch` solves the same score equation as `elo.score_equation`,

    sum_i w_i * (y_i - expected(R, e_i)) + 4 * (0.5 - expected(R, 1000)) = 0,

for every resample at once by bisection on a numpy vector. Items are first summed per distinct
item Elo (the card has ten), so each step costs (resamples x 10) operations.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .card import ELO_SCALE, PRIOR_RATING, PRIOR_WEIGHT


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar p: b = A right/B wrong, c = A wrong/B right.

    Under the null each discordant item is a fair coin, so p = min(1, 2 * P(X <= min(b, c)))
    with X ~ Binomial(b + c, 1/2); p = 1 when there are no discordant items.
    """
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be non-negative")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    return min(1.0, 2 * tail / 2**n)  # exact integers until the one division


def stratified_counts(strata: Sequence[str], resamples: int, seed: int) -> np.ndarray:
    """(resamples, n) integer array: how often each item is drawn when every stratum (category)
    is resampled with replacement to its own size. Same seed, same strata -> same counts."""
    rng = np.random.default_rng(seed)
    strata = list(strata)
    counts = np.zeros((resamples, len(strata)), dtype=np.int64)
    rows = np.arange(resamples)[:, None]
    for s in dict.fromkeys(strata):  # first-seen order, so the draws do not depend on set ordering
        members = np.array([i for i, x in enumerate(strata) if x == s])
        m = len(members)
        local = rng.integers(0, m, size=(resamples, m))
        per_row = np.bincount((rows * m + local).ravel(), minlength=resamples * m).reshape(resamples, m)
        counts[:, members] = per_row
    return counts


def fit_elo_batch(item_elo, weights, correct, lo: float = -10000.0, hi: float = 10000.0,
                  iterations: int = 64) -> np.ndarray:
    """Ratings solving the card's score equation, one per row.

    `item_elo` has shape (n,); `weights` and `correct` have shape (n,) or (rows, n). Returns an
    array of shape (rows,) (or (1,) when both are 1-D). Agrees with `elo.fit_elo` to ~1e-9.
    """
    e = np.asarray(item_elo, dtype=float)
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    y = np.atleast_2d(np.asarray(correct, dtype=float))
    w, y = np.broadcast_arrays(w, y)
    levels, group = np.unique(e, return_inverse=True)
    onehot = np.zeros((len(e), len(levels)))
    onehot[np.arange(len(e)), group] = 1.0
    total = w @ onehot            # (rows, G) weight per item-Elo level
    won = (w * y) @ onehot        # (rows, G) weight of correct answers per level
    lo_r = np.full(w.shape[0], lo)
    hi_r = np.full(w.shape[0], hi)
    for _ in range(iterations):
        mid = (lo_r + hi_r) / 2.0
        exp_items = 1.0 / (1.0 + 10.0 ** ((levels[None, :] - mid[:, None]) / ELO_SCALE))
        exp_prior = 1.0 / (1.0 + 10.0 ** ((PRIOR_RATING - mid) / ELO_SCALE))
        f = (won - total * exp_items).sum(axis=1) + PRIOR_WEIGHT * (0.5 - exp_prior)
        up = f > 0
        lo_r = np.where(up, mid, lo_r)
        hi_r = np.where(up, hi_r, mid)
    return (lo_r + hi_r) / 2.0


def percentile_interval(values, confidence: float = 0.95) -> list[float]:
    """The central `confidence` percentile interval of bootstrap values."""
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(np.asarray(values, dtype=float), [tail, 1.0 - tail])
    return [float(lo), float(hi)]


def paired_difference(item_elo, weight, y_a, y_b, counts: np.ndarray, confidence: float = 0.95) -> dict:
    """Elo of A and B on these items, B - A, and the paired bootstrap interval of B - A.

    `counts` comes from `stratified_counts` over the same items (or a column subset of it).
    """
    e = np.asarray(item_elo, dtype=float)
    w = np.asarray(weight, dtype=float)
    ya = np.asarray(y_a, dtype=float)
    yb = np.asarray(y_b, dtype=float)
    elo_a = float(fit_elo_batch(e, w, ya)[0])
    elo_b = float(fit_elo_batch(e, w, yb)[0])
    cw = counts * w[None, :]
    boot_a = fit_elo_batch(e, cw, ya)
    boot_b = fit_elo_batch(e, cw, yb)
    diffs = boot_b - boot_a
    return {
        "elo_a": elo_a,
        "elo_b": elo_b,
        "diff": elo_b - elo_a,
        "ci95": percentile_interval(diffs, confidence),
        "elo_a_ci95": percentile_interval(boot_a, confidence),
        "elo_b_ci95": percentile_interval(boot_b, confidence),
        "share_resamples_b_higher": float(np.mean(diffs > 0)),
    }
