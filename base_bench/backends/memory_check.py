"""Will a GGUF file, expanded to floats by the transformers backend, fit in memory and on the cache's
disk? Checked from the file's header alone, before anything is converted.

    from base_bench.backends import memory_check
    memory_check.check_gguf(path, torch.float32, use_cache=True)                 # before the fingerprint
    memory_check.check_gguf(path, torch.float32, use_cache=True, fingerprint=fp)  # knows a cache hit
    memory_check.check_model(args.model, dtype, located=None)   # what loading.run calls, twice
    # ModelError (one line: need against free, in GB, and what to do) when it will not fit
    need = memory_check.needs(n_elements, 4, converts=True, writes_cache=True)   # Need(memory, disk), bytes
    short = memory_check.shortfalls(need, Free(memory=20e9, disk=50e9))           # what does not fit

The transformers backend dequantizes every tensor of a GGUF to the run's dtype and writes the result
to the GGUF cache (gguf_cache.py): a 7B Q4_K_M file of 4 GB becomes 27 GB of float32 weights in
memory, and as much again on disk. `loading.run` calls `check_model` before the model is located (a
local file, before its fingerprint reads it whole) and again once it is (then a cache hit is known),
both before anything is converted; --force-load skips the check.

What a load needs (`needs`, pure arithmetic on the header's element count):

- converting (no complete cache entry, or --no-cache): the float weights plus CONVERT_EXTRA bytes
  per element in memory, at the peak, while the dequantized tensors and the model are both held;
- writing the cache entry (converting with the cache on): the float weights plus gguf_cache's
  TOKENIZER_MARGIN and KEEP_FREE on the cache's disk, the rule gguf_cache applies when it writes;
- a cache hit: the float weights in memory and no disk; none with --device-map, which places the
  layers on their devices as they are read;
- under torchrun, each process of the machine (LOCAL_WORLD_SIZE) loads a copy of its own.

What is free (`free_here`): MemAvailable of /proc/meminfo on Linux; elsewhere psutil's available
memory where psutil is installed (accelerate, which the transformers backend needs, installs it),
else the machine's whole memory from os.sysconf where the platform gives it; nothing known, no
refusal. The disk is that of the cache folder, or of its nearest existing parent (shutil.disk_usage).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelError

# Bytes per weight, beyond the float weights themselves, that a conversion holds at its peak:
# dequantized tensors and the model side by side, less what transformers lets go as it fills the
# model. Measured with transformers 5.25, torch 2.13, gguf 0.19 on the CPU (peak RSS, VmHWM, over the
# RSS before the load): SmolLM2 135M Q4_1, a first load through gguf_cache (tokenizer, conversion,
# entry written), 0.94 GB in float32 (7.0 bytes a weight) and 0.68 GB in bfloat16 (5.1); a 0.95B
# Llama-shaped Q4_K file with a 32k vocabulary (AutoModelForCausalLM and save_pretrained) 5.1 and 3.5
# bytes a weight. So 3 bytes over the float weights: 1.75x their size in float32, 2.5x in bfloat16 or
# float16; writing the entry adds nothing to the peak. Gemma 3 270M Q4_K_M peaks higher, at 3.1 GB in
# either dtype, 1.2 GB (float32) to 1.8 GB (bfloat16) over this rule: its 262k-token vocabulary and
# its embedding, 63% of its weights, dominate a model that small. A cache hit maps the entry's
# safetensors and reads them as it scores: the float weights.
CONVERT_EXTRA = 3
LOCAL_WORLD_ENV = "LOCAL_WORLD_SIZE"


@dataclass(frozen=True)
class Need:
    """Bytes a load needs: memory at its peak, and disk for the cache entry it writes."""

    memory: int
    disk: int = 0


@dataclass(frozen=True)
class Free:
    """Bytes free: memory (None: not known) and its kind ("available", or "in all" where only the
    machine's whole memory is known); disk where the cache is written (None: not known), and where."""

    memory: int | None
    disk: int | None = None
    memory_kind: str = "available"
    disk_where: str = ""


def needs(
    n_elements: int,
    bytes_per_element: int,
    *,
    converts: bool,
    writes_cache: bool,
    placed: bool = False,
    copies: int = 1,
) -> Need:
    """What loading a GGUF of `n_elements` weights in a dtype of `bytes_per_element` needs: to convert
    it (`converts`) and write the cache entry (`writes_cache`), or to load a cache hit; `placed`
    (--device-map) puts a hit's layers on their devices as they are read; `copies` processes load it
    on this machine at once."""
    from .gguf_cache import KEEP_FREE, TOKENIZER_MARGIN

    floats = n_elements * bytes_per_element
    if converts:
        memory = floats + CONVERT_EXTRA * n_elements
    else:
        memory = 0 if placed else floats
    disk = floats + TOKENIZER_MARGIN + KEEP_FREE if converts and writes_cache else 0
    return Need(memory * copies, disk * copies)


def shortfalls(need: Need, free: Free) -> list[str]:
    """What does not fit, each as "N GB of memory, M GB available" (or of disk, free in the cache's
    folder); empty when everything fits or what is free is not known."""
    out = []
    if need.memory and free.memory is not None and need.memory > free.memory:
        out.append(f"{gb(need.memory)} of memory, {gb(free.memory)} {free.memory_kind}")
    if need.disk and free.disk is not None and need.disk > free.disk:
        where = f" in {free.disk_where}" if free.disk_where else ""
        out.append(f"{gb(need.disk)} of disk for its cache entry, {gb(free.disk)} free{where}")
    return out


def gb(n: int | float) -> str:
    return f"{n / 1e9:.1f} GB"


def refusal(name: str, file_bytes: int, file_type: str | None, floats: int, dtype: str, converts: bool, short) -> str:
    """The one line for a GGUF that will not fit (`short`: what `shortfalls` found), with the sizes
    and what to do instead."""
    what = "converting it needs" if converts else "loading it needs"
    no_cache = " (--no-cache converts it without writing the entry)" if any("disk" in s for s in short) else ""
    kind = f", {file_type}" if file_type else ""
    return (
        f"{name}: the transformers backend expands this GGUF ({gb(file_bytes)}{kind}) to {gb(floats)} of "
        f"{dtype} weights, and {what} {' and '.join(short)}{no_cache}; score it as it is quantized with "
        "--backend llama.cpp, or pass --force-load to try anyway"
    )


# ---------------------------------------------------------------------------- what is free here


def mem_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes; None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    parts = line.split()
                    return int(parts[1]) * (1024 if parts[2:3] == ["kB"] else 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_memory() -> tuple[int, str] | None:
    """(bytes, kind): MemAvailable on Linux ("available"), psutil's available memory elsewhere, else
    the machine's whole memory ("in all"); None when none of them can be read."""
    linux = mem_available()
    if linux is not None:
        return linux, "available"
    try:
        import psutil

        return int(psutil.virtual_memory().available), "available"
    except Exception:  # noqa: BLE001 - not installed, or it cannot say on this platform
        pass
    try:
        pages, page = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return (pages * page, "in all") if pages > 0 and page > 0 else None


def disk_free(folder: Path) -> tuple[int, Path] | None:
    """(free bytes, the folder measured): `folder`'s disk, or that of its nearest existing parent."""
    p = Path(folder).expanduser().absolute()
    for where in (p, *p.parents):
        if where.is_dir():
            try:
                return shutil.disk_usage(where).free, where
            except OSError:
                return None
    return None


def free_here(cache_root: Path | None) -> Free:
    """What is free on this machine: memory, and the disk of `cache_root` (None: no disk asked for)."""
    mem = available_memory()
    disk = disk_free(cache_root) if cache_root is not None else None
    return Free(
        memory=mem[0] if mem else None,
        memory_kind=mem[1] if mem else "available",
        disk=disk[0] if disk else None,
        disk_where=str(disk[1]) if disk else "",
    )


def local_copies() -> int:
    """The processes of this machine that each load the model (torchrun's LOCAL_WORLD_SIZE), else 1."""
    text = os.environ.get(LOCAL_WORLD_ENV, "")
    return int(text) if text.isdigit() and int(text) > 0 else 1


def cache_hit(fingerprint: str, dtype, root: Path) -> bool:
    """True when the GGUF cache under `root` holds a complete entry for this file and dtype that
    gguf_cache.load will read (ours alone, matching its manifest), so that nothing is converted."""
    from . import gguf_cache

    key = gguf_cache.entry_key(fingerprint, dtype)
    final = gguf_cache.entry_dir(root, key)
    if not os.path.lexists(final) or gguf_cache.untrusted(root, final):
        return False
    return gguf_cache.problem(final, key) is None


def check_gguf(
    path,
    dtype,
    *,
    use_cache: bool = True,
    fingerprint: str | None = None,
    placed: bool = False,
    root: Path | None = None,
) -> None:
    """ModelError (one line) when loading the GGUF at `path` with the transformers backend in the
    torch `dtype` will not fit this machine's memory, or the cache entry it writes its disk.

    Without `fingerprint` (before the file is fingerprinted) a cache hit is assumed unless
    `use_cache` is False, so only what any load needs is checked; with it, whether the cache holds the
    converted model decides. `placed`: --device-map. `root`: the cache folder (cachedir.cache_root())."""
    from .cachedir import cache_root
    from .gguf_file import read_header

    path = Path(path)
    header = read_header(path)
    converts = not use_cache
    if use_cache and fingerprint is not None:
        root = cache_root() if root is None else root
        converts = not cache_hit(fingerprint, dtype, root)
    writes = converts and use_cache
    need = needs(
        header.n_elements, dtype.itemsize, converts=converts, writes_cache=writes, placed=placed, copies=local_copies()
    )
    if not need.memory and not need.disk:
        return
    free = free_here((cache_root() if root is None else root) if writes else None)
    short = shortfalls(need, free)
    if short:
        floats, dtype_name = header.float_bytes(dtype.itemsize), str(dtype).removeprefix("torch.")
        raise ModelError(refusal(path.name, header.file_size, header.file_type, floats, dtype_name, converts, short))


def check_model(spec: str, dtype, *, use_cache: bool = True, placed: bool = False, located=None) -> None:
    """`check_gguf` for a run's --model: before it is located (`located` None), a local GGUF file
    or an Ollama model's blob, a cache hit assumed (so that a file too big for any load is refused before its fingerprint reads
    it whole); once located (a locate.Located), any GGUF, knowing whether the cache holds it."""
    if located is None:
        from . import ollama
        from .locate import starts_as_gguf

        p = (ollama.blob_of(spec) or Path("/nonexistent")) if ollama.is_ollama(spec) else Path(spec).expanduser()
        if ollama.is_ollama(spec) and not _header_reads(p):
            return  # a damaged blob: locating it checks its digest, the better reason to give
        if p.is_file() and (spec.lower().endswith(".gguf") or starts_as_gguf(p)):  # an Ollama blob has no suffix
            check_gguf(p, dtype, use_cache=use_cache, placed=placed)
    elif located.kind == "gguf":
        fp = located.info["fingerprint"]
        check_gguf(located.info["path"], dtype, use_cache=use_cache, fingerprint=fp, placed=placed)


def _header_reads(path: Path) -> bool:
    from .gguf_file import read_header

    try:
        read_header(path)
    except (ModelError, OSError):
        return False
    return True
