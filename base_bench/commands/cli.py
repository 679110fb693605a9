"""The command line: `python benchmark.py --model M ...` or `base-bench --model M ...`.

A thin shell over `evaluation.evaluate`: `main(argv)` parses flags, and `loading.run` checks the
data and the out-dir before any model is loaded, loads the model, and hands both to `evaluate`,
which scores what is not yet finished (saving each item as it completes) and writes the run files.
Then it prints the summary. Every expected failure (bad flag, bad data, missing model, a run that would be overwritten,
an out-dir in use by another process) ends with a one- or two-line message on stderr and a non-zero
exit code, never a traceback. Exit codes: 0 done; 2 a user error; 74 a run file could not be
written (disk full, I/O error); 75 the run finished and its files were written, but its row could
not be written to the --store (`base-bench store ingest OUT_DIR` adds it later); 130 SIGINT
(Ctrl-C) and 143 SIGTERM, which stop the run cleanly: the finished items stay saved, the out-dir
lock is released, and a line says how many are saved.

With --store URL (or $BASE_BENCH_STORE) the run's result is also written to that results store
(SQLite or PostgreSQL) once its files are; --group, --step, --tokens and --tag label the run, in
report.json and in the store. The store URL and the labels are checked before any model is loaded.
Subcommands (`compare`, `leaderboard`, `explore`, `rescore`, `trajectory`, `contamination`, `store`, `sweep`, `data`) are routed to their own modules.
The run's flags (`build_parser`) live in runflags.py, which `base-bench sweep` shares.
"""

from __future__ import annotations

import logging
import signal
import sys
from contextlib import contextmanager

from .. import loading
from ..engine.distributed import rank_from_env
from ..errors import BaseBenchError, StorageError, UsageError
from ..items.datasource import HUB
from ..loading import ENDING as _ENDING
from ..loading import Stopped, default_out_dir, resolve_out_dir, server_options  # noqa: F401 - imported from here too
from ..loading import check_peft as _check_peft  # noqa: F401 - imported from here too
from ..loading import rank_device as _rank_device  # noqa: F401 - imported from here too
from .cliargs import EXIT_STORAGE, EXIT_STORE, EXIT_USAGE, data_choice, fail, key_values
from .runflags import build_parser  # the run's flags (base-bench sweep takes them too); imported from here too

SUBCOMMANDS = (
    "compare",
    "leaderboard",
    "explore",
    "rescore",
    "trajectory",
    "contamination",
    "store",
    "sweep",
    "data",
)


def _read_flag(read):
    """What `read()` makes of a flag, or the UsageError it raises: loading.run raises that one where
    it reads the value, so that the errors of a run come in the order they always have."""
    try:
        return read()
    except UsageError as exc:
        return exc


def run(args) -> int:
    """Read the flags loading.run takes read (--model-arg, --vllm-arg, --data/--local-data); it checks
    the flags, names the data (the first line a run says), loads the model and scores it; then the
    report, by rank 0. A run whose row could not be written to the --store still has its files: the
    summary, then one error line, and EXIT_STORE."""
    from ..engine.runstore import check_platform

    check_platform()  # a run writes its folder: refused at once where one cannot be kept safe (Windows)
    args.model_args = _read_flag(lambda: key_values(args.model_arg, "--model-arg"))
    args.vllm_args = _read_flag(lambda: key_values(args.vllm_arg, "--vllm-arg"))
    args.data_spec = _read_flag(lambda: data_choice(args, HUB))
    scored = loading.run(args, on_scored=lambda scored: _say_scored(scored, getattr(args, "store_url", None)))
    return 0 if scored.store_error is None else EXIT_STORE


def _say_scored(scored: loading.Scored, url) -> None:
    """The summary, where the files went, and the store's row or the one line saying why it is
    missing; by rank 0 only (it speaks for the run)."""
    from ..redact import redact
    from ..results.report import summary_lines

    if not scored.main:
        return
    out_dir, failed = scored.out_dir, scored.store_error
    print(redact("\n".join(summary_lines(scored.report))))
    print(f"wrote {out_dir}/report.json and {out_dir}/predictions.md")
    if url is not None and failed is None:
        from ..store import run_key, shown_url

        print(redact(f"stored the run in {shown_url(url)} (key {run_key(scored.report)[:12]})"))
    if failed is not None and not getattr(failed, "shared", False):
        fail(failed, EXIT_STORE)


