"""Interval estimates: the curvature SE, the vectorised fit, the bootstrap and Wilson intervals.

Wilson cases are worked by hand with z = 1.96 (z^2 = 3.8416), n = 10:
  denominator 1 + z^2/n = 1.38416; z^2/(2n) = 0.19208; z^2/(4n^2) = 0.009604.
  k = 0:  (0.19208 - 1.96*sqrt(0.009604)) / 1.38416 = 0;      hi = 0.38416 / 1.38416 = 0.27754
  k = 5:  half = 1.96*sqrt(0.025 + 0.009604) = 0.364618;     (0.69208 -/+ 0.364618) / 1.38416
          = (0.23659, 0.76341)
  k = 10: mirror of k = 0: (1 - 0.27754, 1) = (0.72246, 1)
"""

import math
import time

import numpy as np
import pytest

from base_bench.items import card
from base_bench.results import elo, stats

MIXED = [(750, 1.0, 1), (850, 1.5, 1), (1000, 2.25, 0), (1200, 3.15, 1), (950, 1.4, 0)]


def card_rows(n_per_cat=50, seed=0):
    """(category, difficulty, item_elo, weight, correct) for a card-shaped set with a skill gradient."""
    rng = np.random.default_rng(seed)
    rows = []
    for cat in card.CATEGORIES:
        for i in range(n_per_cat):
            diff = ("easy", "medium", "hard")[i % 3]
            e = card.item_elo(cat, diff)
            w = card.category_weight(cat) * card.DIFFICULTY_WEIGHTS[diff]
            rows.append((cat, diff, e, w, bool(rng.random() < elo.expected(1000, e))))
    return rows


def columns(rows):
    return [r[2] for r in rows], [r[3] for r in rows], [r[4] for r in rows], [r[0] for r in rows]


# --- curvature standard error -------------------------------------------------------------------


def numeric_information(rating, outcomes, h=1.0):
    ll = elo.log_likelihood
    return -(ll(rating + h, outcomes) - 2 * ll(rating, outcomes) + ll(rating - h, outcomes)) / (h * h)


@pytest.mark.parametrize(
    "outcomes",
    [
        [],
        [(1000, 1, 1)],
        [(1000, 1, 0)] * 10,
        MIXED,
        [(800, 2.25, 1)] * 30 + [(1200, 1.0, 0)] * 30,
        [(r[2], r[3], float(r[4])) for r in card_rows()],
    ],
)
def test_se_matches_numerical_second_derivative_at_the_fit(outcomes):
    r = elo.fit_elo(outcomes)
    se = elo.elo_standard_error(r, outcomes)
    assert se == pytest.approx(1 / math.sqrt(numeric_information(r, outcomes)), rel=1e-3)


def test_se_hand_computed_prior_only():
    # At R = 1000 with no items: I = k^2 * 4 * 0.25 = k^2, so SE = 400 / ln 10 = 173.72
    assert elo.elo_standard_error(1000.0, []) == pytest.approx(400 / math.log(10))
    # Ten items at 1000 with weight 1 add 10 * 0.25: I = k^2 * 3.5, SE = 173.72 / sqrt(3.5)
    assert elo.elo_standard_error(1000.0, [(1000, 1, 1)] * 10) == pytest.approx(400 / math.log(10) / math.sqrt(3.5))


def test_log_likelihood_hand_computed():
    # prior alone at 1000: 4 * log(0.5); one win at 1000 adds log(0.5); weight scales it
    assert elo.log_likelihood(1000, []) == pytest.approx(4 * math.log(0.5))
    assert elo.log_likelihood(1000, [(1000, 2.0, 1)]) == pytest.approx(6 * math.log(0.5))
    # a win against an item 400 below: p = 10/11
    assert elo.log_likelihood(1400, [(1000, 1.0, 1)]) - elo.log_likelihood(1400, []) == pytest.approx(math.log(10 / 11))
    # far from the items the log stays finite (no log(0))
    assert math.isfinite(elo.log_likelihood(-9000, [(1200, 1, 1)]))


