"""The item × step grid of explore.html: one row per item, one column per checkpoint (the runs
labelled with a training step, in step order), each cell right or wrong and shaded by margin.

    learned_at([False, True, False, True, True])    # 3: right from column 3 on, to the last
    learned_at([True, True, True])                  # 0
    learned_at([False, False])                      # None: never learned (wrong at the last)
    forgotten([True, False, True, False])           # 2: right -> wrong twice
    cell_code(True, 0.42)                           # "3": right, margin 0.3 to 1.0
    grid = build_grid(reports, runs)                # page["grid"] (None below two stepped runs)
    sort_rows(grid, "learned")                      # row numbers, in the order the page shows them

The outcomes of one item are its right (True) / wrong (False) per column, in step order; None where
that checkpoint did not score the item. A None is skipped by both measures: it neither breaks nor
starts a stretch of right answers.

- **learned at**: the first column from which every later checkpoint that scored the item got it
  right, so that it is first learned there and stays learned to the last checkpoint; None (never)
  when the last checkpoint that scored it got it wrong, or none did.
- **forgotten**: how many times the item goes from right to wrong between one scoring checkpoint
  and the next. An item right at some step and wrong at the last has forgotten >= 1; one that is
  forgotten and learned again counts each time it was lost.

Sorting by learned at puts the earliest learned first and the never learned last; sorting by
forgotten puts the most often forgotten first; ties keep the data file's order. The page's script
sorts by the same rules (tests/test_browser.py holds it to `sort_rows`).

`build_grid` takes the page's run blocks (`explore._run_block`: `correct` and `margin` per row) and
the reports they came from. A cell is one character, so a row of 100 checkpoints is a 100-character
string: "0" not scored, "1"-"4" right with a margin below 0.1, 0.1 to 0.3, 0.3 to 1.0, 1.0 and up
(MARGIN_EDGES; the margin of the chosen continuation over the runner-up, in mean log-prob), "5"-"8"
wrong with the same margins, "9" scored without per-choice numbers (no margin).
"""

from __future__ import annotations

from collections.abc import Sequence

MARGIN_EDGES = (0.1, 0.3, 1.0)  # margin bands of the cells' shades: < 0.1, 0.1-0.3, 0.3-1.0, >= 1.0
NOT_SCORED, NO_MARGIN = "0", "9"
SORTS = ("learned", "forgotten")


def learned_at(outcomes: Sequence[bool | None]) -> int | None:
    """The column from which the item is right at every later scoring checkpoint; None if never."""
    start = None
    for k, ok in enumerate(outcomes):
        if ok is None:
            continue
        if ok:
            if start is None:
                start = k
        else:
            start = None
    return start


def forgotten(outcomes: Sequence[bool | None]) -> int:
    """How many times the item goes from right to wrong between consecutive scoring checkpoints."""
    count, before = 0, None
    for ok in outcomes:
        if ok is None:
            continue
        if before and not ok:
            count += 1
        before = ok
    return count


def cell_code(correct: bool | None, margin: float | None) -> str:
    """One cell as one character (see the module docstring)."""
    if correct is None:
        return NOT_SCORED
    if margin is None:
        return NO_MARGIN
    band = sum(margin >= edge for edge in MARGIN_EDGES)  # 0..3
    return str((1 if correct else 5) + band)


def stepped_runs(reports: Sequence[dict]) -> tuple[list[int], list[int]]:
    """(the runs with a training step, in step order (then tokens seen, then their place), the runs
    without one), as indices into `reports`."""
    stepped = [k for k, r in enumerate(reports) if r.get("training_step") is not None]
    stepped.sort(key=lambda k: (reports[k]["training_step"], reports[k].get("tokens_seen") or 0, k))
    return stepped, [k for k, r in enumerate(reports) if r.get("training_step") is None]


def build_grid(reports: Sequence[dict], runs: Sequence[dict]) -> dict | None:
    """The grid's data for the page: None unless at least two runs have a training step.

    `cols` are the runs of the columns (indices into `runs`) and `steps` their steps; `cells` one
    string per row (cell_code per column); `learned` the column each row is learned at (None:
    never) and `forgotten` its count; `left_out` the runs without a step; `groups` the groups the
    columns' runs belong to (one for a training run)."""
    cols, left_out = stepped_runs(reports)
    if len(cols) < 2:
        return None
    n_rows = len(runs[0]["correct"])
    cells, learned, forgot = [], [], []
    for row in range(n_rows):
        outcomes = [runs[k]["correct"][row] for k in cols]
        cells.append("".join(cell_code(runs[k]["correct"][row], runs[k]["margin"][row]) for k in cols))
        learned.append(learned_at(outcomes))
        forgot.append(forgotten(outcomes))
    return {
        "cols": cols,
        "steps": [reports[k]["training_step"] for k in cols],
        "cells": cells,
        "learned": learned,
        "forgotten": forgot,
        "left_out": left_out,
        "groups": sorted({str(reports[k].get("group")) for k in cols if reports[k].get("group") is not None}),
        "margin_edges": list(MARGIN_EDGES),
    }


def sort_rows(grid: dict, key: str, rows: Sequence[int] | None = None) -> list[int]:
    """`rows` (default: every row, in file order) in the order of `key`: "learned" (earliest first,
    never last) or "forgotten" (most first); ties keep file order."""
    rows = range(len(grid["cells"])) if rows is None else rows
    if key == "learned":
        never = len(grid["steps"])
        return sorted(rows, key=lambda r: (never if grid["learned"][r] is None else grid["learned"][r], r))
    if key == "forgotten":
        return sorted(rows, key=lambda r: (-grid["forgotten"][r], r))
    raise ValueError(f"sort_rows: key is one of {', '.join(SORTS)}, not {key!r}")
