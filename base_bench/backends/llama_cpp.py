"""The llama.cpp backend: a GGUF file scored by llama.cpp itself, through llama-cpp-python's low-level API.

    from base_bench.backends.llama_cpp import LlamaCppBackend, load_tokenizer
    backend = LlamaCppBackend.load("model.gguf", device="cpu", threads=2)
    tokenizer, _ = load_tokenizer("model.gguf")        # the HF tokenizer converted from the GGUF (cached)
    report = evaluate(backend, tokenizer)              # or evaluate(llama_cpp.Llama("model.gguf"), tokenizer)

The scores are llama.cpp's (its quantized kernels), for the token ids `encode_item` makes with the
HF tokenizer converted from the same GGUF, so both backends score identical sequences (on the
bundled set, llama.cpp's own tokenizer gives the same ids for SmolLM2 and Gemma 3; see bench/RESULTS.md).
That tokenizer is read with the `tokenizers` library (gguf_tokenizer.py), and nothing here imports
torch or transformers: a llama.cpp run loads neither.

How an item is scored (`SharedContextScorer`): its context is decoded once, each context token
carrying the sequence ids of all K continuations (a unified KV cache, n_seq_max = K + 1), then each
continuation but its last token under its own sequence id, at the positions right after the
context. Logits are asked for only where a continuation token is predicted (the last context
position and each fed continuation token); log_softmax is taken with numpy, exp in float32 and
the rest in float64 (`log_probs`). The KV memory is cleared before the next item. `PlainScorer`
decodes context + continuation as one sequence per choice: the literal reading of the card, and the
yardstick the shared path is checked against.

Exact and batch-invariant, by pinning the kernels. llama.cpp's CPU results for a token depend on
what else is in its micro-batch: (1) flash attention runs a tiled kernel once a micro-batch holds 64
or more tokens (GGML_FA_TILE_Q) and a one-row-at-a-time vector kernel below that, and the tiled one
splits each row's keys into 64-cell tiles by cache position; (2) the AVX "repack" buffers multiply
rows in groups of 4 and the leftover rows with another kernel; (3) the tiled K-quant matmul takes
over at 8 rows and picks its K blocking from the row count; (4) llamafile's sgemm declines a
1-row product. Each moves a float at the last bits, and quantizing the activations to 8 bits for
the next matmul turns that into a different rounding step, so a score moves by up to nats (Gemma 3
Q4_K_M: median 0.49 nats with 8 items per decode against one). So: every llama_decode gets at most
UBATCH (48) tokens and never exactly one token or one output (a pad token in the spare sequence
fills in, and is removed); the weights are loaded without repack buffers (`use_extra_bufts`
false); GGML_CPU_TILED_MM=0 is set before the first llama.cpp computation of the process; flash
attention is on. Then each row's result depends only on its own token, position and the cells it
sees, in cache order, and the shared path equals the plain one bit for bit (measured: 0 difference
on all 350 items, both real models, at 1, 8 and 32 items per call). `pick_scorer` checks this on
three real items at start-up, as the transformers backend checks packing, and falls back to the
plain path (with a note) when they differ, say on a GPU build.

Devices: `device="cpu"` keeps every layer on the CPU; "cuda", "cuda:N" or "mps" offload every layer
when llama-cpp-python was built with GPU support, else ModelError; `n_gpu_layers=N` (--n-gpu-layers)
offloads only N of them, for a model larger than the GPU's memory, and a value other than the
default enters the resume signature (`offload_setting`). `threads` sets llama.cpp's
threads for prompt processing and generation. Bad files get one line (ModelError): not a GGUF,
truncated (from `gguf_file.read_header`), an architecture this llama.cpp does not know, or
llama.cpp's own last error. llama.cpp's log is silenced (its errors are kept for those messages).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import ModelError, ScoringError, UsageError
from ..items.records import ChoiceScore
from .base import Backend, Device
from .gguf_file import GGUFHeader, file_type_name, read_header, shown
from .gguf_tokenizer import load_tokenizer  # noqa: F401 - the tokenizer a llama.cpp run scores with
from .identity import fingerprint, package_version

log = logging.getLogger("base_bench")

UBATCH = 48  # tokens per llama_decode (plus a pad): below the 64-row tile of ggml's CPU flash attention
EXACT_TOL = 1e-5  # the start-up check: shared path against the plain path, nats per choice
GPU_ALL_LAYERS = 999  # n_gpu_layers meaning "every layer"
INSTALL_HINT = (
    "pip install -e '.[llama]' builds it from source (4 to 5 minutes on 2 cores); see "
    "docs/backends.md for the build flags"
)

_LOG_ERROR = 4  # GGML_LOG_LEVEL_ERROR
_state: dict = {"lib": None, "callback": None, "errors": deque(maxlen=32)}


def lib():
    """llama_cpp.llama_cpp, set up once: logging silenced (errors kept), backend initialised, and the
    tiled K-quant matmul switched off before anything is computed (see the module docstring)."""
    if _state["lib"] is not None:
        return _state["lib"]
    os.environ["GGML_CPU_TILED_MM"] = "0"  # read once, at ggml's first K-quant matmul in this process
    try:
        import llama_cpp.llama_cpp as L
    except ImportError:
        raise ModelError(
            f"--backend llama.cpp needs llama-cpp-python, which is not installed: {INSTALL_HINT}"
        ) from None
    except (OSError, RuntimeError) as exc:  # the shared library is there but does not load
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise ModelError(
            f"llama-cpp-python is installed but its library does not load ({first}); reinstall it: {INSTALL_HINT}"
        ) from None

    def keep_errors(level, text, user_data):
        if level == _LOG_ERROR and text:
            _state["errors"].append(text.decode("utf-8", errors="replace").strip())

    _state["callback"] = L.llama_log_callback(keep_errors)  # referenced here, so never collected
    L.llama_log_set(_state["callback"], ctypes.c_void_p(0))
    L.llama_backend_init()
    _state["lib"] = L
    return L


def llama_cpp_version() -> str | None:
    return package_version("llama_cpp_python") or package_version("llama-cpp-python")


# ----------------------------------------------------------------------------- devices and loading


def check_layers(device: str, n_gpu_layers: int | None) -> None:
    """UsageError for an --n-gpu-layers that cannot apply: below 0, or above 0 with --device cpu."""
    if n_gpu_layers is None:
        return
    if isinstance(n_gpu_layers, bool) or not isinstance(n_gpu_layers, int) or n_gpu_layers < 0:
        raise UsageError(f"--n-gpu-layers takes a whole number of 0 or more, not {n_gpu_layers!r}")
    if n_gpu_layers and device == "cpu":
        raise UsageError(
            f"--n-gpu-layers {n_gpu_layers} offloads layers to a GPU, and --device cpu keeps every layer on "
            "the CPU; drop --n-gpu-layers, or pick a GPU with --device"
        )


def gpu_offload(device: str, n_gpu_layers: int | None = None) -> tuple[int, int, str]:
    """(n_gpu_layers, main_gpu, device name) for a --device value and --n-gpu-layers (None: every
    layer on a GPU); ModelError when it asks for a GPU that this llama-cpp-python cannot use,
    UsageError for layers to offload with no GPU to take them."""
    check_layers(device, n_gpu_layers)
    L = lib()
    gpu = bool(L.llama_supports_gpu_offload())
    if device == "cpu" or (device == "auto" and not gpu):
        if n_gpu_layers:
            raise UsageError(
                f"--n-gpu-layers {n_gpu_layers}: this llama-cpp-python was built without GPU support, so "
                "every layer runs on the CPU; drop --n-gpu-layers, or rebuild it with GPU support (see "
                "docs/backends.md)"
            )
        return 0, 0, "cpu"
    layers = GPU_ALL_LAYERS if n_gpu_layers is None else n_gpu_layers
    if device == "auto":
        return layers, 0, "mps" if sys.platform == "darwin" else "cuda"
    if device in ("cuda", "mps") or device.startswith("cuda:"):
        if not gpu:
            raise ModelError(
                f"--device {device}: this llama-cpp-python was built without GPU support; rebuild it "
                'with CMAKE_ARGS="-DGGML_CUDA=on" (or -DGGML_METAL=on on a Mac), or use --device cpu'
            )
        idx = device.partition(":")[2]
        if idx and not idx.isdigit():
            raise ModelError(f"--device {device!r}: expected cuda:N with N a GPU number")
        return layers, int(idx or 0), device
    raise ModelError(f"--device {device!r} is not one of cpu, cuda, cuda:N, mps, auto")


def offload_setting(n_gpu_layers: int, device, n_blocks: int | None = None) -> dict:
    """What the GPU layers add to the resume signature: nothing for the default (every layer on a
    GPU, none on the CPU), so that runs started before --n-gpu-layers still resume, and
    {"n_gpu_layers": N} for any other N (a partly offloaded model computes its layers on two devices).
    llama.cpp offloads the last N layers, the output layer counted as one: with `n_blocks` (the
    file's block count) known, an N above it offloads every layer, and is the default."""
    on_cpu = Device.parse(str(device)).type == "cpu"
    if n_gpu_layers == (0 if on_cpu else GPU_ALL_LAYERS) or (not on_cpu and n_blocks and n_gpu_layers > n_blocks):
        return {}
    return {"n_gpu_layers": n_gpu_layers}


def block_count(header: GGUFHeader) -> int | None:
    """The model's repeating layers as the file states them (`<architecture>.block_count`)."""
    n = header.metadata.get(f"{header.architecture}.block_count")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def _load_error(path: Path, header: GGUFHeader) -> str:
    """One line for a GGUF that passed the header check but that llama.cpp would not load."""
    errors = [e for e in _state["errors"] if e]
    for e in reversed(errors):
        if "unknown model architecture" in e:
            return (
                f"{path}: llama.cpp (llama-cpp-python {llama_cpp_version()}) does not know the model "
                f"architecture {shown(header.architecture or '')}; a newer llama-cpp-python may"
            )
        if "not within the file bounds" in e or "failed to read" in e:
            return f"{path}: the GGUF file is truncated or damaged (llama.cpp: {e.split(': ')[-1]})"
    detail = next(
        (e for e in reversed(errors) if "error loading model" in e), errors[-1] if errors else "no reason given"
    )
    detail = detail.split("error loading model: ")[-1]
    return f"llama.cpp could not load {path}: {detail[:300]}"


class LlamaCppBackend(Backend):
    """A GGUF file loaded by llama.cpp, as the Backend `evaluate()` asks (see backends/base.py).

    dtype is the GGUF file type ("Q4_1", "Q4_K_M", ...); vocab_size, window and expects_bos are
    llama.cpp's own (`llama_vocab_n_tokens`, `llama_model_n_ctx_train`, `llama_vocab_get_add_bos`,
    which is the file's tokenizer.ggml.add_bos_token or, when the file has none, llama.cpp's default
    for its tokenizer type)."""

    name = "llama.cpp"

    def __init__(self, model_ptr, path: Path, header: GGUFHeader, threads: int, n_gpu_layers: int, device: str):
        L = lib()
        self._model = model_ptr
        self.path = Path(path)
        self.header = header
        self.threads = int(threads)
        self.n_gpu_layers = n_gpu_layers  # as llama.cpp was given it: recorded in the report
        self.device = Device.parse(device)
        # evaluate() adds it to run_signature
        self.signature_settings = offload_setting(n_gpu_layers, device, block_count(header))
        self.vocab = L.llama_model_get_vocab(model_ptr)
        self.vocab_size = int(L.llama_vocab_n_tokens(self.vocab))
        self.window = int(L.llama_model_n_ctx_train(model_ptr)) or None
        self.expects_bos = bool(L.llama_vocab_get_add_bos(self.vocab))
        self.chat_template = bool(header.metadata.get("tokenizer.chat_template"))
        self.dtype = header.file_type or "unknown"  # as the file states it (the CLI checks --resume before loading)
        self.llama_file_type = file_type_name(L.llama_model_ftype(model_ptr))  # llama.cpp's, guessed if unstated
        self.remember_digest = True  # False (--no-cache): the fingerprint is not kept in the cache folder

    @classmethod
    def load(
        cls,
        path,
        device: str = "cpu",
        threads: int | None = None,
        use_cache: bool = True,
        n_gpu_layers: int | None = None,
    ) -> LlamaCppBackend:
        """Load the GGUF at `path` with llama.cpp; ModelError (one line) if it cannot be. With
        `use_cache` False (--no-cache) its fingerprint is not remembered in the cache folder.
        `n_gpu_layers` (--n-gpu-layers): the layers offloaded to a GPU `device` (None: every one)."""
        check_layers(device, n_gpu_layers)
        path = Path(path).expanduser()
        if not path.is_file():
            raise ModelError(f"{path}: no such GGUF file")
        header = read_header(path)
        L = lib()
        n_gpu, main_gpu, dev = gpu_offload(device, n_gpu_layers)
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = n_gpu
        mp.main_gpu = main_gpu
        if device.startswith("cuda:"):
            mp.split_mode = L.LLAMA_SPLIT_MODE_NONE
        mp.use_extra_bufts = False  # no repack buffers: their 4-row kernels make a row depend on its neighbours
        _state["errors"].clear()
        model = L.llama_model_load_from_file(str(path).encode(), mp)
        if not model:
            raise ModelError(_load_error(path, header))
        backend = cls(model, path, header, threads or default_threads(), n_gpu, dev)
        backend.remember_digest = use_cache
        return backend

    @classmethod
    def from_llama(cls, llama, tokenizer=None) -> LlamaCppBackend:
        """The backend for a `llama_cpp.Llama` the caller made: the same file, threads and GPU layers,
        opened again with the settings exact scoring needs (its weights are memory-mapped, so the
        pages are shared, not copied). The Llama itself is neither used nor changed."""
        path = getattr(llama, "model_path", None)
        if not path:
            raise ModelError("this llama_cpp.Llama has no model_path, so base-bench cannot open its GGUF file")
        layers = getattr(getattr(llama, "model_params", None), "n_gpu_layers", 0)
        return cls.load(path, device="cpu" if not layers else "auto", threads=getattr(llama, "n_threads", None))

    def bos_id(self) -> int:
        return int(lib().llama_vocab_bos(self.vocab))

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's own tokenization of `text`, with no special tokens added or parsed (as
        `encode_item` asks the HF tokenizer); for checking that both give the same ids."""
        L = lib()
        raw = text.encode("utf-8")
        n = len(raw) + 8
        while True:
            buf = (L.llama_token * n)()
            got = L.llama_tokenize(self.vocab, raw, len(raw), buf, n, False, False)
            if got >= 0:
                return list(buf[:got])
            n = -got

    def tokenizer_differences(self, tokenizer, items) -> list[str]:
        """Where llama.cpp's own tokenizer disagrees with the ids `encode_item` makes with `tokenizer`
        (the HF one both backends score with): "<id> context" or "<id> continuation k", per text."""
        from ..engine.scoring import encode_item

        differ = []
        for it in items:
            e = encode_item(tokenizer, it)
            if list(e.context) != self.tokenize(it.context):
                differ.append(f"{it.id} context")
            differ += [
                f"{it.id} continuation {k}"
                for k, (ids, text) in enumerate(zip(e.continuations, it.continuations))
                if list(ids) != self.tokenize(text)
            ]
        return differ

    def close(self) -> None:
        if getattr(self, "_model", None):
            lib().llama_model_free(self._model)
            self._model = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ------------------------------------------------------------------ what evaluate() asks

    def describe(self) -> dict:
        L = lib()
        return {
            "model_type": self.header.architecture,
            "gguf_file_type": self.dtype,
            "llama_file_type": self.llama_file_type,
            "n_parameters": int(L.llama_model_n_params(self._model)),
            "bytes_in_memory": int(L.llama_model_size(self._model)),
            "llama_cpp": {
                "n_gpu_layers": self.n_gpu_layers,
                "ubatch": UBATCH,
                "flash_attention": True,
                "repack_buffers": False,
                "tiled_matmul": os.environ.get("GGML_CPU_TILED_MM") != "0",
                "system_info": L.llama_print_system_info().decode(errors="replace").strip(" |"),
            },
        }

    def fingerprint(self) -> str:
        return fingerprint(self.path, remember=self.remember_digest)

    def spec(self) -> str:
        return str(self.path)

    def versions(self) -> dict:
        return {
            "llama-cpp-python": llama_cpp_version(),
            "gguf": package_version("gguf"),
            "transformers": package_version("transformers"),
            "tokenizers": package_version("tokenizers"),
        }

    def pick_scorer(self, longest_first, pad_id, ranks):
        """The shared-context scorer if it equals the plain path on three real items (the longest, a
        median one and the shortest), else the plain scorer with a note. One process only."""
        if ranks.world > 1:
            raise UsageError(
                "the llama.cpp backend runs in one process; torchrun is for the transformers backend "
                "(use --threads to give llama.cpp more cores)"
            )
        cells = max((e.packed_length for e in longest_first), default=1) + 1
        conts = max((len(e.continuations) for e in longest_first), default=4)
        shared = SharedContextScorer(self, cells, conts)
        probe = (
            list(dict.fromkeys([longest_first[0], longest_first[len(longest_first) // 2], longest_first[-1]]))
            if longest_first
            else []
        )
        plain = PlainScorer(
            self, max((len(e.context) + max(len(c) for c in e.continuations) for e in longest_first), default=1)
        )
        try:
            diff = max_abs_diff(shared(probe), plain(probe)) if probe else 0.0
        finally:
            plain.close()
        ok = diff <= EXACT_TOL
        if not ok:
            shared.close()
            log.warning(
                f"note: llama.cpp's shared-context path differs from one sequence per choice by {diff:.2g} "
                "nats on this build; using the plain path (four decodes per item)"
            )
        check = {"ok": ok, "max_abs_diff_vs_plain": diff, "checked_items": [e.id for e in probe]}
        return (shared if ok else PlainScorer(self, cells)), check


def default_threads(cpus: Path = Path("/sys/devices/system/cpu")) -> int:
    """The physical cores, as torch counts them for the transformers backend (OMP_NUM_THREADS, when
    set, wins, as it does in torch): one per set of hyperthread siblings among the online CPUs, from
    Linux's sysfs (`cpus`); elsewhere os.cpu_count()."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = set()
    for topo in cpus.glob("cpu[0-9]*/topology/thread_siblings_list"):
        try:
            cores.add(topo.read_text().strip())
        except OSError:  # an offline CPU
            continue
    return max(1, len(cores) or os.cpu_count() or 1)


