"""Several processes, one run: the torch.distributed side of `evaluate`.

    d = Ranks.current()                      # rank 0 of 1 when no process group is initialised
    with d.together(): ...                   # an error in the block, on any rank, is raised on every rank
    d.check_same({"data SHA-256": sha, ...}) # refuse, on every rank, if the ranks disagree
    share(batches, d.world)[d.rank]          # this rank's batches, balanced by packed tokens
    everyone = d.all_gather(obj)             # every rank's object, in rank order
    ranks = init_from_env("cpu", timeout_s)  # the CLI under torchrun: init the process group

`evaluate` calls these on every run; with one process each is a no-op or the identity, so a single
process and N ranks go through the same code. The collectives are torch.distributed's object
collectives over the process group the caller (torchrun, a training job) initialised, nccl or gloo
alike: nothing here opens a socket or starts a process of its own.

How the work is shared: the items still to score are sorted by packed length and cut into the same
batches one process would use; the batches are dealt to the ranks longest first, each to the rank
with the fewest packed tokens so far (tokens counted with padding, batch size times the longest
row). The ranks then work in rounds of a few batches and swap results after each round, so every
rank ends with every rank's results. In each round every rank calls the model equally often (a rank
with no batch left runs a dummy batch whose result is dropped), because under FSDP (and DDP) every
forward is a collective that all ranks must join.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..errors import BaseBenchError, DistributedError
from .packing import Batching, batch_cost


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1

    @classmethod
    def current(cls) -> Ranks:
        """The ranks of the process group torch.distributed holds, else rank 0 of 1. A process that
        never imported torch.distributed has no group, so a llama.cpp run never imports torch here."""
        if "torch.distributed" not in sys.modules:
            return cls()
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size())
        return cls()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_gather(self, obj: Any) -> list:
        """[rank 0's obj, rank 1's obj, ...] on every rank."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out: list = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if self.world == 1:
            return obj
        import torch.distributed as dist

        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def agree(self, flag: bool) -> bool:
        """True on every rank only if `flag` is True on every rank."""
        return all(self.all_gather(bool(flag)))

    def raise_if_any(self, error: BaseException | None) -> None:
        """Raise on every rank if any rank has an error: its own, or else the first failing rank's,
        re-raised as the same base-bench class. `shared` is set on the exception of every rank but
        rank 0, so that only rank 0 prints it."""
        if self.world == 1:
            if error is not None:
                raise error
            return
        errors = self.all_gather(None if error is None else (type(error).__name__, str(error)))
        failed = [(r, e) for r, e in enumerate(errors) if e is not None]
        if not failed:
            return
        if error is not None:
            error.shared = not self.is_main
            raise error
        rank, (name, message) = failed[0]
        exc = error_class(name)(f"rank {rank}: {message}" if rank else message)
        exc.shared = not self.is_main
        raise exc

    @contextmanager
    def together(self):
        """Run the block on every rank; a base-bench error in it, on any rank, is raised on every
        rank when the block ends (see raise_if_any). Every rank must enter the block."""
        error = None
        try:
            yield
        except BaseBenchError as exc:
            error = exc
        self.raise_if_any(error)

    def check_same(self, values: dict[str, Any]) -> None:
        """DistributedError on every rank if any value differs between ranks (names say which)."""
        if self.world == 1:
            return
        gathered = self.all_gather(values)
        for key in values:
            seen = [g.get(key) for g in gathered]
            if any(v != seen[0] for v in seen):
                shown = ", ".join(f"rank {r} has {_short(v)}" for r, v in enumerate(seen))
                exc = DistributedError(
                    f"the ranks disagree on the {key} ({shown}); every rank must score the same "
                    "data with the same model and settings"
                )
                exc.shared = not self.is_main
                raise exc


def _short(v) -> str:
    s = str(v)
    return s[:12] + "…" if len(s) > 16 else s


def error_class(name: str) -> type:
    """The base-bench exception class called `name` (DistributedError if there is none), to raise
    on this rank an error another rank reported by name."""
    from .. import errors

    cls = getattr(errors, name, None)
    return cls if isinstance(cls, type) and issubclass(cls, BaseBenchError) else DistributedError


