"""Paired statistics: exact McNemar on hand-computed cases, the vectorised Elo fit against
elo.fit_elo, and the stratified paired bootstrap (reproducible, zero width for identical runs)."""

import math
import time
from fractions import Fraction

import numpy as np
import pytest

from base_bench import card, elo
from base_bench.paired import (fit_elo_batch, mcnemar_exact, paired_difference, percentile_interval,
                               stratified_counts)


@pytest.mark.parametrize(
    "b, c, want",
    [
        (0, 0, 1.0),                 # no discordant items
        (0, 5, 2 / 32),              # 2 * C(5,0) / 2^5
        (5, 0, 2 / 32),              # symmetric
        (1, 5, 2 * (1 + 6) / 64),    # 2 * (C(6,0) + C(6,1)) / 2^6 = 0.21875
        (3, 3, 1.0),                 # 2 * P(X <= 3 | n=6) = 2 * 42/64 > 1 -> 1
        (0, 10, 2 / 1024),
        (2, 8, 2 * (1 + 10 + 45) / 1024),
        (1, 0, 1.0),                 # 2 * 1/2 = 1
    ],
)
def test_mcnemar_hand_computed(b, c, want):
    assert mcnemar_exact(b, c) == pytest.approx(want, rel=1e-12, abs=0)


def test_mcnemar_matches_exact_fractions_for_large_counts():
    for b, c in [(40, 70), (170, 180), (0, 350)]:
        n = b + c
        exact = min(Fraction(1), 2 * Fraction(sum(math.comb(n, k) for k in range(min(b, c) + 1)), 2**n))
        assert mcnemar_exact(b, c) == pytest.approx(float(exact), rel=1e-12)
    assert 0 < mcnemar_exact(0, 350) < 1e-100


def test_mcnemar_rejects_negative_counts():
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def card_items():
    """(category, item_elo, point_weight) for the card's 350-item composition."""
    diffs = ["easy", "medium", "hard"]
    rows = []
    for cat in card.CATEGORIES:
        for n in range(card.ITEMS_PER_CATEGORY):
            d = diffs[n % 3]
            rows.append((cat, card.item_elo(cat, d), card.category_weight(cat) * card.DIFFICULTY_WEIGHTS[d]))
    return rows


def test_fit_elo_batch_equals_fit_elo_on_random_outcomes():
    rng = np.random.default_rng(7)
    items = card_items()
    e = np.array([r[1] for r in items], float)
    w = np.array([r[2] for r in items], float)
    ys = (rng.random((12, len(items))) < rng.random((12, 1))).astype(float)
    ys[0] = 1.0   # all right
    ys[1] = 0.0   # all wrong
    got = fit_elo_batch(e, w, ys)
    for row, r in zip(ys, got):
        assert r == pytest.approx(elo.fit_elo(zip(e, w, row)), abs=1e-6)


def test_fit_elo_batch_with_counts_equals_fit_elo_on_the_expanded_list():
    rng = np.random.default_rng(3)
    items = card_items()
    e = np.array([r[1] for r in items], float)
    w = np.array([r[2] for r in items], float)
    y = (rng.random(len(items)) < 0.6).astype(float)
    counts = stratified_counts([r[0] for r in items], 5, seed=11)
    got = fit_elo_batch(e, counts * w, y)
    for k, r in zip(counts, got):
        expanded = [(e[i], w[i], y[i]) for i in range(len(items)) for _ in range(k[i])]
        assert r == pytest.approx(elo.fit_elo(expanded), abs=1e-6)


def test_fit_elo_batch_hand_computed_and_prior_alone():
    # every item at 1000: E = (sum(w*y) + 2) / (sum(w) + 4)  (see test_elo)
    r = fit_elo_batch([1000, 1000], [[1.0, 1.0], [1.0, 0.0]], [[1, 1], [1, 0]])
    assert r[0] == pytest.approx(1000 + 400 * math.log10(2), abs=1e-6)           # E = 4/6
    assert r[1] == pytest.approx(1000 + 400 * math.log10(0.6 / 0.4), abs=1e-6)   # weight 0 drops item 2: E = 3/5
    assert fit_elo_batch([1000], [0.0], [1.0])[0] == pytest.approx(1000.0, abs=1e-6)


def test_stratified_counts_keep_each_category_size_and_are_reproducible():
    strata = [r[0] for r in card_items()]
    a = stratified_counts(strata, 200, seed=5)
    assert a.shape == (200, 350)
    for cat in card.CATEGORIES:
        cols = [i for i, s in enumerate(strata) if s == cat]
        assert (a[:, cols].sum(axis=1) == 50).all()
    assert (stratified_counts(strata, 200, seed=5) == a).all()
    assert not (stratified_counts(strata, 200, seed=6) == a).all()


def test_paired_bootstrap_reproducible_and_zero_width_for_identical_runs():
    items = card_items()
    e = [r[1] for r in items]
    w = [r[2] for r in items]
    rng = np.random.default_rng(1)
    ya = (rng.random(350) < 0.5).astype(float)
    yb = ya.copy()
    yb[:40] = 1.0
    counts = stratified_counts([r[0] for r in items], 500, seed=9)
    one = paired_difference(e, w, ya, yb, counts)
    two = paired_difference(e, w, ya, yb, stratified_counts([r[0] for r in items], 500, seed=9))
    assert one == two
    assert one["ci95"][0] < one["diff"] < one["ci95"][1]
    assert one["diff"] == pytest.approx(elo.fit_elo(zip(e, w, yb)) - elo.fit_elo(zip(e, w, ya)), abs=1e-6)
    same = paired_difference(e, w, ya, ya, counts)
    assert same["diff"] == 0.0 and same["ci95"] == [0.0, 0.0] and same["share_resamples_b_higher"] == 0.0


def test_percentile_interval():
    assert percentile_interval(np.arange(1001), 0.95) == pytest.approx([25.0, 975.0])
    assert percentile_interval(np.full(50, 3.0)) == [3.0, 3.0]


def test_bootstrap_is_fast():
    items = card_items()
    rng = np.random.default_rng(2)
    ya, yb = (rng.random(350) < 0.5), (rng.random(350) < 0.55)
    t = time.perf_counter()
    counts = stratified_counts([r[0] for r in items], 1000, seed=1)
    paired_difference([r[1] for r in items], [r[2] for r in items], ya, yb, counts)
    assert time.perf_counter() - t < 2.0