# ---------------------------------------------------------------------------------------- scoring


def max_abs_diff(a, b) -> float:
    return max((abs(x.logprob - y.logprob) for ra, rb in zip(a, b) for x, y in zip(ra, rb)), default=0.0)


LOGIT_CHUNK = 1 << 22  # logits per log_softmax step (16 MB in float32): 16 rows of a 262k vocabulary


def log_probs(logits: np.ndarray, targets: Sequence[Sequence[int]]) -> list[float]:
    """For row i of `logits`, log_softmax(row)[t] for each t in targets[i], flattened, as float64.

    Per row: its max m is taken out and exp(x - m) is computed in float32 (numpy's float32 exp is
    several times faster than its float64 one, and over Gemma's 262,144-token vocabulary the float64
    exp was a fifth of the scoring time); the terms are summed with a float64 accumulator, and m,
    the log and the target's logit are float64. No step can overflow, and every score (a choice's
    summed log-probs) stays within 1.3e-7 of the same formula in float64 throughout, on all 1,400
    choices of the bundled set for SmolLM2 and Gemma 3 (bench/llama_logsoftmax.py, bench/RESULTS.md).
    Rows go through in groups of at most LOGIT_CHUNK values, so the float32 scratch stays small;
    every row's arithmetic is its own, so the grouping changes no bit."""
    step = max(1, LOGIT_CHUNK // max(1, logits.shape[1]))
    out: list[float] = []
    for a in range(0, len(targets), step):
        x = logits[a : a + step]
        ts = targets[a : a + step]
        m = x.max(axis=1, keepdims=True)
        e = np.subtract(x, m, dtype=np.float32)
        np.exp(e, out=e)
        lse = m[:, 0].astype(np.float64) + np.log(e.sum(axis=1, dtype=np.float64))
        rows = np.repeat(np.arange(len(ts)), [len(t) for t in ts])
        toks = np.fromiter((t for tt in ts for t in tt), dtype=np.int64, count=len(rows))
        out += (x[rows, toks].astype(np.float64) - lse[rows]).tolist()
    return out


class _Context:
    """A llama_context with a unified KV cache of `cells` cells and `n_seq` sequences, flash
    attention on, and one batch buffer of UBATCH tokens. The last sequence id is the pad's."""

    def __init__(self, backend: LlamaCppBackend, cells: int, n_seq: int):
        L = lib()
        self.L, self.backend, self.n_seq, self.pad_seq = L, backend, n_seq, n_seq - 1
        self.n_vocab = backend.vocab_size
        cp = L.llama_context_default_params()
        cp.n_ctx = max(cells, UBATCH + 1)  # llama.cpp caps n_batch at n_ctx
        cp.n_batch = cp.n_ubatch = UBATCH + 1  # a chunk of UBATCH tokens, and maybe the pad
        cp.n_seq_max = n_seq
        cp.kv_unified = True
        cp.n_threads = cp.n_threads_batch = backend.threads
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED
        cp.no_perf = True
        _state["errors"].clear()
        self.ctx = L.llama_init_from_model(backend._model, cp)
        if not self.ctx:
            why = _state["errors"][-1] if _state["errors"] else "no reason given"
            raise ModelError(f"llama.cpp could not make a context of {cp.n_ctx} cells for {backend.path}: {why}")
        self.cells = int(L.llama_n_ctx(self.ctx))
        if L.llama_n_batch(self.ctx) < UBATCH + 1 or L.llama_n_seq_max(self.ctx) < n_seq:  # llama.cpp would abort
            got = (L.llama_n_batch(self.ctx), L.llama_n_seq_max(self.ctx))
            L.llama_free(self.ctx)
            self.ctx = None
            raise ModelError(
                f"llama.cpp made a context with n_batch {got[0]} and n_seq_max {got[1]}; base-bench "
                f"needs {UBATCH + 1} and {n_seq}"
            )
        self.mem = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_init(UBATCH + 1, 0, n_seq)
        self.tokens_fed = 0  # tokens fed, pads included (what llama.cpp computed)
        self.counts = {"tokens": 0, "logit_rows": 0, "pads": 0, "decodes": 0}  # real tokens and rows only

    def close(self) -> None:
        if getattr(self, "ctx", None):
            self.L.llama_batch_free(self.batch)
            self.L.llama_free(self.ctx)
            self.ctx = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def clear(self) -> None:
        self.L.llama_memory_clear(self.mem, False)

    def _decode(self, tokens, pos, seqs, want) -> np.ndarray | None:
        """One llama_decode; the logits of the positions in `want`, in order (a view, valid until the next call)."""
        b, n = self.batch, len(tokens)
        b.n_tokens = n
        np.ctypeslib.as_array(b.token, shape=(n,))[:] = tokens
        np.ctypeslib.as_array(b.pos, shape=(n,))[:] = pos
        np.ctypeslib.as_array(b.logits, shape=(n,))[:] = want
        n_seq_id = np.ctypeslib.as_array(b.n_seq_id, shape=(n,))
        for i, s in enumerate(seqs):
            n_seq_id[i] = len(s)
            row = b.seq_id[i]
            for k, x in enumerate(s):
                row[k] = x
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise ScoringError(
                f"llama_decode failed with code {rc} on {n} tokens "
                f"({_state['errors'][-1] if _state['errors'] else 'no message'})"
            )
        self.tokens_fed += n
        n_out = int(sum(want))
        if not n_out:
            return None
        return np.ctypeslib.as_array(self.L.llama_get_logits(self.ctx), shape=(n_out, self.n_vocab))

    def feed(self, tokens, pos, seqs, targets) -> list[float]:
        """Decode the rows in chunks of at most UBATCH (never 1 token, nor 1 output: a pad token in
        the pad sequence fills in and is removed). targets[i] lists the tokens row i predicts (empty:
        no logits for it); returns their log-probs, flattened in row order."""
        n = len(tokens)
        k = max(1, -(-n // UBATCH))
        cuts = [round(i * n / k) for i in range(k + 1)]
        out: list[float] = []
        for a, z in zip(cuts, cuts[1:]):
            t, p, s, tg = tokens[a:z], pos[a:z], seqs[a:z], targets[a:z]
            w = [bool(x) for x in tg]
            n_want = sum(w)
            padded = len(t) < 2 or n_want == 1
            if padded:  # the pad asks for logits too when exactly one row does
                t, p, s, w = t + [t[0]], p + [0], s + [(self.pad_seq,)], w + [n_want == 1]
            logits = self._decode(t, p, s, w)
            self.counts["tokens"] += z - a
            self.counts["logit_rows"] += n_want
            self.counts["pads"] += int(padded)
            self.counts["decodes"] += 1
            if n_want:
                out += log_probs(logits[:n_want], [x for x in tg if x])
            if padded:
                self.L.llama_memory_seq_rm(self.mem, self.pad_seq, -1, -1)
        return out


class _ItemScorer:
    """What both scorers share: a context that grows to the largest item seen, one item at a time."""

    name = "?"

    def __init__(self, backend: LlamaCppBackend, cells: int, n_conts: int = 4):
        self.backend = backend
        self._ctx = _Context(backend, cells + 1, n_conts + 1)

    def close(self) -> None:
        self._ctx.close()

    @property
    def counts(self) -> dict:
        """Real tokens fed, logit rows asked for, pads added, llama_decode calls (for tests and bench/)."""
        return self._ctx.counts

    def _ensure(self, cells: int, n_seq: int) -> None:
        if cells + 1 > self._ctx.cells or n_seq > self._ctx.n_seq:
            counts = self._ctx.counts
            self._ctx.close()
            self._ctx = _Context(self.backend, max(cells + 1, self._ctx.cells), max(n_seq, self._ctx.n_seq))
            self._ctx.counts = counts

    def __call__(self, batch) -> list[list[ChoiceScore]]:
        out = [self._score(e) for e in batch]
        self._ctx.clear()
        return out


class SharedContextScorer(_ItemScorer):
    """The context once, its tokens under the sequence ids of all K continuations; then each
    continuation but its last token under its own id, at the positions after the context."""

    name = "llama.cpp-shared-context"

    def _score(self, e) -> list[ChoiceScore]:
        K, n = len(e.continuations), len(e.context)
        self._ensure(e.packed_length, K + 1)
        every = tuple(range(K))
        tokens, pos, seqs = list(e.context), list(range(n)), [every] * n
        targets = [()] * (n - 1) + [tuple(c[0] for c in e.continuations)]  # the last context row predicts all K
        owner = list(range(K))  # which choice each target feeds, in flattened order
        for k, c in enumerate(e.continuations):
            tokens += c[:-1]
            pos += range(n, n + len(c) - 1)
            seqs += [(k,)] * (len(c) - 1)
            targets += [(t,) for t in c[1:]]
            owner += [k] * (len(c) - 1)
        self._ctx.clear()
        sums = [0.0] * K
        for k, v in zip(owner, self._ctx.feed(tokens, pos, seqs, targets)):
            sums[k] += v
        return [ChoiceScore(sums[k], len(c)) for k, c in enumerate(e.continuations)]


class PlainScorer(_ItemScorer):
    """One sequence per choice, context + continuation but its last token: the card read literally."""

    name = "llama.cpp-plain"

    def _score(self, e) -> list[ChoiceScore]:
        n = len(e.context)
        out = []
        for c in e.continuations:
            self._ensure(n + len(c), 2)
            tokens = list(e.context) + list(c[:-1])
            targets = [()] * (n - 1) + [(t,) for t in c]
            self._ctx.clear()
            lp = self._ctx.feed(tokens, list(range(len(tokens))), [(0,)] * len(tokens), targets)
            out.append(ChoiceScore(float(sum(lp)), len(c)))
        return out
