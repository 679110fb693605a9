"""Interval estimates for the report, as pure functions of plain data.

    wilson_interval(k, n)                        -> (lo, hi) 95% Wilson score interval for k of n
    resample_counts(strata, resamples, seed)     -> (B, n) item counts, resampled within each stratum
    resample_count_blocks(strata, resamples, seed, rows)
        -> the same (B, n) matrix as blocks of at most `rows` rows, top to bottom (memory of one block)
    block_rows(n_items, resamples)               -> rows of a block of about BLOCK_ELEMENTS counts
    percentile_interval(samples)                 -> (lo, hi) central 95% of the samples
    bootstrap_intervals(item_elo, weight, correct, strata, resamples=1000, seed=1234)
        -> {"overall": {...}, "strata": {name: {...}}}, each {"elo_ci95": [lo, hi],
           "weighted_accuracy_ci95": [lo, hi]}

The bootstrap draws items with replacement within each stratum (category), the same number as
the stratum holds, so every resample keeps the benchmark's composition. One set of draws serves
every rating: the overall fit uses all of a resample's items, and a category's fit uses the part
of the same resample that falls in that category (which is itself a resample of that category
alone). All resamples are fitted at once with elo.fit_elo_many. The same seed gives the same
draws, so a report is reproducible bit for bit.

`resample_count_blocks` gives the rows of `resample_counts`'s matrix a block at a time, so a caller
whose fits are row by row (`compare`) never holds the whole (B, n) matrix. It draws each stratum's
rows with the same `Generator.integers` calls cut into fewer rows: numpy draws each bounded integer
below 2**32 from the bit generator's next 32-bit word (Lemire's method; a rejection takes the next
word; `buffered_bounded_lemire_uint32` takes a buffer argument but does not use it), and PCG64
keeps the unused half of a 64-bit output in its own state, not in the call, so a call for r rows
followed by one for the rest consumes exactly the words of one call for all of them and returns
the same numbers (tests/test_bootstrap_blocks.py checks this of numpy, rejections included). Stratum
s's draws start where stratum s - 1's end, so each stratum's generator state is found once by
drawing (and dropping) the earlier strata's rows, block by block: the draws are made twice.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Hashable, Iterator, Sequence
from statistics import NormalDist

import numpy as np

from .elo import fit_elo_many

CONFIDENCE = 0.95
Z95 = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)  # 1.959963984540054
DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 1234
BLOCK_ELEMENTS = 1 << 20  # item counts in one block of resamples (8 MiB as int64): the card's 350
# items take up to 2,995 resamples in one block, 20,000 items 52 resamples a block


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a proportion with k successes in n trials.

    (center -/+ half) / (1 + z^2/n), center = p + z^2/(2n), half = z * sqrt(p(1-p)/n + z^2/(4n^2)).
    With no trials nothing is known, and the interval is the whole range (0, 1).
    """
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1.0 + z * z / n
    center = p + z * z / (2 * n)
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n))
    # The interval always holds p (exactly 1 at k = n, 0 at k = 0); min/max undo a rounding error
    # (k = n = 51 gave an upper bound of 0.9999999999999998, below the accuracy it bounds).
    return (max(0.0, min(p, (center - half) / denom)), min(1.0, max(p, (center + half) / denom)))


def resample_counts(strata: Sequence[Hashable], resamples: int, seed: int) -> np.ndarray:
    """How often each item is drawn in each of `resamples` stratified resamples, shape (B, n).

    Within each stratum (taken in order of first appearance) the draw is n_s indices uniformly
    with replacement, so every row's counts sum to n_s over that stratum's items.
    """
    strata = list(strata)
    # one block of every row: the strata's draws one after the other from one generator
    return next(resample_count_blocks(strata, resamples, seed, resamples), np.zeros((0, len(strata)), dtype=np.int64))


