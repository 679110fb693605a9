"""Rows of several items and passes cut by items or by tokens: the pure arithmetic of engine/packing.py,
against hand-computed cases."""

import gzip
import json
import random
from pathlib import Path

import pytest

from base_bench.engine.packing import (
    Batching,
    batch_cost,
    fed_positions,
    first_fit,
    held_positions,
    pack_rows,
    row_layout,
    rows_into_passes,
)
from base_bench.engine.scoring import Encoded, encode_item, length_order
from base_bench.items.dataset import load_dataset_file

ROOT = Path(__file__).resolve().parents[1]


def enc(name: str, length: int) -> Encoded:
    """An item whose packed row is `length` positions: a context of length - 3, and four
    continuations of which only the second feeds a token (the others are one token, predicted only)."""
    return Encoded(name, tuple(range(5, 5 + length - 1)), ((7,), (8, 9), (10,), (11,)))


def lengths_of(batch) -> list[int]:
    return [e.packed_length for e in batch]


@pytest.mark.parametrize(
    "lengths, capacity, rows",
    [
        ([], 10, []),
        ([3], 10, [[0]]),
        ([1, 2, 3], 10, [[0, 1, 2]]),  # everything fits one row
        ([5, 5, 5, 5], 10, [[0, 1], [2, 3]]),  # rows filled exactly
        ([120, 80, 60, 30], 150, [[0, 3], [1, 2]]),  # 30 goes back to the first row, which has room
        ([6, 5, 4, 3, 2, 1], 6, [[0], [1, 5], [2, 4], [3]]),
        ([200, 50, 60], 100, [[0], [1], [2]]),  # too long for any row: a row of its own, closed to others
        ([4, 7, 4], 8, [[0, 2], [1]]),  # the order given is kept: no sorting here
    ],
)
def test_first_fit(lengths, capacity, rows):
    assert first_fit(lengths, capacity) == rows


@pytest.mark.parametrize(
    "lengths, rows, fed",
    [
        ([120, 80, 60, 30], [[0, 3], [1, 2]], 2 * 150),
        ([120, 80, 60, 30], [[0], [1], [2], [3]], 4 * 120),  # one item a row: padded to the longest
        ([9, 1, 1], [[0], [1, 2]], 2 * 9),
        ([], [], 0),
    ],
)
def test_fed_positions(lengths, rows, fed):
    assert fed_positions(lengths, rows) == fed


@pytest.mark.parametrize(
    "lengths, row_length, rows",
    [
        ([40] * 3, None, [[0], [1], [2]]),  # None: one item per row, as before rows held several
        ([40] * 8, 285, [[i] for i in range(8)]),  # under 40: 8 × 40 = 320 fed; under 285: 2 × 280 = 560
        ([50, 45, 45, 45], 200, [[0, 1, 2, 3]]),  # under 50: 4 × 50 = 200; under 200: 1 × 185 wins
        ([100, 60, 50, 40], 150, [[0], [1, 3], [2]]),  # 3 × 100 = 2 × 150: a tie keeps the shorter rows
        ([100, 30, 30, 30], 150, [[0], [1, 2, 3]]),  # under 100: 2 × 100 = 200; under 150: 2 × 130 = 260
        ([], 10, []),
    ],
)
def test_row_layout_takes_the_cheaper_of_two_capacities(lengths, row_length, rows):
    assert row_layout(lengths, row_length) == rows


def test_batch_cost_and_held_positions():
    batch = [enc("a", 100), enc("b", 30), enc("c", 30), enc("d", 30)]
    assert held_positions(batch) == 190
    assert batch_cost(batch) == 4 * 100  # one item per row
    assert batch_cost(batch, 150) == 2 * 100  # [a], [b, c, d]


def test_pack_rows_is_first_fit_decreasing():
    items = [enc("s", 2), enc("l", 6), enc("m", 4), enc("x", 5), enc("t", 3), enc("u", 1)]
    rows = pack_rows(items, 6)
    assert [[e.id for e in row] for row in rows] == [["l"], ["x", "u"], ["m", "s"], ["t"]]


@pytest.mark.parametrize(
    "widths, budget, passes",
    [
        ([6, 6, 6, 3], 12, [[0, 1], [2, 3]]),  # 2 × 6 fits 12, 3 × 6 does not
        ([6, 6, 6, 3], 18, [[0, 1, 2], [3]]),
        ([6, 6, 6, 3], 24, [[0, 1, 2, 3]]),
        ([6, 6, 6, 3], 4, [[0], [1], [2], [3]]),  # a row longer than the budget still makes a pass
        ([3, 3, 6], 9, [[0, 1], [2]]),  # a longer row widens the pass: 3 × 6 > 9
    ],
)
def test_rows_into_passes(widths, budget, passes):
    rows = [[enc(f"r{i}", w)] for i, w in enumerate(widths)]
    got = rows_into_passes(rows, budget)
    assert [[int(e.id[1:]) for e in p] for p in got] == passes


