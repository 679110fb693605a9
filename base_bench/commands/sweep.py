"""`base-bench sweep`: score many models (every checkpoint of a training run, baselines) as one group.

    base-bench sweep 'ckpt/checkpoint-*' --out-dir sweeps/pretrain-7 --limit-per-category 4
    base-bench sweep org/model@step1000 org/model@step2000 base.gguf --out-dir sweeps/mix [run flags]
    base-bench sweep --models-file models.txt --out-dir DIR --engine slurm --workers 8 --slurm-partition gpu
    base-bench sweep 'ckpt/step-*' --out-dir DIR --watch --until-step 100000 --tokens-per-step 2097152
    base-bench sweep status DIR          # a table of members; exit 0 when all are done, 3 when not
    base-bench sweep retry DIR --failed  # the failed members wait again (run the sweep again to score them)

Each member is an ordinary run (the run flags apply to all) in its own folder DIR/<name>, with the
four run files, written to the store (default DIR/results.db; --store URL or $BASE_BENCH_STORE for
another, PostgreSQL for a cluster) as one group (--group, default DIR's name). After each member
DIR/trajectory.{png,md,html} and DIR/leaderboard.{md,html} are rendered again from the store. The
queue lives in the store (base_bench/sweep/queue.py); workers run on this machine (--engine local,
--workers N), as a Slurm job array through submitit (--engine slurm) or as Ray tasks (--engine ray),
all running one worker loop (base_bench/sweep/worker.py). Exit codes: 0 every member done; 2 a
user error; 3 members failed or left; 130/143 stopped by SIGINT/SIGTERM (what was being scored is
resumable: run the same command again).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import BaseBenchError, StoreError, UsageError
from .cliargs import Parser, add_store_flag, data_choice, fail, key_values, positive_float, positive_int, printable

EXIT_INCOMPLETE = 3
# the run flags a sweep sets per member (or does not take): every other run flag applies to every member
PER_MEMBER = ("model", "out_dir", "resume", "store", "group", "step", "tokens", "tag", "help", "version")
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "fuse.sshfs")
PAGES = "base_bench.commands.sweep:render_pages"


def _run_actions() -> list[argparse.Action]:
    from .runflags import build_parser as run_parser

    return [a for a in run_parser()._actions if a.dest not in PER_MEMBER]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench sweep",
        allow_abbrev=False,  # --model is refused, not read as --models-file
        description="Score many models as one group: each an ordinary run in its own folder under --out-dir,\n"
        "queued in the results store, run by workers here, on Slurm or on Ray; resumable.\n"
        "Also: base-bench sweep status DIR | base-bench sweep retry DIR --failed",
        epilog="Every flag of an ordinary run (base-bench --help) applies to every member, except --model,\n"
        "--out-dir, --resume, --step and --tokens, which the sweep sets for each.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "models",
        nargs="*",
        metavar="MODEL",
        help="a Hub id (org/name, or org/name@REVISION), a model folder, a .gguf file, an Ollama model "
        "(ollama:NAME[:TAG]), or a quoted glob ('ckpt/checkpoint-*')",
    )
    p.add_argument("--models-file", metavar="FILE", help="more MODELs, one a line (# starts a comment)")
    p.add_argument("--out-dir", required=True, metavar="DIR", help="the sweep's folder: a folder per member, the pages")
    add_store_flag(p, "the results store holding the queue and the runs (default: DIR/results.db)")
    p.add_argument("--group", metavar="G", help="the group the members form in the store (default: DIR's name)")
    p.add_argument("--tag", action="append", metavar="TAG", help="a tag for every member's run (repeatable)")
    p.add_argument(
        "--tokens-per-step", type=positive_int("--tokens-per-step"), metavar="N", help="tokens seen = step * N"
    )
    p.add_argument("--engine", default="local", choices=["local", "slurm", "ray"], help="where the workers run")
    p.add_argument(
        "--workers",
        type=positive_int("--workers"),
        default=1,
        metavar="N",
        help="how many workers (local processes, Slurm array tasks or Ray tasks; default 1)",
    )
    p.add_argument(
        "--lease-timeout",
        type=positive_float("--lease-timeout"),
        default=120.0,
        metavar="S",
        help="a member whose worker sent no heartbeat for S seconds is taken over by another (default 120)",
    )
    p.add_argument(
        "--max-attempts",
        type=positive_int("--max-attempts"),
        default=3,
        metavar="N",
        help="tries per member before it is marked failed (default 3)",
    )
    p.add_argument("--watch", action="store_true", help="keep looking for new members matching the globs")
    p.add_argument(
        "--settle",
        type=positive_float("--settle"),
        default=60.0,
        metavar="S",
        help="with --watch: a checkpoint without trainer_state.json is complete once unchanged for S s (default 60)",
    )
    p.add_argument(
        "--until-step",
        type=positive_int("--until-step", 0),
        metavar="N",
        help="with --watch: stop once a member at step N or later is done and none below it is left",
    )
    p.add_argument("--detach", action="store_true", help="with --engine slurm: return once the workers are submitted")
    p.add_argument("--slurm-partition", metavar="P", help="the partition of the workers' job array")
    p.add_argument("--slurm-gpus-per-worker", type=positive_int("--slurm-gpus-per-worker", 0), metavar="N")
    p.add_argument("--slurm-time", metavar="T", help="time limit per worker: minutes, or [D-]HH:MM[:SS]")
    p.add_argument("--slurm-mem", metavar="SIZE", help="memory per worker, e.g. 32G")
    p.add_argument(
        "--ray-address", metavar="ADDR", help="the Ray cluster (default auto: this machine's, else a local Ray)"
    )
    p.add_argument("--ray-gpus-per-worker", type=positive_float("--ray-gpus-per-worker"), metavar="N")
    group = p.add_argument_group("run flags (as for one run; see base-bench --help)")
    for action in _run_actions():
        group._add_action(action)
    return p


def _minutes(text: str) -> int:
    """--slurm-time as minutes: `90`, `1:30:00`, `2-00:00:00`."""
    try:
        if text.isdigit():
            return int(text)
        days, _, rest = text.rpartition("-")
        parts = [int(x) for x in rest.split(":")]
        if len(parts) == 2:
            parts.append(0)
        h, m, s = parts
        return int(days or 0) * 1440 + h * 60 + m + (1 if s else 0)
    except ValueError:
        raise UsageError(f"--slurm-time {text}: give minutes, or [D-]HH:MM[:SS]") from None


def _gigabytes(text: str) -> int:
    t = text.strip().upper().rstrip("B")
    scale = {"G": 1, "M": 1 / 1024, "T": 1024}.get(t[-1:], None)
    try:
        return max(1, round(float(t[:-1] if scale else t) * (scale or 1)))
    except ValueError:
        raise UsageError(f"--slurm-mem {text}: give a size such as 32G") from None


def run_flags(args) -> dict:
    """The run flags every member takes, as JSON values (the queue stores them), with the values a
    run reads from them (loading.run's model_args, vllm_args, data_spec), paths made absolute: the
    workers may start elsewhere."""
    from ..items.datasource import BUNDLED, HUB

    flags = {a.dest: getattr(args, a.dest) for a in _run_actions() if a.dest != argparse.SUPPRESS}
    for name in ("tokenizer", "peft", "offload_folder", "data", "local_data"):
        value = flags.get(name)
        if isinstance(value, str) and value not in (BUNDLED, HUB) and Path(value).expanduser().exists():
            flags[name] = str(Path(value).expanduser().absolute())
    flags["model_args"] = key_values(args.model_arg, "--model-arg")
    flags["vllm_args"] = key_values(args.vllm_arg, "--vllm-arg")
    data = data_choice(argparse.Namespace(data=flags["data"], local_data=flags["local_data"]), HUB)
    flags["data_spec"] = data if isinstance(data, str) else str(data.expanduser().absolute())
    flags["tag"] = args.tag
    json.dumps(flags)
    return flags


def network_fs(path: Path) -> str | None:
    """The type of network file system `path` is on (nfs, lustre...), or None."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    where = str(path.resolve())
    best = ("", None)
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3 and (where == parts[1] or where.startswith(parts[1].rstrip("/") + "/")):
            if len(parts[1]) >= len(best[0]):
                best = (parts[1], parts[2])
    return best[1] if best[1] in NETWORK_FS else None


def _check(args, flags: dict) -> None:
    if args.revision and any("@" in m for m in args.models):
        raise UsageError("give a revision either with --revision or as MODEL@REVISION, not both")
    if not args.watch and (args.until_step is not None):
        raise UsageError("--until-step goes with --watch")
    if args.detach and args.engine != "slurm":
        raise UsageError("--detach is for --engine slurm (local workers and Ray tasks end with the sweep command)")
    for flag in ("slurm_partition", "slurm_gpus_per_worker", "slurm_time", "slurm_mem"):
        if getattr(args, flag) is not None and args.engine != "slurm":
            raise UsageError(f"--{flag.replace('_', '-')} is for --engine slurm")
    for flag in ("ray_address", "ray_gpus_per_worker"):
        if getattr(args, flag) is not None and args.engine != "ray":
            raise UsageError(f"--{flag.replace('_', '-')} is for --engine ray")
    url = flags.get("base_url")
    if url:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        if parts.password or parts.query:
            raise UsageError(
                "a sweep keeps its run flags in the store: give the server's key with --api-key-env VAR, "
                "not in --base-url"
            )


def _options(args, out_dir: Path) -> dict:
    opts: dict = {"log_dir": str(out_dir / ".sweep" / "logs")}
    if args.engine == "local":
        device = args.device
        if args.workers > 1 and device == "cuda":
            opts["devices"] = [f"cuda:{k}" for k in range(args.workers)]
    elif args.engine == "slurm":
        opts.update(
            folder=str(out_dir / ".sweep" / "slurm" / "%j"),
            partition=args.slurm_partition,
            gpus_per_worker=args.slurm_gpus_per_worker,
            time_min=_minutes(args.slurm_time) if args.slurm_time else None,
            mem_gb=_gigabytes(args.slurm_mem) if args.slurm_mem else None,
            cpus_per_worker=args.threads,
        )
    else:
        opts.update(address=args.ray_address, gpus_per_worker=args.ray_gpus_per_worker)
    return opts


def _store_of(given: str | None, out_dir: Path) -> str:
    from ..store import store_url

    return store_url(given) or f"sqlite:///{out_dir.resolve() / 'results.db'}"


def sweep(argv: list[str]) -> int:
    from ..evaluation import check_store_url
    from ..sweep.coordinator import Plan, run
    from ..sweep.worker import without_password

    args = build_parser().parse_args(argv)
    try:
        out_dir = Path(args.out_dir).expanduser().absolute()
        if out_dir.exists() and not out_dir.is_dir():
            raise UsageError(f"--out-dir {args.out_dir} is a file, not a folder")
        flags = run_flags(args)
        _check(args, flags)
        if flags["data_spec"] not in ("bundled", "hub"):  # a data file: checked once, before any worker starts
            from ..items.datasource import open_data

            open_data(Path(flags["data_spec"]))
        url = check_store_url(_store_of(args.store, out_dir))
        out_dir.mkdir(parents=True, exist_ok=True)
        group = args.group or out_dir.name
        from ..results.labels import Labels

        Labels.make(group, None, None, args.tag)  # the group and tags checked as a run's are
        if url.startswith("sqlite") and (args.engine != "local" or network_fs(out_dir)):
            fs = network_fs(out_dir)
            print(
                "base-bench sweep: note: a SQLite store is for workers on one machine"
                + (f" ({out_dir} is on {fs})" if fs else "")
                + "; for several nodes give --store postgresql://...",
                file=sys.stderr,
            )
        _, password = without_password(url)
        plan = Plan(
            out_dir=out_dir,
            group=group,
            store=url,
            flags=flags,
            models=args.models,
            models_file=args.models_file,
            tokens_per_step=args.tokens_per_step,
            engine=args.engine,
            workers=args.workers,
            lease_timeout=args.lease_timeout,
            max_attempts=args.max_attempts,
            watch=args.watch,
            settle=args.settle,
            until_step=args.until_step,
            detach=args.detach,
            options=_options(args, out_dir),
            pages=PAGES,
        )
        if not args.watch and not args.models and not args.models_file:
            raise UsageError("give the models to score: MODEL arguments (paths, globs, Hub ids) or --models-file FILE")
        return run(plan, password, say=lambda line: print(printable(line), flush=True))
    except BaseBenchError as exc:
        return fail(exc)


def render_pages(url: str, group: str, out_dir: str) -> None:
    """DIR/leaderboard.{md,html} (+ plots) and, where runs have steps, DIR/trajectory.{png,md,html},
    from the group's runs in the store. Called by the workers after each member."""
    from functools import partial

    from ..results import leaderboard, trajectory
    from ..store import open_store, summaries
    from ..store.query import reports_of

    out = Path(out_dir)
    db = open_store(url, create=False)
    try:
        runs = summaries(db, group=group)
        if not runs:
            return
        leaderboard.write_pages(runs, out, full_reports=partial(reports_of, db))
        stepped = [r for r in runs if r.get("training_step") is not None]
        if stepped:
            reports = sorted(reports_of(db, stepped), key=lambda r: r["training_step"])
            trajectory.write_pages(reports, "training_step", out)
    finally:
        db.dispose()


# ---------------------------------------------------------------- status and retry


def _target_parser(prog: str, what: str) -> Parser:
    p = Parser(prog=prog, description=what)
    p.add_argument("out_dir", nargs="?", metavar="DIR", help="the sweep's --out-dir (its store is DIR/results.db)")
    add_store_flag(p, "the store holding the sweep (default: DIR/results.db)")
    p.add_argument("--group", metavar="G", help="the sweep's group (default: the one sweep of DIR in the store)")
    return p


def _open_target(args):
    """(the store, the group) that `status`/`retry` name."""
    from ..store import open_store, store_url
    from ..sweep import queue

    if args.out_dir is None and (args.store is None or args.group is None):
        raise UsageError("give the sweep's DIR, or --store URL --group G")
    out_dir = Path(args.out_dir).expanduser().absolute() if args.out_dir else None
    url = store_url(args.store) or (f"sqlite:///{out_dir / 'results.db'}" if out_dir else None)
    db = open_store(url, create=False)
    try:
        group = args.group
        if group is None:
            groups = queue.groups_in(db, str(out_dir))
            if not groups:
                raise StoreError(f"{db.shown}: no sweep of {out_dir} in it")
            if len(groups) > 1:
                raise UsageError(f"{out_dir} holds the sweeps {', '.join(groups)}: give --group")
            group = groups[0]
        if queue.sweep_row(db, group) is None:
            raise StoreError(f"{db.shown}: no sweep with group {group!r}")
    except BaseException:
        db.dispose()
        raise
    return db, group


def _ci(row: dict) -> str:
    if row.get("elo") is None:
        return ""
    lo, hi = row.get("elo_lo"), row.get("elo_hi")
    return f"{row['elo']:.0f}" + (f" [{lo:.0f}, {hi:.0f}]" if lo is not None and hi is not None else "")


def status_rows(rows: list[dict]) -> list[list[str]]:
    out = []
    for r in rows:
        state = r["state"] + (f" on {r['worker']}" if r["state"] == "running" and r.get("worker") else "")
        said = r.get("note") or (f"{r['error_class']}: {r['error']}" if r.get("error") else "")
        out.append([r["name"], state, str(r["attempts"]), "" if r["step"] is None else str(r["step"]), _ci(r), said])
    return out


def status(argv: list[str]) -> int:
    from ..sweep import queue

    p = _target_parser("base-bench sweep status", "The members of a sweep: state, attempts, step, Elo, last error.")
    p.add_argument("--json", action="store_true", help="one JSON object per member instead of the table")
    args = p.parse_args(argv)
    try:
        db, group = _open_target(args)
        try:
            rows = queue.table(db, group)
            n = queue.counts(db, group)
            watching = queue.sweep_row(db, group).watching
        finally:
            db.dispose()
    except BaseBenchError as exc:
        return fail(exc)
    if args.json:
        for r in rows:
            print(json.dumps({k: v for k, v in r.items() if k not in ("host", "pid", "pid_started")}, sort_keys=True))
    else:
        head = ["member", "state", "tries", "step", "Elo [95% CI]", "note"]
        body = status_rows(rows)
        widths = [max(len(x) for x in col) for col in zip(head, *body)]
        for line in [head, *body]:
            print(printable("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip()))
        left = n["waiting"] + n["running"]
        print(
            f"{group}: {n['done']} done, {n['running']} running, {n['waiting']} waiting, {n['failed']} failed"
            + (f", {n['skipped']} skipped" if n["skipped"] else "")
            + (" (watching for more)" if watching else "")
            + ("" if left or n["failed"] else "; all done")
        )
    return 0 if n["waiting"] + n["running"] + n["failed"] == 0 and not watching else EXIT_INCOMPLETE


def retry(argv: list[str]) -> int:
    from ..sweep import queue

    p = _target_parser("base-bench sweep retry", "Put a sweep's failed members back in its queue.")
    p.add_argument("--failed", action="store_true", required=True, help="the failed members (required)")
    args = p.parse_args(argv)
    try:
        db, group = _open_target(args)
        try:
            n = queue.retry(db, group)
        finally:
            db.dispose()
    except BaseBenchError as exc:
        return fail(exc)
    print(
        f"{n} failed member{'s' if n != 1 else ''} of {group} {'wait' if n != 1 else 'waits'} again; run the sweep again to score them"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "status":
        return status(argv[1:])
    if argv and argv[0] == "retry":
        return retry(argv[1:])
    return sweep(argv)


if __name__ == "__main__":
    sys.exit(main())
