"""From the run flags to a loaded model and a scored run: what `base-bench --model M ...` does once
its flags are parsed, shared by the command line (commands/cli.py) and any process that scores
many models one after another.

    from base_bench import loading
    args = build_parser().parse_args(["--model", "ckpt/step-1000", "--out-dir", "runs/s1000"])  # commands/cli.py
    args.model_args = {}        # --model-arg as a dict (the command line reads it with cliargs.key_values)
    args.vllm_args = {}         # --vllm-arg as a dict
    args.data_spec = "hub"      # --data/--local-data as open_data takes it: "bundled", "hub" or a Path
    scored = loading.run(args)  # check the flags, load the model, score it: a Scored
    scored = loading.run(args, speak=False, on_scored=print)   # no progress bar; a call before the model goes
    scored.report, scored.out_dir, scored.store_error   # report.json's dict; the row the --store lacks
    loading.loads(), loading.tokenizer_loads()   # models and tokenizers this process has loaded
    loading.prefetch("ckpt/step-2000")    # read the next model's weights into the page cache meanwhile

`run` makes every check the command line makes, in the same order and with the same messages, and
raises a BaseBenchError subclass for what it refuses; it prints nothing (the command line prints the
summary). Everything that can refuse a run (flags, data, model, out-dir, --resume signature) is
checked before the model is loaded. Under torchrun (transformers backend) the process group is
joined at the start and left at the end; a SIGINT or SIGTERM held while it was left is raised then,
as `Stopped`.

A process that scores many checkpoints of one training run loads the same tokenizer each time: the
transformers backend (and vLLM's) keeps the last few tokenizers it loaded, each under a hash of the
bytes of the model folder's files other than weights and training state (tokenizer.json,
tokenizer_config.json, vocab and merges, config.json...), and takes a kept one for a folder whose
files hash the same. The one state a run changes in a tokenizer, the truncation and padding a fast
tokenizer's call sets, is put back as it was read before a kept tokenizer is handed out, so that it
is in every way the tokenizer a fresh read gives (the same ids, the same fingerprint). A GGUF's
tokenizer is converted once per file and kept in the GGUF cache on disk (gguf_cache.py), read back
in under a second; it is not kept in memory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import signal
import stat
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from .backends.memory_check import mem_available
from .errors import BaseBenchError, StoreError
from .items import card

SERVER_FLAGS = ("base_url", "tokenizer", "api_key_env", "concurrency", "request_timeout", "max_retries")
VLLM_FLAGS = ("--tensor-parallel-size", "--pipeline-parallel-size", "--vllm-arg")
# flags that say where and how torch places the model: --device first (llama.cpp takes that one)
PLACEMENT_FLAGS = (
    "--device", "--dtype", "--device-map", "--max-memory", "--offload-folder", "--revision", "--trust-remote-code",
)  # fmt: skip

log = logging.getLogger("base_bench")


@dataclass(frozen=True)
class Scored:
    """A scored run. `report` is what evaluate() returned (report.json's dict); `store_error` is set
    when the run's files were written but its row could not be written to the --store (`base-bench
    store ingest OUT_DIR` adds it later). `main` is False on the torchrun ranks other than rank 0,
    which say nothing of the run (rank 0 speaks for them all)."""

    report: dict
    out_dir: Path
    store_error: StoreError | None = None
    main: bool = True


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived. Raised by the command line's signal handler, it unwinds the run as
    Ctrl-C does: the out-dir lock is released, and the finished items (each fsynced as it finished)
    stay. `run` raises it too, for a signal that arrived while a torchrun rank left its group."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# Set once a torchrun rank has left its process group on an error: from then on SIGINT and SIGTERM
# are ignored by the command line, so the rank exits with the error's code (2) rather than by
# torchrun's SIGTERM.
ENDING = threading.Event()

# ---------------------------------------------------------------- what this process has loaded

_counts = {"models": 0, "tokenizers": 0}
_count_lock = threading.Lock()


def loads() -> int:
    """How many models this process has loaded: one per model load of the transformers, llama.cpp or
    vLLM backend (a --backend server run loads none)."""
    return _counts["models"]


def tokenizer_loads() -> int:
    """How many tokenizers this process has read from files (a kept one taken again is not counted)."""
    return _counts["tokenizers"]


def _count(what: str) -> None:
    with _count_lock:
        _counts[what] += 1


TOKENIZERS_KEPT = 3  # the most tokenizers kept for reuse, the least recently used dropped first
TOKENIZER_BYTES_MAX = 512 << 20  # a folder whose hashed files are larger is not keyed (nothing kept)
# Files a tokenizer is never read from: weights, their indexes, training state, notes.
_NOT_TOKENIZER = re.compile(
    r".*\.(safetensors|bin|pt|pth|ckpt|h5|msgpack|gguf|onnx|npy|npz|pkl|md|py|index\.json)"
    r"|trainer_state\.json|generation_config\.json|latest|\..*",
    re.IGNORECASE,
)
_tokenizers: OrderedDict[tuple, tuple] = OrderedDict()  # (kind, key) -> (tokenizer, _call_state)


def tokenizer_key(folder, remember: bool = True) -> str | None:
    """A hash of the bytes of every file a tokenizer could be read from in the model folder `folder`
    (all its files but weights, their indexes, training state and notes, and those of
    additional_chat_templates/), with their names; None when there is nothing to key on (no
    such folder, an unreadable file, more than TOKENIZER_BYTES_MAX of them). The file digests are
    identity.file_digest's, remembered by each file's stat (in the cache folder too with `remember`)."""
    from .backends.identity import file_digest

    try:
        root = Path(folder)
        if not root.is_dir():
            return None
        files = [p for p in root.iterdir() if not _NOT_TOKENIZER.fullmatch(p.name)]
        templates = root / "additional_chat_templates"
        if templates.is_dir():
            files += [p for p in templates.iterdir() if not p.name.startswith(".")]
        files = sorted(p for p in files if p.is_file())
        if sum(p.stat().st_size for p in files) > TOKENIZER_BYTES_MAX:
            return None
        h = hashlib.sha256(b"base-bench tokenizer files 1\n")
        for p in files:
            h.update(f"{p.relative_to(root).as_posix()}:{file_digest(p, remember)}\n".encode())
        return h.hexdigest()
    except (OSError, ValueError):
        return None


def _tokenizer(kind: str, located, use_cache: bool, load):
    """The tokenizer `load()` reads for `located`, or the one kept from an earlier load of the same
    files (kind: "transformers" or "vllm", which load it each their own way). Nothing is kept for a
    GGUF (its tokenizer comes with its conversion) or with --trust-remote-code (code may read any
    file). A kept tokenizer is handed out as it was read: see `_call_state`."""
    key = None
    if located.kind != "gguf" and not located.kwargs.get("trust_remote_code"):
        key = tokenizer_key(located.where, remember=use_cache)
    kept = _tokenizers.get((kind, key)) if key is not None else None
    if kept is not None:
        tokenizer, state = kept
        if _restore_call_state(tokenizer, state):
            _tokenizers.move_to_end((kind, key))
            return tokenizer
        del _tokenizers[(kind, key)]
    tokenizer = load()
    _count("tokenizers")
    # kept only when the files did not change while they were read
    if key is not None and tokenizer_key(located.where, remember=use_cache) == key:
        _tokenizers[(kind, key)] = (tokenizer, _call_state(tokenizer))
        while len(_tokenizers) > TOKENIZERS_KEPT:
            _tokenizers.popitem(last=False)
    return tokenizer


def _call_state(tokenizer) -> tuple | None:
    """What calling a tokenizer changes in it: a fast tokenizer's call sets the truncation and the
    padding of its `tokenizers.Tokenizer` (off, for the calls a run makes), which tokenizer.json may
    have set otherwise, and which its serialization (tokenizer_fingerprint, in a vLLM run's identity)
    holds. None for a tokenizer without one."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    truncation, padding = backend.truncation, backend.padding
    return (dict(truncation) if truncation else None, dict(padding) if padding else None)


def _restore_call_state(tokenizer, state: tuple | None) -> bool:
    """Put back the truncation and padding the tokenizer was read with; False if that fails."""
    if state is None:
        return getattr(tokenizer, "backend_tokenizer", None) is None
    try:
        backend = tokenizer.backend_tokenizer
        truncation, padding = state
        if truncation is None:
            backend.no_truncation()
        else:
            backend.enable_truncation(**truncation)
        if padding is None:
            backend.no_padding()
        else:
            backend.enable_padding(**padding)
        return _call_state(tokenizer) == state
    except Exception:  # noqa: BLE001 - not put back: the tokenizer is read again
        return False


def forget_tokenizers() -> None:
    """Drop the kept tokenizers (the next load of each reads its files again)."""
    _tokenizers.clear()


# ---------------------------------------------------------------- reading the next model ahead

PREFETCH_CHUNK = 16 << 20
_WEIGHTS = re.compile(r".*\.(safetensors|bin)", re.IGNORECASE)


class Prefetch(threading.Thread):
    """A daemon thread that reads `files` once, in order, in PREFETCH_CHUNK pieces, so that the OS
    keeps them in its page cache. `bytes_read` counts what was read; `stop()` ends it early. A file
    that cannot be opened or read (gone meanwhile) is passed over."""

    def __init__(self, files: list[Path]):
        super().__init__(name="base-bench-prefetch", daemon=True)
        self.files = list(files)
        self.bytes_read = 0
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        buf = bytearray(PREFETCH_CHUNK)
        for path in self.files:
            if self._stop_event.is_set():
                return
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            except OSError:
                continue
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                with open(fd, "rb", buffering=0, closefd=False) as f:
                    while not self._stop_event.is_set():
                        n = f.readinto(buf)
                        if not n:
                            break
                        self.bytes_read += n
            except (OSError, ValueError):
                pass
            finally:
                os.close(fd)


def _regular_inside(path: Path, root: Path) -> Path | None:
    """`path` resolved, when it is a regular file inside `root` (itself resolved); else None."""
    try:
        real = path.resolve(strict=True)
        if root not in real.parents or not stat.S_ISREG(os.stat(real).st_mode):
            return None
        return real
    except (OSError, RuntimeError, ValueError):
        return None


def prefetch_files(model_spec: str) -> list[Path]:
    """The files `prefetch` reads for `model_spec`: a local GGUF file (an Ollama model's blob), or the
    *.safetensors and *.bin files of a local model folder (regular files inside it: a link out of it is
    passed over); none for anything else (a Hub id, a path that is not there)."""
    from .backends import ollama
    from .backends.locate import names_gguf

    try:
        p = Path(model_spec).expanduser()
        if ollama.is_ollama(model_spec):
            p = ollama.blob_of(model_spec) or Path("/nonexistent")
        if names_gguf(model_spec):
            real = p.resolve(strict=True)
            return [real] if stat.S_ISREG(os.stat(real).st_mode) else []
        if not p.is_dir():
            return []
        root = p.resolve(strict=True)
        found = (_regular_inside(q, root) for q in sorted(root.iterdir()) if _WEIGHTS.fullmatch(q.name))
        return [q for q in found if q is not None]
    except (OSError, RuntimeError, ValueError):
        return []


def prefetch(model_spec: str, revision: str | None = None) -> threading.Thread | None:
    """Start reading a local model's weight files into the OS page cache in a daemon thread (a
    `Prefetch`), so that they are read while another model is scored; its next load then reads
    memory. None, with nothing started, for a Hub id (`revision` then names its commit: nothing is
    fetched), a path that is not there, a folder without weights, or files larger than half of
    MemAvailable (or when that is not known), which would push each other out of the cache. Never
    raises."""
    try:
        files = prefetch_files(model_spec)
        if not files:
            return None
        total = sum(f.stat().st_size for f in files)
        available = mem_available()
        if available is None or total > available // 2:
            return None
        thread = Prefetch(files)
        thread.start()
        return thread
    except Exception:  # noqa: BLE001 - a prefetch is a hint: it never fails a run
        return None


# ---------------------------------------------------------------- where a run's files go


def default_out_dir(model: str, peft: str | None = None, gguf_file: str | None = None) -> Path:
    """runs/<model name>[-<adapter name>]-base-bench-1.1: an adapter's run does not land on its base
    model's. With --gguf-file the model name is the file's, so two quantisations of a repo do not collide."""

    def short(spec: str) -> str:
        name = Path(spec.rstrip("/")).name
        if spec.startswith("ollama:"):  # ollama:[HOST/][NAMESPACE/]MODEL[:TAG] -> MODEL-TAG
            model, _, tag = spec.rpartition("/")[2].removeprefix("ollama:").partition(":")
            name = f"{model}-{tag or 'latest'}"
        if name.lower().endswith(".gguf"):
            name = name[:-5]
        return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-").lower() or "model"

    name = short(gguf_file or model) + (f"-{short(peft)}" if peft else "")
    return Path("runs") / f"{name}-base-bench-{card.VERSION}"


def resolve_out_dir(args) -> Path:
    if args.out_dir:
        return Path(args.out_dir).expanduser()
    return default_out_dir(args.model, getattr(args, "peft", None), getattr(args, "gguf_file", None))


# ---------------------------------------------------------------- the run

_MISSING = object()


def _read(args, name: str, flags: tuple[str, ...], default):
    """args.<name>, the value the caller read from the flags `flags` (args attributes). It may hold
    the BaseBenchError that reading them raised, raised here, where the run reads the value, so that
    the errors come in the order they always have. Not set: `default`, unless a flag was given."""
    value = getattr(args, name, _MISSING)
    if value is _MISSING:
        if any(getattr(args, f, None) for f in flags):
            raise TypeError(f"args.{name} is not set: read args.{flags[0]} into it before loading.run(args)")
        return default
    if isinstance(value, BaseBenchError):
        raise value
    return value


def run(args, *, speak: bool = True, on_scored=None) -> Scored:
    """Check the flags, name the data (the first line a run says), load the model, score it.

    `args` holds the command line's flags as its parser names them (commands/cli.py), and three
    values read from flags: `model_args` (--model-arg, a dict), `vllm_args` (--vllm-arg, a dict) and
    `data_spec` (--data or --local-data: "bundled", "hub" or a Path). Sets args.labels and
    args.store_url (the labels and the --store URL evaluate() was given). `speak` False: no progress
    bar. `on_scored(scored)`, if given, is called once the run is scored, before the model is let go
    (and, under torchrun, before the rank leaves its group): the command line prints its summary
    there. Raises a BaseBenchError subclass for what it refuses, and Stopped (above)."""
    from .backends.locate import check_request
    from .errors import UsageError

    check_store_and_labels(args)
    check_peft(args)
    if args.limit is not None and args.limit_per_category is not None:
        raise UsageError(
            "give --limit (the first N items, in category order) or --limit-per-category (the first N of each "
            "category), not both"
        )
    if args.max_spread is not None and args.backend not in ("server", "vllm"):
        raise UsageError(
            f"--max-spread is the start-up check's limit for --backend server and --backend vllm; --backend "
            f"{args.backend} has no such check"
        )
    check_backend_flags(args)
    model_args = _read(args, "model_args", ("model_arg",), {})
    check_server_flags(args, model_args)
    check_vllm_flags(args)
    if args.backend == "llama.cpp":
        return run_llama_cpp(args, model_args, speak=speak, on_scored=on_scored)
    if args.backend == "server":
        return run_server(args, speak=speak, on_scored=on_scored)
    if args.backend == "vllm":
        return run_vllm(args, model_args, speak=speak, on_scored=on_scored)
    check_request(args.gguf_file, model_args)
    import torch

    from .backends import memory_check
    from .backends import transformers as tb
    from .backends.adapters import apply_adapter, locate_adapter
    from .engine.distributed import init_from_env, world_from_env
    from .engine.runstore import RunStore
    from .evaluation import run_signature

    out_dir = resolve_out_dir(args)
    placement = _placement(args, world_from_env())
    device = rank_device(tb.resolve_device(args.device), args.device, world_from_env())
    ranks, owned = init_from_env(device.type, args.dist_timeout)
    try:
        with ranks.together():  # everything that can fail before minutes of model loading
            source = open_data(args)
            dtype = tb.resolve_dtype(args.dtype, device)
            if args.threads:
                torch.set_num_threads(args.threads)
            fits = dict(use_cache=not args.no_cache, placed=placement is not None)
            if not getattr(args, "force_load", False):  # a GGUF too big for memory: before its fingerprint
                memory_check.check_model(args.model, dtype, **fits)
            located = tb.locate_model(
                args.model,
                revision=args.revision,
                token=source.token,
                trust_remote_code=args.trust_remote_code,
                gguf_file=args.gguf_file,
                model_args=model_args,
                use_cache=not args.no_cache,
            )
            adapter = (
                locate_adapter(args.peft, args.peft_revision, source.token, use_cache=not args.no_cache)
                if args.peft
                else None
            )
            identity = located.identity() if adapter is None else {**located.identity(), "adapter": adapter.identity()}
            if ranks.is_main:  # the same check evaluate() makes, before the model is loaded
                RunStore(out_dir).check(
                    run_signature(identity, source.dataset.sha256, args.add_bos, tb.dtype_name(dtype), device),
                    args.resume,
                )
            if not getattr(args, "force_load", False):  # converting it (no cache entry) needs more
                memory_check.check_model(args.model, dtype, **fits, located=located)
        t0 = time.perf_counter()
        use_cache = not args.no_cache
        with ranks.together():
            tokenizer = None
            if located.kind != "gguf":  # a GGUF's tokenizer comes with its conversion
                tokenizer = _tokenizer("transformers", located, use_cache, lambda: tb.load_tokenizer(located))
            loaded = tb.load_located(
                located, device, dtype, use_cache=use_cache, placement=placement, tokenizer=tokenizer
            )
            _count("models")
            if tokenizer is None:
                _count("tokenizers")
            model = apply_adapter(loaded.model, adapter, args.model) if adapter else loaded.model
        info = {
            **loaded.info,
            "revision_requested": args.revision,
            "trust_remote_code": bool(args.trust_remote_code),
            "identity": identity,
            "load_s": round(time.perf_counter() - t0, 3),
            **({"adapter": adapter.info} if adapter else {}),
        }
        return _score(
            args, model, loaded.tokenizer, source, out_dir, info, speak=speak, main=ranks.is_main, on_scored=on_scored
        )
    finally:
        if owned:
            from .engine.distributed import leave

            failing = sys.exc_info()[0] is not None
            held = leave(failed=failing)
            if failing:
                ENDING.set()  # the run ends on its error: a signal from now on changes nothing
            elif held:
                raise Stopped(held[0])


def open_data(args):
    """The data that args.data_spec names (--data, --local-data; the card's Hub file without
    either); the line naming it is the first a run says (rank 0's notes)."""
    from .items.datasource import HUB, open_data

    return open_data(_read(args, "data_spec", ("data", "local_data"), HUB), say=log.info)


def check_store_and_labels(args) -> None:
    """--store (else $BASE_BENCH_STORE) and the label flags, checked before anything is loaded: the
    URL is read (its password registered as a secret), not connected to (evaluation.check_store_url).
    Sets args.store_url and args.labels, which `_score` passes to evaluate()."""
    from .evaluation import check_store_url
    from .results.labels import Labels
    from .store import store_url

    args.labels = Labels.make(args.group, args.step, args.tokens, args.tag)
    args.store_url = check_store_url(store_url(args.store))


def _score(
    args, model, tokenizer, source, out_dir: Path, info: dict, speak: bool = True, main: bool = True, on_scored=None
) -> Scored:
    """evaluate() with the run's flags, then `on_scored(scored)`, while the model is still held (and,
    under torchrun, before the rank leaves its group). A run whose row could not be written to the
    --store still has its files: its report comes back with the StoreError."""
    from .evaluation import evaluate
    from .results.labels import Labels

    labels = getattr(args, "labels", None) or Labels()
    failed = None
    try:
        report = evaluate(
            model,
            tokenizer,
            source,
            limit=args.limit,
            limit_per_category=args.limit_per_category,
            batch_size=args.batch_size,
            batch_tokens=args.batch_tokens,
            add_bos=args.add_bos,
            out_dir=out_dir,
            resume=args.resume,
            progress=speak,
            model_info=info,
            store=getattr(args, "store_url", None),
            group=labels.group,
            step=labels.step,
            tokens=labels.tokens,
            tags=labels.tags,
        )
    except StoreError as exc:
        if getattr(exc, "report", None) is None:
            raise
        failed, report = exc, exc.report
    scored = Scored(report, out_dir, failed, main)
    if on_scored is not None:
        on_scored(scored)
    return scored


def check_peft(args) -> None:
    """--peft adapts a transformers model; --peft-revision needs --peft."""
    from .errors import UsageError

    if args.peft_revision and not args.peft:
        raise UsageError("--peft-revision only works with --peft")
    backend = getattr(args, "backend", "transformers")
    if args.peft and backend != "transformers":
        raise UsageError(
            f"--peft applies a PEFT adapter to a transformers model, and --backend {backend} does not "
            "run one; use --backend transformers (or merge the adapter and convert the result)"
        )


def run_llama_cpp(args, model_args: dict, speak: bool = True, on_scored=None) -> Scored:
    """--backend llama.cpp: the GGUF file (a local one, or --gguf-file of a Hub repo) run by
    llama.cpp, scored by the same evaluate(); neither torch nor transformers is imported
    (tests/test_no_torch.py)."""
    from .backends import llama_cpp
    from .backends.gguf_file import read_header
    from .backends.locate import check_request, locate_model, names_gguf
    from .engine.distributed import world_from_env
    from .engine.runstore import RunStore
    from .errors import ModelError, UsageError
    from .evaluation import run_signature

    refuse_flags(
        args,
        tuple(f for f in PLACEMENT_FLAGS[1:] if not (f == "--revision" and args.gguf_file)),
        ", which runs the GGUF file as it is quantized, on --device",
    )
    if model_args:
        raise UsageError(
            "--model-arg passes keyword arguments to transformers' from_pretrained; --backend llama.cpp "
            "loads the GGUF with fixed settings that keep its scores exact, and takes none"
        )
    if world_from_env() > 1:
        raise UsageError(
            "--backend llama.cpp runs in one process; torchrun is for the transformers backend "
            "(give llama.cpp more cores with --threads)"
        )
    layers = getattr(args, "n_gpu_layers", None)  # getattr: a sweep's stored flags may predate it
    llama_cpp.check_layers(args.device, layers)
    check_request(args.gguf_file)
    out_dir = resolve_out_dir(args)
    source = open_data(args)
    if not args.gguf_file and not names_gguf(args.model):
        raise UsageError(
            f"--backend llama.cpp scores a .gguf file (or ollama:NAME[:TAG]); --model {args.model} is not one "
            "(give a Hub repo's file with --gguf-file NAME, or use --backend transformers for a Hub id or a model "
            "directory)"
        )
    located = locate_model(
        args.model, revision=args.revision, token=source.token, gguf_file=args.gguf_file, use_cache=not args.no_cache
    )
    header = read_header(Path(located.info["path"]))  # not a GGUF, truncated: one line, before loading
    n_gpu, _, device = llama_cpp.gpu_offload(args.device, layers)
    RunStore(out_dir).check(
        run_signature(
            located.identity(),
            source.dataset.sha256,
            args.add_bos,
            header.file_type or "unknown",
            device,
            "llama.cpp",
            llama_cpp.offload_setting(n_gpu, device, llama_cpp.block_count(header)),
        ),
        args.resume,
    )
    t0 = time.perf_counter()
    # The tokenizer before the model: reading it takes a passing 0.35 GB for Gemma 3's vocabulary,
    # which then does not come on top of the model's pages (the run's peak drops by about as much).
    path, threads, use_cache = located.info["path"], args.threads, not args.no_cache
    backend_class = llama_cpp.LlamaCppBackend
    where = dict(device=args.device, threads=threads, use_cache=use_cache, n_gpu_layers=layers)
    try:
        tokenizer, cache = llama_cpp.load_tokenizer(path, use_cache=use_cache)
    except ModelError:
        backend_class.load(path, **where)  # llama.cpp's reason first
        raise
    _count("tokenizers")
    backend = backend_class.load(path, **where)
    _count("models")
    info = {
        **located.info,
        "cache": cache,
        "revision_requested": args.revision,
        "trust_remote_code": False,
        "identity": located.identity(),
        "load_s": round(time.perf_counter() - t0, 3),
    }
    return _score(args, backend, tokenizer, source, out_dir, info, speak=speak, on_scored=on_scored)


def check_backend_flags(args) -> None:
    """--n-gpu-layers is llama.cpp's, --force-load the transformers backend's (its GGUF memory check)."""
    from .errors import UsageError

    layers = getattr(args, "n_gpu_layers", None)  # getattr: a sweep's stored flags may predate them
    if layers is not None and args.backend != "llama.cpp":
        raise UsageError(
            f"--n-gpu-layers sets how many layers llama.cpp offloads to the GPU; it works with --backend "
            f"llama.cpp only, not --backend {args.backend}"
        )
    if getattr(args, "force_load", False) and args.backend != "transformers":
        raise UsageError(
            f"--force-load skips the memory check of the transformers backend, which expands a GGUF to "
            f"floats; --backend {args.backend} expands nothing"
        )


def check_server_flags(args, model_args: dict) -> None:
    """The server flags go with --backend server, which needs --base-url and computes nothing here
    (so it takes none of the flags that say how to load or place a model)."""
    from .errors import UsageError

    given = [f"--{f.replace('_', '-')}" for f in SERVER_FLAGS if getattr(args, f, None) is not None]
    if args.backend != "server":
        if given:
            raise UsageError(f"{', '.join(given)} only work{'s' if len(given) == 1 else ''} with --backend server")
        return
    if not args.base_url:
        raise UsageError("--backend server needs --base-url, the server's /v1 root (e.g. http://127.0.0.1:8000/v1)")
    placement = tuple(f for f in PLACEMENT_FLAGS if f != "--revision")  # --revision pins the tokenizer here
    refuse_flags(args, (*placement, "--threads", "--gguf-file"), ": the server runs the model as it was started")
    if model_args:
        raise UsageError(
            "--model-arg does not apply to --backend server: the server loaded the model as it was started"
        )


def refuse_flags(args, flags: tuple[str, ...], why: str) -> None:
    """UsageError naming those of `flags` that were given, which do not apply to args.backend (`why`)."""
    from .errors import UsageError

    defaults = {"--device": "auto", "--dtype": "auto"}
    given = [f for f in flags if getattr(args, f[2:].replace("-", "_")) not in (None, False, [], defaults.get(f))]
    if given:
        raise UsageError(
            f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --backend {args.backend}{why}"
        )


def server_options(args) -> dict:
    """ServerBackend's keyword arguments for the server flags given; a flag not given is left out, so
    that ServerBackend's own default applies (the one default the help text states too)."""
    given = {
        "api_key_env": args.api_key_env,
        "concurrency": args.concurrency,
        "request_timeout": args.request_timeout,
        "max_retries": args.max_retries,
    }
    return {k: v for k, v in given.items() if v is not None}


def run_server(args, speak: bool = True, on_scored=None) -> Scored:
    """--backend server: a model behind an OpenAI-compatible server, scored by the same evaluate().
    Everything that can refuse the run (the server, its model, the tokenizer, --resume, the server
    check) is done before evaluate() writes anything."""
    from .backends.server import ServerBackend
    from .engine.distributed import world_from_env
    from .engine.runstore import RunStore
    from .errors import UsageError
    from .evaluation import Selection, run_signature

    if world_from_env() > 1:
        raise UsageError("--backend server runs in one process; give the server more work with --concurrency")
    out_dir = resolve_out_dir(args)
    t0 = time.perf_counter()
    backend = ServerBackend(
        args.base_url,
        args.model,
        args.tokenizer,
        **server_options(args),
        max_spread=args.max_spread,
        revision=args.revision,
    )
    try:
        source = open_data(args)
        backend.open()
        if backend.tokenizer is not None:
            _count("tokenizers")
        signature = run_signature(
            backend.identity(), source.dataset.sha256, args.add_bos, backend.dtype, backend.device, backend.name
        )
        RunStore(out_dir).check(signature, args.resume)
        items = Selection(args.limit, args.limit_per_category).of(source.dataset.items)
        tokenize = backend.check_tokenizer(items)
        backend.check()
        info = {**backend.info(), "tokenizer_check": tokenize, "load_s": round(time.perf_counter() - t0, 3)}
        return _score(args, backend, backend.tokenizer, source, out_dir, info, speak=speak, on_scored=on_scored)
    finally:
        backend.close()


def check_vllm_flags(args) -> None:
    """--tensor-parallel-size, --pipeline-parallel-size and --vllm-arg belong to --backend vllm."""
    if getattr(args, "backend", "transformers") == "vllm":
        return
    refuse_flags(args, VLLM_FLAGS, "; they are for --backend vllm")


def run_vllm(args, model_args: dict, speak: bool = True, on_scored=None) -> Scored:
    """--backend vllm: a Hub id or a model directory run by vllm.LLM in this process, scored by the
    same evaluate(). Everything that can be refused is checked before the engine starts (minutes)."""
    import torch

    from .backends import vllm as vb
    from .backends.prompt_logprobs import check_spread_max
    from .backends.transformers import classify, dtype_name, locate_model, resolve_dtype
    from .engine.distributed import world_from_env
    from .engine.runstore import RunStore
    from .errors import ModelError, UsageError
    from .evaluation import run_signature

    refuse_flags(
        args,
        ("--threads", "--device-map", "--max-memory", "--offload-folder", "--gguf-file"),
        ", which places the model and sets its threads itself (see --tensor-parallel-size, "
        "--pipeline-parallel-size and --vllm-arg)",
    )
    if world_from_env() > 1:
        raise UsageError(
            "--backend vllm runs in one process and spreads the model itself: use --tensor-parallel-size "
            "and --pipeline-parallel-size, not torchrun"
        )
    vllm_args = _read(args, "vllm_args", ("vllm_arg",), {})
    both = sorted(set(model_args) & set(vllm_args))
    if both:
        raise UsageError(f"{both[0]} is given by both --model-arg and --vllm-arg; give it once")
    vllm_args = vb.check_vllm_args({**model_args, **vllm_args})
    vb.check_model_kind(classify(args.model), args.model)  # a GGUF: one line, before vLLM is imported
    vb.check_vllm_args(vllm_args, vb.engine_arg_names(vb.import_vllm()))
    device = vb.device_type()
    if args.device not in ("auto", device):
        raise UsageError(
            f"--device {args.device}: this vLLM ({vb.vllm_version()}) computes on {device}; drop --device "
            "(pick GPUs with CUDA_VISIBLE_DEVICES)"
        )
    out_dir = resolve_out_dir(args)
    source = open_data(args)
    located = locate_model(
        args.model,
        revision=args.revision,
        token=source.token,
        trust_remote_code=args.trust_remote_code,
        use_cache=not args.no_cache,
    )
    dtype = dtype_name(resolve_dtype(args.dtype, torch.device(device)))
    tokenizer = _tokenizer(
        "vllm", located, not args.no_cache, lambda: vb.load_tokenizer(located.where, args.trust_remote_code)
    )
    max_spread = check_spread_max(args.max_spread)
    identity = vb.run_identity(located.identity(), tokenizer, vllm_args, max_spread)
    RunStore(out_dir).check(
        run_signature(identity, source.dataset.sha256, args.add_bos, dtype, device, "vllm"), args.resume
    )
    t0 = time.perf_counter()
    backend = vb.VllmBackend.load(
        located.where,
        tokenizer,
        spec=args.model,
        dtype=dtype,
        tensor_parallel_size=args.tensor_parallel_size or 1,
        pipeline_parallel_size=args.pipeline_parallel_size or 1,
        vllm_args=vllm_args,
        trust_remote_code=args.trust_remote_code,
        max_spread=max_spread,
    )
    _count("models")
    try:
        if backend.dtype != dtype:
            raise ModelError(
                f"vLLM runs {args.model} in {backend.dtype}, not the {dtype} asked for; pass --dtype {backend.dtype}"
            )
        info = {
            **located.info,
            "cache": {"status": "not-gguf", "path": None},
            "revision_requested": args.revision,
            "trust_remote_code": bool(args.trust_remote_code),
            "identity": identity,
            "load_s": round(time.perf_counter() - t0, 3),
        }
        return _score(args, backend, tokenizer, source, out_dir, info, speak=speak, on_scored=on_scored)
    finally:
        backend.close()


def _placement(args, world: int):
    """--device-map and its options, checked against the flags they cannot go with."""
    from .backends.transformers import Placement
    from .errors import UsageError

    if not args.device_map:
        extra = [f for f, v in (("--max-memory", args.max_memory), ("--offload-folder", args.offload_folder)) if v]
        if extra:
            raise UsageError(f"{' and '.join(extra)} only work with --device-map (add --device-map auto)")
        return None
    if args.device != "auto":
        raise UsageError(
            f"--device-map places the layers itself (GPUs, then CPU, then disk); drop --device "
            f"{args.device}, or drop --device-map to put the whole model on {args.device}"
        )
    if world > 1:
        raise UsageError(
            "--device-map splits one model over this machine's devices in one process, while torchrun "
            "runs one process with a whole model per GPU: use one or the other"
        )
    return Placement(args.device_map, args.max_memory, args.offload_folder)


def rank_device(device, asked: str, world: int):
    """Under torchrun each rank takes the GPU of its LOCAL_RANK; an explicit cuda:N cannot be shared."""
    import torch

    if world <= 1 or device.type != "cuda":
        return device
    if ":" in asked:
        from .errors import DistributedError

        raise DistributedError(
            f"--device {asked} names one GPU, but under torchrun each of the {world} ranks uses "
            "the GPU of its LOCAL_RANK: pass --device cuda (or auto)"
        )
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
