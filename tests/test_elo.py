"""The rating math against hand-computed cases.

With every item rated 1000 (the prior's rating), the equation has a closed form:
sum(w*y) - (sum(w) + 4) * E + 2 = 0, so E = (sum(w*y) + 2) / (sum(w) + 4) and
R = 1000 + 400 * log10(E / (1 - E)).
"""

import math

import pytest

from base_bench.results import elo


def closed_form(e):
    return 1000 + 400 * math.log10(e / (1 - e))


@pytest.mark.parametrize(
    "outcomes, want",
    [
        ([], 1000.0),  # prior alone
        ([(1000, 1, 1)], closed_form(0.6)),  # 1 - E = 4E - 2  -> E = 0.6
        ([(1000, 1, 0)], closed_form(0.4)),  # -E = 4E - 2     -> E = 0.4
        ([(1000, 1, 1), (1000, 1, 0)], 1000.0),  # half right
        ([(1000, 1, 1)] * 10, 1000 + 400 * math.log10(6)),  # all right: E = 12/14
        ([(1000, 1, 0)] * 10, 1000 - 400 * math.log10(6)),  # all wrong: E = 2/14
        ([(1000, 2.25, 1), (1000, 1.5, 0), (1000, 1.0, 1)], closed_form(0.6)),  # (3.25+2)/(4.75+4)
        ([(1000, 1.5, 1), (1000, 2.25, 0)], closed_form(3.5 / 7.75)),  # weighted mix, weight matters
    ],
)
def test_fit_elo_hand_computed(outcomes, want):
    assert elo.fit_elo(outcomes) == pytest.approx(want, abs=1e-6)


def test_expected_values():
    assert elo.expected(1000, 1000) == 0.5
    assert elo.expected(1400, 1000) == pytest.approx(10 / 11)
    assert elo.expected(600, 1000) == pytest.approx(1 / 11)


def test_fit_solves_equation_with_mixed_item_ratings():
    outcomes = [(750, 1.0, 1), (850, 1.5, 1), (1000, 2.25, 0), (1200, 3.15, 1), (950, 1.4, 0)]
    r = elo.fit_elo(outcomes)
    assert abs(elo.score_equation(r, outcomes)) < 1e-9
    # the left side falls as R rises: positive below the root, negative above
    assert elo.score_equation(r - 1, outcomes) > 0 > elo.score_equation(r + 1, outcomes)


def test_more_correct_never_lowers_rating():
    base = [(900, 1.0, 0)] * 5
    ratings = [elo.fit_elo(base[: 5 - k] + [(900, 1.0, 1)] * k) for k in range(6)]
    assert ratings == sorted(ratings) and len(set(ratings)) == 6


def test_same_record_on_harder_items_rates_higher():
    assert elo.fit_elo([(1200, 1, 1), (1200, 1, 0)]) > elo.fit_elo([(800, 1, 1), (800, 1, 0)])


def test_heavier_item_right_is_worth_more():
    # with equal weights only the count of wins matters; the weight is what breaks the tie
    assert elo.fit_elo([(1000, 2.25, 1), (1000, 1.0, 0)]) > elo.fit_elo([(1000, 1.0, 1), (1000, 2.25, 0)])


@pytest.mark.parametrize(
    "weights, correct, raw, weighted",
    [
        ([1, 1, 1, 1], [1, 1, 0, 0], 0.5, 0.5),
        ([1.0, 2.25], [0, 1], 0.5, 2.25 / 3.25),
        ([1.1, 1.5, 3.15], [1, 1, 1], 1.0, 1.0),
        ([1.1, 1.5], [0, 0], 0.0, 0.0),
    ],
)
def test_accuracies(weights, correct, raw, weighted):
    assert elo.raw_accuracy(correct) == pytest.approx(raw)
    assert elo.weighted_accuracy(weights, correct) == pytest.approx(weighted)


def test_summarize_overall_categories_and_difficulties():
    rows = [
        ("commonsense", "easy", 1000, 1.0, True),
        ("commonsense", "hard", 1000, 1.0, False),
        ("quantitative", "easy", 1000, 1.0, True),
    ]
    s = elo.summarize(rows)
    assert s["overall"]["elo"] == pytest.approx(closed_form(4 / 7))
    assert s["categories"]["commonsense"]["elo"] == pytest.approx(1000)
    assert s["categories"]["quantitative"]["elo"] == pytest.approx(closed_form(0.6))
    assert s["difficulties"]["easy"] == {"n": 2, "n_correct": 2, "raw_accuracy": 1.0}
    assert s["difficulties"]["hard"]["raw_accuracy"] == 0.0
    assert "medium" not in s["difficulties"]


def test_the_grouped_fit_of_the_checked_reading_is_the_runners_fit():
    # fit_elo_grouped sums the outcomes per item Elo first; it must land where fit_elo does (1e-9 Elo)
    import random

    from base_bench.results.elo import fit_elo, fit_elo_grouped

    rng = random.Random(7)
    cases = [[], [(1000.0, 1.0, 1.0)], [(700.0, 2.0, 0.0)] * 50, [(1250.0, 0.5, 1.0)] * 3 + [(700.0, 3.0, 0.0)]]
    for _ in range(200):
        levels = rng.sample([700.0, 800.0, 900.0, 950.0, 1000.0, 1100.0, 1250.0], rng.randint(1, 7))
        cases.append(
            [
                (rng.choice(levels), rng.choice([0.75, 1.0, 1.5, 2.0]), float(rng.random() < 0.5))
                for _ in range(rng.randint(1, 400))
            ]
        )
    for outcomes in cases:
        assert abs(fit_elo_grouped(outcomes) - fit_elo(outcomes)) <= 1e-9
    assert fit_elo_grouped([]) == fit_elo([]) == pytest.approx(1000.0)  # the prior alone