def test_log_likelihood_is_maximised_at_the_fit():
    r = elo.fit_elo(MIXED)
    assert elo.log_likelihood(r, MIXED) > max(elo.log_likelihood(r - 0.5, MIXED), elo.log_likelihood(r + 0.5, MIXED))


def test_more_items_shrink_the_se():
    few = [(1000, 1, 1), (1000, 1, 0)]
    assert elo.elo_standard_error(1000, few * 10) < elo.elo_standard_error(1000, few)


# --- vectorised fit -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "outcomes",
    [
        [(1000, 1, 1)],
        [(1000, 1, 0)] * 10,
        [(1000, 2.25, 1), (1000, 1.5, 0), (1000, 1.0, 1)],
        MIXED,
        [(r[2], r[3], float(r[4])) for r in card_rows()],
        [(r[2], r[3], 1.0) for r in card_rows()],  # all right
        [(r[2], r[3], 0.0) for r in card_rows()],  # all wrong
    ],
)
def test_fit_elo_many_matches_fit_elo(outcomes):
    e, w, y = zip(*outcomes)
    got = elo.fit_elo_many(e, [w], y)
    assert got.shape == (1,) and got[0] == pytest.approx(elo.fit_elo(outcomes), abs=1e-6)


def test_fit_elo_many_matches_fit_elo_on_every_resample():
    rows = card_rows(seed=3)
    e, w, y, strata = columns(rows)
    counts = stats.resample_counts(strata, 25, seed=7)
    many = elo.fit_elo_many(e, counts * np.asarray(w), y)
    for b in range(25):
        one = elo.fit_elo((ei, c * wi, float(yi)) for ei, wi, yi, c in zip(e, w, y, counts[b]))
        assert many[b] == pytest.approx(one, abs=1e-6)


def test_fit_elo_many_with_counts_equals_fit_elo_on_the_expanded_list():
    # a resampled item drawn k times counts as k copies of it: weight k * point_weight
    rows = card_rows(seed=5)
    e, w, y, strata = columns(rows)
    counts = stats.resample_counts(strata, 5, seed=11)
    many = elo.fit_elo_many(e, counts * np.asarray(w), y)
    for k, r in zip(counts, many):
        expanded = [(e[i], w[i], float(y[i])) for i in range(len(rows)) for _ in range(k[i])]
        assert r == pytest.approx(elo.fit_elo(expanded), abs=1e-6)


def test_fit_elo_many_hand_computed_and_prior_alone():
    # every item at 1000: E = (sum(w*y) + 2) / (sum(w) + 4)  (see test_elo)
    r = elo.fit_elo_many([1000, 1000], [[1.0, 1.0], [1.0, 0.0]], [1, 1])
    assert r[0] == pytest.approx(1000 + 400 * math.log10(2), abs=1e-6)  # E = 4/6
    assert r[1] == pytest.approx(1000 + 400 * math.log10(0.6 / 0.4), abs=1e-6)  # weight 0 drops item 2: E = 3/5
    assert elo.fit_elo_many([1000], [[0.0]], [1.0])[0] == pytest.approx(1000.0, abs=1e-6)
    assert elo.fit_elo_many([], np.zeros((3, 0)), []) == pytest.approx([1000.0] * 3, abs=1e-6)


# --- bootstrap ----------------------------------------------------------------------------------


def test_resample_counts_stay_within_strata():
    strata = ["a"] * 3 + ["b"] * 5 + ["a"] * 2
    counts = stats.resample_counts(strata, 200, seed=1)
    a = np.array([s == "a" for s in strata])
    assert counts.shape == (200, 10)
    assert (counts[:, a].sum(axis=1) == 5).all() and (counts[:, ~a].sum(axis=1) == 5).all()
    assert counts.min() >= 0 and counts.max() > 1  # with replacement: some item drawn twice
    assert (stats.resample_counts(strata, 200, seed=1) == counts).all()
    assert not (stats.resample_counts(strata, 200, seed=2) == counts).all()


