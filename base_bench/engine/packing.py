"""Several items in one row, and rows cut into forward passes: the pure arithmetic of batches.

    first_fit([120, 80, 60, 30], capacity=150)        # [[0, 3], [1, 2]]: rows of indices
    row_layout([120, 80, 60, 30], row_length=150)     # the rows a packed scorer builds for one batch
    fed_positions([120, 80, 60, 30], rows)            # rows × the longest row: what the model is fed
    Batching(items=8).cut(longest_first, row_length)  # passes of 8 items
    Batching(tokens=4096).cut(longest_first, 285)     # passes of at most 4,096 fed positions

A packed row holds whole items one after the other, each `context | cont0 | cont1 | ...` as
`Encoded.packed_length` counts it; a row is padded on the right to the longest row of its pass.
So a pass feeds rows × longest row positions, and the items hold the sum of their packed lengths;
the rest is padding.

Two ways to cut a run into passes (`Batching`):

* `items=N` (`--batch-size N`): N items per pass, taken in length order, longest first. Within the
  pass the items are put into rows by `row_layout`: first fit in that order, under the pass's
  longest item or under the run's row length, whichever feeds fewer positions. Never more rows, nor
  longer ones, than one item per row would need when the first is chosen.
* `tokens=N` (`--batch-tokens N`): all the items still to score are packed first-fit-decreasing
  into rows of at most `row_length` positions (the run's longest item, or N if that is smaller),
  and a pass takes consecutive rows while rows × its longest row stays within N. A pass holds at
  least one row, so an item longer than N is still scored, alone.

The packed scorer rebuilds a pass's rows from the items alone with `row_layout`: first fit, in the
order given, reproduces the rows of any rows-in-order subset of a first-fit-decreasing packing
under the same capacity (an item that did not fit an earlier row when it was placed does not fit
it later either, as rows only fill up), so a pass of `tokens=N` feeds what `Batching` counted, or
less when the pass's own longest item makes a cheaper layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def first_fit(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Rows of indices into `lengths`: each item, in the order given, goes into the first row that
    still has room for it, else into a new row. An item longer than `capacity` gets a row of its own."""
    rows: list[list[int]] = []
    used: list[int] = []
    for i, n in enumerate(lengths):
        for r, u in enumerate(used):
            if u + n <= capacity:
                rows[r].append(i)
                used[r] += n
                break
        else:
            rows.append([i])
            used.append(n)
    return rows


def fed_positions(lengths: Sequence[int], rows: Sequence[Sequence[int]]) -> int:
    """Positions a pass feeds the model: its rows, each padded to the longest."""
    return len(rows) * max((sum(lengths[i] for i in r) for r in rows), default=0)


def row_layout(lengths: Sequence[int], row_length: int | None = None) -> list[list[int]]:
    """The rows one pass is packed into. None: each item its own row. Otherwise first fit in the
    given order under the pass's longest item, or under `row_length`, whichever feeds fewer
    positions (the shorter rows on a tie)."""
    if row_length is None:
        return [[i] for i in range(len(lengths))]
    if not lengths:
        return []
    short = first_fit(lengths, max(lengths))
    long = first_fit(lengths, row_length)
    return long if fed_positions(lengths, long) < fed_positions(lengths, short) else short


def held_positions(batch: Sequence) -> int:
    """Positions the items of a pass hold: their packed lengths, no padding."""
    return sum(e.packed_length for e in batch)


def batch_cost(batch: Sequence, row_length: int | None = None) -> int:
    """Positions a pass of `Encoded` items feeds the packed scorer, padding included."""
    lengths = [e.packed_length for e in batch]
    return fed_positions(lengths, row_layout(lengths, row_length))


def length_key(e) -> tuple[int, str]:
    """The order batches are cut in: longest packed row first, ties by id."""
    return (-e.packed_length, e.id)


def longest_first(items: Sequence) -> list:
    """`items` in `length_key` order, so that each batch needs little padding."""
    return sorted(items, key=length_key)


def pack_rows(items: Sequence, capacity: int) -> list[list]:
    """First-fit-decreasing: the items, longest first, each into the first row with room."""
    ordered = longest_first(items)
    return [[ordered[i] for i in row] for row in first_fit([e.packed_length for e in ordered], capacity)]


def rows_into_passes(rows: Sequence[Sequence], budget: int) -> list[list]:
    """Consecutive rows, as many per pass as keep rows × the longest row within `budget` (at
    least one row a pass); each pass is its rows' items, row after row."""
    out: list[list] = []
    current: list = []
    count = widest = 0
    for row in rows:
        width = held_positions(row)
        if current and (count + 1) * max(widest, width) > budget:
            out.append(current)
            current, count, widest = [], 0, 0
        current += row
        count += 1
        widest = max(widest, width)
    if current:
        out.append(current)
    return out


@dataclass(frozen=True)
class Batching:
    """How a run is cut into forward passes: `items` per pass, or at most `tokens` fed positions
    per pass (exactly one of the two)."""

    items: int | None = None
    tokens: int | None = None

    def __post_init__(self):
        if (self.items is None) == (self.tokens is None):
            raise ValueError("Batching takes items or tokens, not both or neither")
        if (self.items if self.items is not None else self.tokens) < 1:
            raise ValueError("a batch holds at least one item or one position")

    def row_capacity(self, row_length: int) -> int:
        """The row length the packed scorer fills rows up to: the run's, or a smaller token budget."""
        return row_length if self.tokens is None else max(1, min(row_length, self.tokens))

    def cut(self, ordered: Sequence, row_length: int) -> list[list]:
        """The passes for `ordered` (longest first), each a list of its items in row order."""
        if self.items is not None:
            return [list(ordered[i : i + self.items]) for i in range(0, len(ordered), self.items)]
        return rows_into_passes(pack_rows(ordered, self.row_capacity(row_length)), self.tokens)

    def halved(self) -> Batching:
        """Half the limit, for the back-off after an out-of-memory error (never below 1)."""
        if self.items is not None:
            return Batching(items=max(1, self.items // 2))
        return Batching(tokens=max(1, self.tokens // 2))

    def describe(self) -> str:
        return f"batch size {self.items}" if self.items is not None else f"{self.tokens} tokens per pass"
