"""Paired statistics for two runs scored on the same items, as pure functions of arrays.

    mcnemar_exact(b, c)                                    -> two-sided exact p for the discordant counts
    counts = stats.resample_counts(categories, 2000, seed) -> (resamples, n) how often each item is drawn
    paired_difference(item_elo, weight, y_a, y_b, counts)  -> {"elo_a", "elo_b", "diff", "ci95", ...}

The bootstrap draws items with replacement within each category (the card fixes 50 per category),
with the same `stats.resample_counts` as the report's intervals, and both runs get the SAME draws,
so the spread of the difference reflects which items were drawn, not two independent samples. A
drawn item counts `k` times, so its weight is `k * point_weight`; every resample is refitted with
`elo.fit_elo_many`.
"""

from __future__ import annotations

import math

import numpy as np

from .elo import fit_elo, fit_elo_many
from .stats import CONFIDENCE, percentile_interval


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


def paired_difference(item_elo, weight, y_a, y_b, counts: np.ndarray, confidence: float = CONFIDENCE) -> dict:
    """Elo of A and B on these items, B - A, and the paired bootstrap interval of B - A.

    `counts` comes from `stats.resample_counts` over the same items (or a column subset of it).
    The point ratings come from `elo.fit_elo`, as in each run's report.
    """
    e = np.asarray(item_elo, dtype=float)
    w = np.asarray(weight, dtype=float)
    ya = np.asarray(y_a, dtype=float)
    yb = np.asarray(y_b, dtype=float)
    elo_a = fit_elo(zip(e, w, ya))
    elo_b = fit_elo(zip(e, w, yb))
    cw = counts * w[None, :]
    boot_a = fit_elo_many(e, cw, ya)
    boot_b = fit_elo_many(e, cw, yb)
    diffs = boot_b - boot_a
    return {
        "elo_a": elo_a,
        "elo_b": elo_b,
        "diff": elo_b - elo_a,
        "ci95": list(percentile_interval(diffs, confidence)),
        "elo_a_ci95": list(percentile_interval(boot_a, confidence)),
        "elo_b_ci95": list(percentile_interval(boot_b, confidence)),
        "share_resamples_b_higher": float(np.mean(diffs > 0)),
    }
