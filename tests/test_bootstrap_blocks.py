"""The bootstrap a block of resamples at a time (stats.resample_count_blocks, paired.paired_differences,
elo.level_sums), as `compare` runs it: the same numbers as the whole (resamples x items) matrix, in
memory of one block.

The old numeric path of `compare` (the whole counts matrix, then `paired_difference` per block of
items, with `fit_elo_many`'s one-hot) is kept below as `old_*`, copied from the code before the
change, so the comparisons can fail if the blocked path drifts from it.
"""

import tracemalloc

import numpy as np
import pytest

from base_bench.commands.compare import build_comparison
from base_bench.items.card import ELO_SCALE, PRIOR_RATING, PRIOR_WEIGHT
from base_bench.results import elo, paired, stats
from base_bench.results.elo import fit_elo
from base_bench.results.stats import percentile_interval

from docpages import bench_script

# ---------------------------------------------------------------- the old path, as it was


def old_resample_counts(strata, resamples, seed):
    rng = np.random.default_rng(seed)
    strata = list(strata)
    counts = np.zeros((resamples, len(strata)), dtype=np.int64)
    for s in dict.fromkeys(strata):
        members = np.array([i for i, t in enumerate(strata) if t == s])
        m = members.size
        draws = rng.integers(0, m, size=(resamples, m))
        flat = draws + m * np.arange(resamples)[:, None]
        counts[:, members] = np.bincount(flat.ravel(), minlength=resamples * m).reshape(resamples, m)
    return counts


def old_fit_elo_many(item_elo, weights, correct, lo=-10000.0, hi=10000.0):
    e = np.asarray(item_elo, dtype=float)
    y = np.asarray(correct, dtype=float)
    w = np.atleast_2d(np.asarray(weights, dtype=float))
    levels, which = np.unique(e, return_inverse=True)
    onehot = np.zeros((e.size, levels.size))
    onehot[np.arange(e.size), which] = 1.0
    wins = w @ y
    per_level = w @ onehot
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


def old_paired_difference(item_elo, weight, y_a, y_b, counts, confidence=stats.CONFIDENCE):
    e = np.asarray(item_elo, dtype=float)
    w = np.asarray(weight, dtype=float)
    ya = np.asarray(y_a, dtype=float)
    yb = np.asarray(y_b, dtype=float)
    elo_a = fit_elo(zip(e, w, ya))
    elo_b = fit_elo(zip(e, w, yb))
    cw = counts * w[None, :]
    boot_a = old_fit_elo_many(e, cw, ya)
    boot_b = old_fit_elo_many(e, cw, yb)
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


def old_blocks(rep_a, rep_b, resamples, seed):
    """What build_comparison computed before for "overall" and each category (its paired_difference
    part; the accuracies and counts it adds do not touch the bootstrap)."""
    pairs = list(zip(rep_a["items"], rep_b["items"]))
    cats = [a["category"] for a, _ in pairs]
    e = np.array([float(a["item_elo"]) for a, _ in pairs])
    w = np.array([float(a["point_weight"]) for a, _ in pairs])
    ya = np.array([1.0 if a["correct"] else 0.0 for a, _ in pairs])
    yb = np.array([1.0 if b["correct"] else 0.0 for _, b in pairs])
    counts = old_resample_counts(cats, resamples, seed)

    def block(mask):
        return old_paired_difference(e[mask], w[mask], ya[mask], yb[mask], counts[:, mask])

    present = list(dict.fromkeys(cats))
    return block(np.ones(len(pairs), dtype=bool)), {c: block(np.array([x == c for x in cats])) for c in present}


# ---------------------------------------------------------------- synthetic reports


def synth_pair(n_items: int, distinct_elo: bool = False, seed: int = 0) -> tuple[dict, dict]:
    """Two reports on the same `n_items` items, A of skill 950 and B of skill 990 (bench/compare_memory.py
    makes them; with `distinct_elo` every item has an item Elo of its own, as a stranger's report may)."""
    return bench_script("compare_memory").synthetic_pair(n_items, distinct_elo, seed)


# ---------------------------------------------------------------- (1) the draws, block by block

