"""Paired statistics for two runs scored on the same items, as pure functions of arrays.

    mcnemar_exact(b, c)                                    -> two-sided exact p for the discordant counts
    counts = stats.resample_counts(categories, 2000, seed) -> (resamples, n) how often each item is drawn
    paired_difference(item_elo, weight, y_a, y_b, counts)  -> {"elo_a", "elo_b", "diff", "ci95", ...}
    paired_differences(item_elo, weight, y_a, y_b, columns, stats.resample_count_blocks(...))
        -> [paired_difference(...) of each column subset], the draws a block of resamples at a time

The bootstrap draws items with replacement within each category (the card fixes 50 per category),
with the same `stats.resample_counts` as the report's intervals, and both runs get the SAME draws,
so the spread of the difference reflects which items were drawn, not two independent samples. A
drawn item counts `k` times, so its weight is `k * point_weight`; every resample is refitted with
`elo.fit_elo_many`. `paired_differences` does the same for the overall set and each category
from blocks of resamples, so that `compare` on a large report holds one block, not (resamples x
items) counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

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


def paired_ratings(item_elo, weight, y_a, y_b, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both runs' ratings refitted on each resample (row) of `counts`: (ratings of A, ratings of B)."""
    e = np.asarray(item_elo, dtype=float)
    w = np.asarray(weight, dtype=float)
    cw = counts * w[None, :]
    return fit_elo_many(e, cw, np.asarray(y_a, dtype=float)), fit_elo_many(e, cw, np.asarray(y_b, dtype=float))


def paired_summary(item_elo, weight, y_a, y_b, boot_a, boot_b, confidence: float = CONFIDENCE) -> dict:
    """The point ratings of A and B (`elo.fit_elo`, as in each run's report), B - A, and the
    percentile intervals of the resampled ratings `boot_a`, `boot_b` (from `paired_ratings`)."""
    e = np.asarray(item_elo, dtype=float)
    w = np.asarray(weight, dtype=float)
    elo_a = fit_elo(zip(e, w, np.asarray(y_a, dtype=float)))
    elo_b = fit_elo(zip(e, w, np.asarray(y_b, dtype=float)))
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


def paired_difference(item_elo, weight, y_a, y_b, counts: np.ndarray, confidence: float = CONFIDENCE) -> dict:
    """Elo of A and B on these items, B - A, and the paired bootstrap interval of B - A.

    `counts` comes from `stats.resample_counts` over the same items (or a column subset of it).
    The point ratings come from `elo.fit_elo`, as in each run's report.
    """
    boot_a, boot_b = paired_ratings(item_elo, weight, y_a, y_b, counts)
    return paired_summary(item_elo, weight, y_a, y_b, boot_a, boot_b, confidence)


def paired_differences(
    item_elo, weight, y_a, y_b, columns: Sequence, count_blocks: Iterable[np.ndarray], confidence: float = CONFIDENCE
) -> list[dict]:
    """`paired_difference` for several column subsets of the same draws, the draws given a block of
    resamples at a time (`stats.resample_count_blocks`).

    `columns` holds one boolean mask (or index array) over the items per result. Gives
    [paired_difference(e[c], w[c], y_a[c], y_b[c], counts[:, c]) for c in columns] with `counts`
    the blocks stacked, while only one block of counts and the resampled ratings (two numbers per
    resample and subset) are held. Each resample is fitted on its own row with the same arithmetic
    (see `elo.fit_elo_many`); the one thing a block can change is BLAS's rounding of a row's sums
    (`weights @ correct`, `weights @ onehot`), which OpenBLAS may round in the last bit by where
    the row falls in its split of the rows (its split by threads moves it too: the same matrix on
    1 and on 2 threads differs so). That moves a rating only where a bisection midpoint lies within
    that rounding of the root; in every comparison checked against the code before the blocks (350
    to 20,000 items in 1 to 39 blocks, and 1,000 resamples in blocks of 7 in the tests) no number
    of compare's output moved.
    """
    e = np.asarray(item_elo, dtype=float)
    w = np.asarray(weight, dtype=float)
    ya = np.asarray(y_a, dtype=float)
    yb = np.asarray(y_b, dtype=float)
    boots: list[tuple[list, list]] = [([], []) for _ in columns]
    for counts in count_blocks:
        for c, (got_a, got_b) in zip(columns, boots):
            a, b = paired_ratings(e[c], w[c], ya[c], yb[c], counts[:, c])
            got_a.append(a)
            got_b.append(b)
    return [
        paired_summary(
            e[c], w[c], ya[c], yb[c], np.concatenate(a or [np.empty(0)]), np.concatenate(b or [np.empty(0)]), confidence
        )
        for c, (a, b) in zip(columns, boots)
    ]
