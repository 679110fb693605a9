"""Paired statistics: exact McNemar on hand-computed cases and the stratified paired bootstrap
(reproducible, zero width for identical runs). The vectorised fit (elo.fit_elo_many), the
within-category draws (stats.resample_counts) and the percentile interval it uses are tested in
test_stats.py."""

import math
import time
from fractions import Fraction

import numpy as np
import pytest

from base_bench.items import card
from base_bench.results import elo
from base_bench.results.paired import mcnemar_exact, paired_difference
from base_bench.results.stats import resample_counts


@pytest.mark.parametrize(
    "b, c, want",
    [
        (0, 0, 1.0),  # no discordant items
        (0, 5, 2 / 32),  # 2 * C(5,0) / 2^5
        (5, 0, 2 / 32),  # symmetric
        (1, 5, 2 * (1 + 6) / 64),  # 2 * (C(6,0) + C(6,1)) / 2^6 = 0.21875
        (3, 3, 1.0),  # 2 * P(X <= 3 | n=6) = 2 * 42/64 > 1 -> 1
        (0, 10, 2 / 1024),
        (2, 8, 2 * (1 + 10 + 45) / 1024),
        (1, 0, 1.0),  # 2 * 1/2 = 1
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


def test_paired_bootstrap_reproducible_and_zero_width_for_identical_runs():
    items = card_items()
    e = [r[1] for r in items]
    w = [r[2] for r in items]
    rng = np.random.default_rng(1)
    ya = (rng.random(350) < 0.5).astype(float)
    yb = ya.copy()
    yb[:40] = 1.0
    counts = resample_counts([r[0] for r in items], 500, seed=9)
    one = paired_difference(e, w, ya, yb, counts)
    two = paired_difference(e, w, ya, yb, resample_counts([r[0] for r in items], 500, seed=9))
    assert one == two
    assert one["ci95"][0] < one["diff"] < one["ci95"][1]
    assert one["diff"] == pytest.approx(elo.fit_elo(zip(e, w, yb)) - elo.fit_elo(zip(e, w, ya)), abs=1e-6)
    same = paired_difference(e, w, ya, ya, counts)
    assert same["diff"] == 0.0 and same["ci95"] == [0.0, 0.0] and same["share_resamples_b_higher"] == 0.0


def test_share_b_higher_counts_only_real_wins_not_rounding():
    # With every item at one item Elo and one weight, B's refitted rating is above A's exactly when
    # B has more right answers among the drawn items; where the two are level the ratings must tie,
    # not differ by rounding either side of 0 (a weight like 1.1 is not exact in binary).
    rng = np.random.default_rng(0)
    e, w = np.full(50, 800.0), np.full(50, 1.1)
    ya, yb = (rng.random(50) < 0.5).astype(float), (rng.random(50) < 0.5).astype(float)
    counts = resample_counts(["world_knowledge"] * 50, 2000, seed=0)
    d = paired_difference(e, w, ya, yb, counts)
    assert (counts @ ya == counts @ yb).any()
    assert d["share_resamples_b_higher"] == np.mean(counts @ yb > counts @ ya)


def test_bootstrap_is_fast():
    items = card_items()
    rng = np.random.default_rng(2)
    ya, yb = (rng.random(350) < 0.5), (rng.random(350) < 0.55)
    t = time.perf_counter()
    counts = resample_counts([r[0] for r in items], 1000, seed=1)
    paired_difference([r[1] for r in items], [r[2] for r in items], ya, yb, counts)
    assert time.perf_counter() - t < 2.0