SIZES = [1, 2, 3, 7, 50, 51, 1000, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


@pytest.mark.parametrize("seed", [0, 1, 1234, 2**40 + 7])
@pytest.mark.parametrize(
    "layout",
    [
        [m] for m in SIZES
    ]  # one stratum of each size
    + [SIZES, [1, 1, 2, 1], [51, 50, 7, 3, 2, 1]],  # several strata, in order
)  # fmt: skip
def test_blocks_of_draws_are_resample_counts_exactly(seed, layout):
    strata = [f"s{k}" for k, m in enumerate(layout) for _ in range(m)]
    for resamples in (1, 5, 33):
        want = old_resample_counts(strata, resamples, seed)
        assert np.array_equal(stats.resample_counts(strata, resamples, seed), want)  # now one block of them
        for rows in sorted({1, 2, 3, 4, max(1, resamples - 1), resamples, resamples + 1, 1000}):
            blocks = list(stats.resample_count_blocks(strata, resamples, seed, rows))
            assert [b.shape[0] for b in blocks] == [min(rows, resamples - r) for r in range(0, resamples, rows)]
            assert np.array_equal(np.concatenate(blocks), want), (resamples, rows)


def test_blocks_of_draws_with_interleaved_strata():
    # strata need not be contiguous: taken in order of first appearance, as resample_counts does
    rng = np.random.default_rng(3)
    strata = list(rng.choice(["b", "a", "c", "d"], size=500, p=[0.5, 0.3, 0.19, 0.01]))
    want = old_resample_counts(strata, 40, seed=9)
    for rows in (1, 3, 7, 39):
        assert np.array_equal(np.concatenate(list(stats.resample_count_blocks(strata, 40, 9, rows))), want)


def test_drawing_blocks_naively_gives_other_numbers():
    # Why each stratum needs its own generator state: drawing every stratum's rows of block 1, then of
    # block 2, from one generator reorders the stream. The tests above would catch that.
    strata = ["a"] * 7 + ["b"] * 5
    want = old_resample_counts(strata, 6, seed=1)
    rng = np.random.default_rng(1)
    naive = np.zeros_like(want)
    for r0 in range(0, 6, 3):
        for cols in (np.arange(7), np.arange(7, 12)):
            draws = rng.integers(0, cols.size, size=(3, cols.size))
            for r in range(3):
                naive[r0 + r, cols] = np.bincount(draws[r], minlength=cols.size)
    assert not np.array_equal(naive, want)


@pytest.mark.parametrize("high", [2, 3, 7, 1000, 2**31 + 1, 3_000_000_000, 2**32, 2**32 + 5])
def test_numpy_integers_in_pieces_are_one_call(high):
    # The fact the blocks rest on: Generator.integers(0, high) called for r rows and then for the rest
    # returns the numbers and leaves the state of one call for all the rows, also where Lemire's
    # method rejects often (high = 3e9 rejects about 30% of words) and with an odd number of 32-bit
    # draws in a piece (PCG64 keeps the unused half word in its state).
    one = np.random.default_rng(5)
    whole = one.integers(0, high, size=(41, 3))
    pieces = np.random.default_rng(5)
    parts = [pieces.integers(0, high, size=(r, 3)) for r in (1, 2, 5, 33)]
    assert np.array_equal(np.concatenate(parts), whole)
    assert pieces.bit_generator.state == one.bit_generator.state


def test_block_rows():
    assert stats.block_rows(350, 2000) == 2000  # the card's compare: one block
    assert stats.block_rows(20_000, 2000) == stats.BLOCK_ELEMENTS // 20_000 == 52
    assert stats.block_rows(100_000, 2000, elements=10) == 1
    assert stats.block_rows(0, 5) == 5


# ---------------------------------------------------------------- the fit, a block of rows at a time


def test_rows_of_fit_elo_many_do_not_depend_on_the_other_rows():
    # Integer weights make every sum exact in any order, so the only way a row could change with
    # the rows beside it is the shared stopping test; rows at both ends of the bracket, at zero
    # weight and in between stop at the same step.
    rng = np.random.default_rng(0)
    e = np.concatenate([rng.choice([750.0, 900.0, 1200.0], size=40), [100_000.0, -100_000.0]])
    y = np.concatenate([(rng.random(40) < 0.5).astype(float), [1.0, 0.0]])
    w = rng.integers(0, 4, size=(60, 42)).astype(float)
    w[0] = 0.0
    w[1, :40], w[1, 40:] = 0.0, [1e4, 0.0]  # only the 100,000 item, right: at the bracket's top
    w[2, :40], w[2, 40:] = 0.0, [0.0, 1e4]  # only the -100,000 item, wrong: at the bottom
    whole = elo.fit_elo_many(e, w, y)
    assert whole[1] > 9999.9 and whole[2] < -9999.9
    for rows in (1, 2, 3, 7, 59):
        blocks = np.concatenate([elo.fit_elo_many(e, w[r : r + rows], y) for r in range(0, 60, rows)])
        assert np.array_equal(blocks, whole), rows


def test_level_sums_are_the_one_hot_sums():
    rng = np.random.default_rng(1)
    which = rng.integers(0, 9, size=300)
    w = rng.integers(0, 5, size=(17, 300)) * 0.5  # exact sums in any order
    onehot = np.zeros((300, 9))
    onehot[np.arange(300), which] = 1.0
    assert np.array_equal(elo.level_sums(which, 9, w), w @ onehot)
    wf = rng.random((17, 300))
    assert np.allclose(elo.level_sums(which, 9, wf), wf @ onehot, rtol=1e-13, atol=0)


def test_fit_elo_many_without_the_one_hot_where_it_would_be_large(monkeypatch):
    rng = np.random.default_rng(2)
    e = rng.choice(np.arange(700.0, 1300.0, 5.0), size=400)
    w = rng.random((30, 400)) * 3
    y = (rng.random(400) < 0.5).astype(float)
    with_onehot = elo.fit_elo_many(e, w, y)
    made, level_sums = [], elo.level_sums

    def spy(*args):
        made.append(args[1])
        return level_sums(*args)

    monkeypatch.setattr(elo, "level_sums", spy)
    monkeypatch.setattr(elo, "ONEHOT_MAX_ELEMENTS", 400 * 10)  # about 110 levels x 400 items is more
    without = elo.fit_elo_many(e, w, y)
    assert made == [np.unique(e).size] and np.allclose(without, with_onehot, rtol=0, atol=1e-6)
    assert np.array_equal(elo.fit_elo_many(e, w[3:4], y), without[3:4])  # rows stay independent


# ---------------------------------------------------------------- (2) compare gives the numbers it gave


def numbers(block: dict) -> dict:
    return {
        k: block[k] for k in ("elo_a", "elo_b", "diff", "ci95", "elo_a_ci95", "elo_b_ci95", "share_resamples_b_higher")
    }


@pytest.mark.parametrize("resamples, seed", [(2000, 1234), (300, 7)])
def test_compare_on_the_card_size_gives_the_old_numbers(resamples, seed):
    rep_a, rep_b = synth_pair(350)
    cmp = build_comparison(rep_a, rep_b, resamples=resamples, seed=seed)
    overall, cats = old_blocks(rep_a, rep_b, resamples, seed)
    assert numbers(cmp["overall"]) == overall  # == on floats: bit for bit
    assert {c: numbers(b) for c, b in cmp["categories"].items()} == cats
    assert cmp["bootstrap"]["resamples"] == resamples


@pytest.mark.parametrize("elements", [350 * 7, 350 * 64, 350 * 333])
def test_compare_in_blocks_gives_the_old_numbers(monkeypatch, elements):
    # 7, 64 and 333 resamples a block instead of one block of 1,000
    rep_a, rep_b = synth_pair(350, seed=4)
    monkeypatch.setattr(stats, "BLOCK_ELEMENTS", elements)
    assert stats.block_rows(350, 1000) == elements // 350
    cmp = build_comparison(rep_a, rep_b, resamples=1000, seed=11)
    overall, cats = old_blocks(rep_a, rep_b, 1000, 11)
    assert numbers(cmp["overall"]) == overall
    assert {c: numbers(b) for c, b in cmp["categories"].items()} == cats


def test_paired_differences_equal_paired_difference_per_subset():
    rep_a, rep_b = synth_pair(210, seed=6)
    pairs = list(zip(rep_a["items"], rep_b["items"]))
    cats = [a["category"] for a, _ in pairs]
    e, w = np.array([a["item_elo"] for a, _ in pairs]), np.array([a["point_weight"] for a, _ in pairs])
    ya = np.array([float(a["correct"]) for a, _ in pairs])
    yb = np.array([float(b["correct"]) for _, b in pairs])
    subsets = [np.ones(210, dtype=bool), np.array([c == "quantitative" for c in cats]), np.arange(0, 210, 2)]
    counts = old_resample_counts(cats, 250, seed=3)
    want = [paired.paired_difference(e[s], w[s], ya[s], yb[s], counts[:, s]) for s in subsets]
    assert want[0] == old_paired_difference(e, w, ya, yb, counts)
    for rows in (4, 16, 250):
        blocks = stats.resample_count_blocks(cats, 250, 3, rows)
        assert paired.paired_differences(e, w, ya, yb, subsets, blocks) == want


# ---------------------------------------------------------------- (3) memory


def peak_bytes(fn) -> int:
    """The most memory that Python and numpy held at once during fn() (tracemalloc traces numpy's
    array buffers), over what they held before."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_compare_of_two_20000_item_reports_stays_small():
    # before: the (2000, 20000) counts, the weights and their copies: 965 MB traced (measured)
    rep_a, rep_b = synth_pair(20_000)
    peak = peak_bytes(lambda: build_comparison(rep_a, rep_b, resamples=2000, seed=1234))
    assert peak < 128e6, f"{peak / 1e6:.0f} MB"


def test_compare_of_10000_items_at_10000_item_elos_stays_small():
    # before: a (10000, 10000) one-hot, 800 MB, for the overall fits alone (20,000 items: 3.2 GB)
    rep_a, rep_b = synth_pair(10_000, distinct_elo=True)
    peak = peak_bytes(lambda: build_comparison(rep_a, rep_b, resamples=200, seed=1))
    assert peak < 128e6, f"{peak / 1e6:.0f} MB"