def test_resample_counts_keep_each_card_category_at_50():
    strata = [r[0] for r in card_rows()]
    counts = stats.resample_counts(strata, 200, seed=5)
    assert counts.shape == (200, 350)
    for cat in card.CATEGORIES:
        cols = [i for i, s in enumerate(strata) if s == cat]
        assert (counts[:, cols].sum(axis=1) == 50).all()


def test_bootstrap_is_reproducible_with_a_seed_and_changes_with_another():
    cols = columns(card_rows())
    a = stats.bootstrap_intervals(*cols, resamples=1000, seed=1234)
    b = stats.bootstrap_intervals(*cols, resamples=1000, seed=1234)
    c = stats.bootstrap_intervals(*cols, resamples=1000, seed=99)
    assert a == b
    assert a["overall"]["elo_ci95"] != c["overall"]["elo_ci95"]


def test_bootstrap_interval_brackets_the_fit_and_has_sane_width():
    rows = card_rows()
    e, w, y, strata = columns(rows)
    boot = stats.bootstrap_intervals(e, w, y, strata)
    r = elo.fit_elo(zip(e, w, map(float, y)))
    lo, hi = boot["overall"]["elo_ci95"]
    assert lo < r < hi
    se = elo.elo_standard_error(r, list(zip(e, w, map(float, y))))
    assert 2 * se < hi - lo < 8 * se  # same order as the curvature interval
    assert set(boot["strata"]) == set(card.CATEGORIES)
    for cat, block in boot["strata"].items():
        sub = [row for row in rows if row[0] == cat]
        rc = elo.fit_elo((x[2], x[3], float(x[4])) for x in sub)
        assert block["elo_ci95"][0] <= rc <= block["elo_ci95"][1]
        assert hi - lo < block["elo_ci95"][1] - block["elo_ci95"][0]  # 50 items: wider than 350
    wlo, whi = boot["overall"]["weighted_accuracy_ci95"]
    wacc = elo.weighted_accuracy(w, y)
    assert 0 <= wlo < wacc < whi <= 1


def test_bootstrap_all_right_gives_a_point_interval():
    # every resample of an all-correct set is all correct, at the same item Elos: one rating
    boot = stats.bootstrap_intervals([1000] * 6, [1.0] * 6, [True] * 6, ["a"] * 6, resamples=50)
    r = elo.fit_elo([(1000, 1.0, 1.0)] * 6)
    assert boot["overall"]["elo_ci95"] == pytest.approx([r, r], abs=1e-6)
    assert boot["overall"]["weighted_accuracy_ci95"] == [1.0, 1.0]


def test_bootstrap_of_a_full_card_set_is_fast():
    cols = columns(card_rows())
    t = time.perf_counter()
    stats.bootstrap_intervals(*cols, resamples=1000, seed=1234)
    assert time.perf_counter() - t < 2.0


@pytest.mark.parametrize(
    "samples, want",
    [
        (range(101), (2.5, 97.5)),  # linear rule on 0..100
        (range(1001), (25.0, 975.0)),
        ([5.0] * 10, (5.0, 5.0)),
        ([0.0, 1.0], (0.025, 0.975)),
    ],
)
def test_percentile_interval(samples, want):
    assert stats.percentile_interval(samples) == pytest.approx(want)


# --- Wilson -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "k, n, want",
    [
        (0, 10, (0.0, 0.27754)),
        (5, 10, (0.23659, 0.76341)),
        (10, 10, (0.72246, 1.0)),
        (1, 1, (0.20654, 1.0)),  # 1 / (1 + 3.8416) = 0.20654
        (0, 0, (0.0, 1.0)),  # no trials: know nothing
    ],
)
def test_wilson_hand_computed(k, n, want):
    assert stats.wilson_interval(k, n, z=1.96) == pytest.approx(want, abs=1e-5)


def test_wilson_default_is_95_percent():
    assert stats.Z95 == pytest.approx(1.959964, abs=1e-6)
    lo, hi = stats.wilson_interval(50, 100)
    assert (lo, hi) == pytest.approx((0.40383, 0.59617), abs=1e-5)
    assert lo < 0.5 < hi and hi - 0.5 == pytest.approx(0.5 - lo)