def make_batches(ordered: Sequence, batch_size: int) -> list[list]:
    """Consecutive batches of a length-sorted list, as one process cuts them at `batch_size` items."""
    return Batching(items=batch_size).cut(ordered, 0)


def share(batches: Sequence[list], world: int, cost: Callable[[Sequence], int] = batch_cost) -> list[list[list]]:
    """Deal batches to `world` ranks, largest `cost` first (the positions a batch feeds, padding
    included), each to the least-loaded rank (ties to the lowest rank); each rank keeps its batches
    in the given order."""
    load = [0] * world
    owner = [0] * len(batches)
    costs = [cost(b) for b in batches]
    for i in sorted(range(len(batches)), key=lambda i: -costs[i]):
        r = min(range(world), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += costs[i]
    return [[b for b, o in zip(batches, owner) if o == r] for r in range(world)]


def rank_from_env() -> int:
    """This process's RANK as torchrun sets it (0 outside torchrun, or when it is not a number)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def world_from_env() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise DistributedError(f"WORLD_SIZE is {os.environ['WORLD_SIZE']!r}, not a whole number") from None


def init_from_env(device_type: str, timeout_s: float) -> tuple[Ranks, bool]:
    """Initialise the process group from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT, LOCAL_RANK) when WORLD_SIZE > 1 and no group exists yet. Returns the ranks and
    whether this call initialised the group (so the caller destroys it at the end)."""
    import torch
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return Ranks.current(), False
    world = world_from_env()
    if world <= 1:
        return Ranks(), False
    missing = [v for v in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
    if missing:
        err = DistributedError(
            f"WORLD_SIZE is {world} but {', '.join(missing)} is not set: start the ranks with "
            "torchrun (which sets them), or unset WORLD_SIZE for one process"
        )
        err.local = True
        raise err
    backend = "nccl" if device_type == "cuda" else "gloo"
    if device_type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    try:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    except (RuntimeError, ValueError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        err = DistributedError(
            f"rank {os.environ['RANK']} of {world} could not join the rendezvous at {where} "
            f"within {timeout_s:g} s ({first[:200]}); are all ranks started, and is the address "
            "reachable?"
        )
        err.local = True  # no rank can speak for the others here: each prints its own line
        raise err from None
    return Ranks.current(), True


@contextmanager
def signals_held():
    """SIGINT and SIGTERM are recorded, not acted on, in the block (on the main thread; elsewhere
    Python delivers no signal to handlers anyway). Yields the list of those that arrived."""
    got: list[int] = []
    old = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM):
            old[s] = signal.signal(s, lambda signum, frame: got.append(signum))
    except ValueError:  # not the main thread
        pass
    try:
        yield got
    finally:
        for s, handler in old.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def leave(failed: bool, wait_s: float = 30) -> list[int]:
    """Destroy the process group this process initialised, with SIGINT and SIGTERM held until it is
    gone; returns the signals that arrived meanwhile (the caller acts on them).

    After an error the ranks first wait for each other (at most `wait_s` on gloo), so that no rank
    tears its connections down while another is still closing its own. The signals are held
    because torchrun sends SIGTERM to the ranks still running as soon as one rank has exited: a
    handler that raised in the middle of the barrier or of destroy_process_group left the group
    half torn down, and gloo's objects were then freed while the interpreter shut down, which
    could abort the rank (SIGABRT) instead of letting it exit 2. The group is destroyed even when
    the barrier fails (a rank is gone), so nothing of it is left for the interpreter's shutdown."""
    import torch.distributed as dist

    with signals_held() as got:
        if failed:
            try:
                if dist.get_backend() == "gloo":
                    dist.monitored_barrier(timeout=timedelta(seconds=wait_s))
                else:
                    dist.barrier()
            except Exception:  # noqa: BLE001 - a rank is gone; destroy without the handshake
                pass
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - after an error a peer may have closed first: the run's error stands
            if not failed:
                raise
    return got
