"""Rankings of runs and how much two rankings agree.

    ranks([1010.0, 987.5, 1010.0])          # [1, 3, 1]: 1 + how many are strictly higher (ties share)
    kendall_tau_b([3, 2, 1], [3, 1, 1])     # 0.8164...: concordant minus discordant pairs over
                                            # sqrt((pairs - ties in x) * (pairs - ties in y))

Kendall's tau-b is 1 when two rankings agree on the order of every pair, -1 when they reverse every
pair, and it counts ties (two runs of equal Elo under a rule) on each side apart, as scipy's
`kendalltau` does by default. It is undefined (None) when either side has no two values that differ
(one run, or all tied). Pure functions; the pairs are counted one by one (a handful of runs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def ranks(values: Sequence[float]) -> list[int]:
    """Competition ranks, highest value first: 1 + the number of values strictly above it."""
    return [1 + sum(1 for w in values if w > v) for v in values]


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b between two equally long sequences of scores (or ranks) of the same things;
    None when it is undefined (fewer than two values, or one side all tied)."""
    if len(x) != len(y):
        raise ValueError(f"kendall_tau_b: {len(x)} values against {len(y)}")
    concordant = discordant = tied_x = tied_y = 0
    n = len(x)
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0:
                tied_x += 1
            if dy == 0:
                tied_y += 1
            if dx == 0 or dy == 0:
                continue
            if (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    pairs = n * (n - 1) // 2
    denominator = (pairs - tied_x) * (pairs - tied_y)
    if denominator == 0:
        return None
    return (concordant - discordant) / math.sqrt(denominator)