class _TqdmHandler(logging.Handler):
    """Notes from the library on stderr, written around the progress bar rather than through it."""

    def emit(self, record):
        from tqdm import tqdm

        from ..redact import redact

        tqdm.write(redact(self.format(record)), file=sys.stderr)


def _show_notes() -> None:
    """Notes on rank 0; the other ranks of a torchrun job print errors only (no notes, no bars)."""
    logger = logging.getLogger("base_bench")
    if not any(isinstance(h, _TqdmHandler) for h in logger.handlers):
        logger.addHandler(_TqdmHandler())
    logger.setLevel(logging.INFO if rank_from_env() == 0 else logging.ERROR)
    logger.propagate = False
    if rank_from_env() != 0:
        from huggingface_hub.utils import disable_progress_bars
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        disable_progress_bars()


@contextmanager
def _stop_on_signals():
    """SIGINT and SIGTERM raise Stopped in the block; a second one ends the process at once."""

    def stop(signum, frame):
        for s in old:
            signal.signal(s, signal.SIG_DFL)
        raise Stopped(signum)

    old = {}
    try:
        for s in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(s) is not signal.SIG_IGN:  # nohup and background jobs ignore SIGINT: keep that
                old[s] = signal.signal(s, stop)
    except ValueError:  # not the main thread, where Python cannot catch signals
        pass
    try:
        yield
    finally:
        for s, handler in old.items():
            if _ENDING.is_set():  # torchrun's SIGTERM to a rank leaving on an error: exit with the error's code
                signal.signal(s, signal.SIG_IGN)
            else:
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def _stopped_line(signum: int, args) -> str:
    what = "interrupted by SIGINT" if signum == signal.SIGINT else f"terminated by {signal.Signals(signum).name}"
    if args is None:
        return what
    from ..engine.runstore import RunStore

    out_dir = resolve_out_dir(args)
    store = RunStore(out_dir)
    try:
        n = len(store.load_partial(repair=False))
    except (BaseBenchError, OSError):
        return f"{what}; the finished items are saved in {out_dir}; continue with --resume"
    if n == 0 and not store.holds_run():
        return f"{what} before the run started; nothing was written to {out_dir}"
    return f"{what}; {n} finished item{' is' if n == 1 else 's are'} saved in {out_dir}; continue with --resume"


def _error_exit(exc: BaseBenchError) -> int:
    code = EXIT_STORAGE if isinstance(exc, StorageError) else EXIT_USAGE
    if getattr(exc, "shared", False) or (rank_from_env() != 0 and not getattr(exc, "local", False)):
        return code  # the same error on every rank: rank 0 says it once
    return fail(exc, code)


def _register_env_secrets() -> None:
    """HF_TOKEN (and its older name) are secrets of every run: never printed or written."""
    import os

    from ..redact import register

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        register(os.environ.get(name))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        from importlib import import_module

        return import_module(f".{argv[0]}", __package__).main(argv[1:])
    args = None
    _ENDING.clear()
    _register_env_secrets()
    try:
        if argv and argv[0] == "run":
            argv = argv[1:]
        args = build_parser().parse_args(argv)
        _show_notes()
        with _stop_on_signals():
            return run(args)
    except BaseBenchError as exc:
        return _error_exit(exc)
    except (Stopped, KeyboardInterrupt) as exc:
        if isinstance(exc.__context__, BaseBenchError):
            # The run was already ending on an error (torchrun, for one, sends SIGTERM to the ranks
            # still shutting down once one has exited): say that error, not the signal.
            return _error_exit(exc.__context__)
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        if rank_from_env() == 0:  # torchrun passes the signal to every rank; rank 0 speaks for them
            print(f"base-bench: {_stopped_line(signum, args)}", file=sys.stderr)
        return 128 + signum
