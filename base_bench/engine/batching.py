"""How much goes through the model at once: `--batch-size auto` and the back-off on out-of-memory.

    plan = auto_batching(scorer, longest_first, row_length, device)  # a packing.Batching
    n = largest_fitting(lambda n: fits(n), upper)      # search, given a probe that says whether n fits
    out = attempt(lambda: scorer(batch), device)       # None if the accelerator ran out of memory

On a GPU (cuda or mps), `auto` searches the token budget: the items are packed first-fit-decreasing
into rows of the run's row length (engine/packing.py), and real passes of the first k rows, those
of the longest items and so the fullest, are tried: k doubles until a pass runs out of memory (or
holds every row), then is bisected between the last k that fitted and the first that did not. The
budget is then k rows times their longest row, and every later pass, cut to that budget, fits too.
During the run the runner still halves the budget if a pass runs out of memory.
`auto_batch_size` is the same search over a number of items (one row each).

On a CPU, memory is not the limit: a 2-core machine measured in bench/RESULTS.md scores fastest at
8 items per pass, because larger batches add padding and memory traffic without using the cores
any better. So `auto` on a CPU is CPU_AUTO.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .packing import Batching, pack_rows

T = TypeVar("T")

CPU_AUTO = 8
GPU_UPPER = 512  # the search never tries more rows (or items) per pass than this


def is_oom(exc: BaseException) -> bool:
    """True for CUDA's OutOfMemoryError and the RuntimeErrors that mps and older torch raise instead."""
    import torch

    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def empty_cache(device) -> None:
    """Hand cached blocks back after an out-of-memory error, so a smaller retry can fit."""
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


def attempt(fn: Callable[[], T], device) -> T | None:
    """`fn()`, or None when it ran out of accelerator memory (the cache is then emptied).

    Every other error propagates. torch.cuda.OutOfMemoryError is a RuntimeError, as are the
    out-of-memory errors of mps and older torch, so one except clause covers them all.
    """
    try:
        return fn()
    except RuntimeError as exc:
        if not is_oom(exc):
            raise
        empty_cache(device)
        return None


def largest_fitting(fits: Callable[[int], bool], upper: int) -> int:
    """The largest n in 1..upper for which `fits(n)` is True; 0 when not even 1 fits.

    `fits` must be monotone (if n fits, every smaller size fits). It is called O(log upper) times:
    doubling from 1, then bisection between the last success and the first failure.
    """
    if upper < 1 or not fits(1):
        return 0
    good, n = 1, 2
    while n <= upper and fits(n):
        good, n = n, n * 2
    if n > upper:
        if good == upper or fits(upper):
            return upper
        bad = upper
    else:
        bad = n
    while bad - good > 1:  # invariant: good fits, bad does not
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good


def auto_batch_size(
    score: Callable[[list], object], longest_first: list, device, agree: Callable[[bool], bool] = bool
) -> int:
    """`--batch-size auto`: CPU_AUTO on a CPU; on a GPU the largest batch of the longest items for
    which `score(batch)` does not run out of memory (0 when not even one item fits). Under several
    ranks `agree` makes each probe's verdict common, so every rank tries the same sizes."""
    if device.type not in ("cuda", "mps"):
        return CPU_AUTO
    return largest_fitting(
        lambda n: agree(attempt(lambda: score(longest_first[:n]), device) is not None),
        min(len(longest_first), GPU_UPPER),
    )


def auto_batch_tokens(
    score: Callable[[list], object], longest_first: list, row_length: int, device, agree: Callable[[bool], bool] = bool
) -> int:
    """The largest token budget that fits: passes of the first k rows of a first-fit-decreasing
    packing up to `row_length` are scored for the largest k that does not run out of memory, and the
    budget is those k rows times their longest row (0 when not even one row fits). The scorer must
    already pack rows up to `row_length` (packing.row_layout). Under several ranks `agree` makes each
    probe's verdict common."""
    rows = pack_rows(longest_first, row_length)
    k = largest_fitting(
        lambda n: agree(attempt(lambda: score([e for row in rows[:n] for e in row]), device) is not None),
        min(len(rows), GPU_UPPER),
    )
    return k * max((sum(e.packed_length for e in row) for row in rows[:k]), default=0)


def auto_batching(
    score: Callable[[list], object], longest_first: list, row_length: int, device, agree: Callable[[bool], bool] = bool
) -> Batching | None:
    """`--batch-size auto`: CPU_AUTO items per pass on a CPU; on a GPU the largest token budget
    that fits (`auto_batch_tokens`); None when not even one row fits."""
    if device.type not in ("cuda", "mps"):
        return Batching(items=CPU_AUTO)
    budget = auto_batch_tokens(score, longest_first, row_length, device, agree)
    return Batching(tokens=budget) if budget else None
