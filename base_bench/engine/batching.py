"""How many items go through the model at once: `--batch-size auto` and the back-off on out-of-memory.

    bs = largest_fitting(lambda n: fits(n), upper)     # search, given a probe that says whether n fits
    out = attempt(lambda: scorer(batch), device)       # None if the accelerator ran out of memory

On a GPU (cuda or mps), `auto` probes real batches of the longest items, so every later batch
fits too: it doubles the size until a probe runs out of memory (or reaches the number of items),
then bisects between the last size that fitted and the first that did not. During the run the
runner still halves the size if a batch runs out of memory.

On a CPU, memory is not the limit: a 2-core machine measured in bench/RESULTS.md scores fastest at
8 items per pass, because larger batches add padding and memory traffic without using the cores
any better. So `auto` on a CPU is CPU_AUTO.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

CPU_AUTO = 8
GPU_UPPER = 512  # the search never tries more items per pass than this


def is_oom(exc: BaseException) -> bool:
    """True for CUDA's OutOfMemoryError and the RuntimeErrors that mps and older torch raise instead
    (torch is asked only if it is loaded: an error from a backend without torch is not torch's)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


def empty_cache(device) -> None:
    """Hand cached blocks back after an out-of-memory error, so a smaller retry can fit (torch's
    caches: nothing to do when torch is not loaded)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
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