def test_batching_cuts_by_items():
    order = [enc(f"i{n}", n) for n in (9, 7, 5, 3, 1)]
    got = Batching(items=2).cut(order, 9)
    assert [lengths_of(b) for b in got] == [[9, 7], [5, 3], [1]]


def test_batching_cuts_by_tokens_into_rows_packed_full():
    order = [enc(f"i{n}", n) for n in (6, 5, 4, 3, 2, 1)]
    # rows of at most 6: [6], [5, 1], [4, 2], [3]; passes of at most 12 positions: two rows of 6
    got = Batching(tokens=12).cut(order, 6)
    assert [lengths_of(b) for b in got] == [[6, 5, 1], [4, 2, 3]]
    # a budget below the row length shrinks the rows to it; longer items go alone
    small = Batching(tokens=4)
    assert small.row_capacity(6) == 4
    assert [lengths_of(b) for b in small.cut(order, 6)] == [[6], [5], [4], [3, 1], [2]]
    assert Batching(items=3).row_capacity(6) == 6


@pytest.mark.parametrize(
    "before, after",
    [
        (Batching(items=5), Batching(items=2)),
        (Batching(items=1), Batching(items=1)),
        (Batching(tokens=4097), Batching(tokens=2048)),
        (Batching(tokens=1), Batching(tokens=1)),
    ],
)
def test_halved(before, after):
    assert before.halved() == after


@pytest.mark.parametrize("kwargs", [{}, {"items": 2, "tokens": 100}, {"items": 0}, {"tokens": 0}])
def test_batching_takes_exactly_one_positive_limit(kwargs):
    with pytest.raises(ValueError):
        Batching(**kwargs)


def test_first_fit_in_row_order_rebuilds_the_rows_of_any_pass():
    """What the packed scorer relies on: given a pass (rows of a first-fit-decreasing packing, row
    after row), `row_layout` rebuilds those rows or finds cheaper ones, so a pass never feeds more
    than `Batching` counted for it."""
    rng = random.Random(0)
    for trial in range(300):
        n = rng.randint(1, 60)
        order = sorted(
            (enc(f"{trial}-{i:02d}", rng.randint(1, 120)) for i in range(n)), key=lambda e: (-e.packed_length, e.id)
        )
        row_length = order[0].packed_length
        budget = rng.randint(1, 5 * row_length)
        plan = Batching(tokens=budget)
        cap = plan.row_capacity(row_length)
        rows = pack_rows(order, cap)
        # any rows, kept in order, come back as the same rows
        keep = [row for row in rows if rng.random() < 0.5] or rows[:1]
        flat = [e for row in keep for e in row]
        want, at = [], 0
        for row in keep:
            want.append(list(range(at, at + len(row))))
            at += len(row)
        assert first_fit(lengths_of(flat), cap) == want
        for batch in plan.cut(order, row_length):
            assert batch_cost(batch, cap) <= max(budget, held_positions(batch))
        assert sorted(e.id for b in plan.cut(order, row_length) for e in b) == sorted(e.id for e in order)


def smollm2_tokenizer():
    """SmolLM2-135M's tokenizer, from the copy bench/assets carries for the GPU check."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    assets = ROOT / "bench" / "assets"
    meta = json.loads((assets / "smollm2-135m-tokenizer.meta.json").read_text())
    raw = gzip.decompress((assets / "smollm2-135m-tokenizer.json.gz").read_bytes()).decode()
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(raw), **meta["special_tokens"])


def test_padding_on_the_bundled_set_with_a_real_tokenizer():
    """On the bundled set's real token lengths, padding is at most 10% of the positions fed at every
    token budget, also one that holds all 350 items at once (1.6% there, where one item per row
    padded 77.5%); and cutting by items never feeds more than one item per row did."""
    tok = smollm2_tokenizer()
    encs = [encode_item(tok, it) for it in load_dataset_file(ROOT / "data" / "test.jsonl").items]
    order = [encs[i] for i in length_order(encs)]
    held, row = sum(e.packed_length for e in encs), order[0].packed_length
    assert (held, row) == (22_430, 285)  # bench/RESULTS.md and docs/scoring.md quote these
    everything = len(pack_rows(order, row)) * row
    assert everything == 80 * 285

    def fed(plan, row_length):
        return sum(batch_cost(b, row_length) for b in plan.cut(order, row))

    for tokens in (1, 100, row, 1024, 2048, 4096, 8192, everything, 10**6):
        plan = Batching(tokens=tokens)
        assert 1 - held / fed(plan, plan.row_capacity(row)) <= 0.10, tokens
    assert len(Batching(tokens=everything).cut(order, row)) == 1
    assert fed(Batching(tokens=everything), row) == 22_800
    for size in range(1, 351):
        plan = Batching(items=size)
        assert fed(plan, row) <= fed(plan, None), size  # None: one item per row
    assert (fed(Batching(items=350), None), fed(Batching(items=350), row)) == (99_750, 22_800)
    assert (fed(Batching(items=32), None), fed(Batching(items=32), row)) == (27_144, 24_826)