def strata_members(strata: Sequence[Hashable]) -> list[np.ndarray]:
    """The item indices of each stratum, strata in order of first appearance, indices ascending."""
    members: dict[Hashable, list[int]] = {}
    for i, s in enumerate(strata):
        members.setdefault(s, []).append(i)
    return [np.array(ix, dtype=np.intp) for ix in members.values()]


def block_rows(n_items: int, resamples: int, elements: int | None = None) -> int:
    """Rows of a block of resamples holding about `elements` item counts (BLOCK_ELEMENTS when None):
    at least 1, at most `resamples` (so a small bootstrap is one block)."""
    elements = BLOCK_ELEMENTS if elements is None else elements
    return max(1, min(int(resamples), int(elements) // max(int(n_items), 1)))


def resample_count_blocks(strata: Sequence[Hashable], resamples: int, seed: int, rows: int) -> Iterator[np.ndarray]:
    """`resample_counts(strata, resamples, seed)` as blocks of at most `rows` rows, top to bottom.

    The blocks put one above the other are that matrix exactly (same seed, same numbers), but no
    more than one block, its draws and one generator per stratum are held at a time.
    """
    rows = max(1, int(rows))
    n = len(strata)
    groups = strata_members(strata)
    starts = range(0, resamples, rows)
    rng = np.random.default_rng(seed)
    if len(starts) <= 1:
        gens = [rng] * len(groups)  # one block: the strata's draws follow each other, as in resample_counts
    else:
        gens = []
        for members in groups:
            gens.append(copy.deepcopy(rng))  # where this stratum's draws start
            m = members.size
            for r0 in starts:  # move past them (a stratum of one item draws nothing)
                rng.integers(0, m, size=(min(rows, resamples - r0), m))
    for r0 in starts:
        c = min(rows, resamples - r0)
        counts = np.zeros((c, n), dtype=np.int64)
        for members, g in zip(groups, gens):
            m = members.size
            draws = g.integers(0, m, size=(c, m))
            flat = draws + m * np.arange(c)[:, None]
            counts[:, members] = np.bincount(flat.ravel(), minlength=c * m).reshape(c, m)
            del draws, flat  # not held while the caller has the block
        yield counts


def percentile_interval(samples, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval: the (1-c)/2 and (1+c)/2 quantiles of the samples (linear rule)."""
    lo, hi = np.quantile(np.asarray(samples, dtype=float), [(1 - confidence) / 2, (1 + confidence) / 2])
    return (float(lo), float(hi))


def _intervals(e, w, y, counts, confidence) -> dict:
    weights = counts * w[None, :]
    ratings = fit_elo_many(e, weights, y)
    total = weights.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        wacc = (weights @ y) / total
    return {
        "elo_ci95": list(percentile_interval(ratings, confidence)),
        "weighted_accuracy_ci95": list(percentile_interval(wacc, confidence)) if e.size else [math.nan, math.nan],
    }


def bootstrap_intervals(
    item_elo: Sequence[float],
    weight: Sequence[float],
    correct: Sequence[bool],
    strata: Sequence[Hashable],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> dict:
    """Percentile bootstrap intervals for the overall rating and for each stratum's own rating.

    Arguments are per item: its Elo, point weight, whether it was answered right, and its stratum
    (category). Returns {"overall": block, "strata": {stratum: block}}, where a block is
    {"elo_ci95": [lo, hi], "weighted_accuracy_ci95": [lo, hi]}.
    """
    e = np.asarray(item_elo, dtype=float)
    w = np.asarray(weight, dtype=float)
    y = np.asarray(correct, dtype=float)
    strata = list(strata)
    counts = resample_counts(strata, resamples, seed)
    out = {"overall": _intervals(e, w, y, counts, confidence), "strata": {}}
    for s in dict.fromkeys(strata):
        members = np.array([i for i, t in enumerate(strata) if t == s])
        out["strata"][s] = _intervals(e[members], w[members], y[members], counts[:, members], confidence)
    return out
