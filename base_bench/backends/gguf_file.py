"""Read a GGUF file's header and metadata, and say in one line what is wrong with a broken one.

    info = read_header(Path("model.gguf"))     # GGUFHeader; ModelError if it is not a usable GGUF
    info.architecture, info.file_type           # 'llama', 'Q4_1' ('Q4_K_M', 'F16', ...)
    info.metadata["tokenizer.ggml.add_bos_token"]
    info.n_elements, info.float_bytes(4)        # the weights' element count; their size as float32

Both backends check a .gguf with this before handing it to their loader: the `gguf` package
(transformers' reader) fails on a truncated file with "unpack_from requires a buffer of at least
..." or a numpy reshape error, and llama.cpp logs "failed to read key-value pairs". Here a file that
does not start with the GGUF magic is "not a GGUF file", and one that ends before its metadata,
its tensor table or the last byte of its tensor data is "truncated", with the sizes.

Only the header is parsed, in pure Python: the magic, the version, the key-value metadata (scalars
kept, arrays skipped but for their length, so a 250k-token vocabulary costs a fraction of a second),
the tensor table (each tensor's element count, summed: `n_elements`), and the alignment; the tensor
data is not read. So the size a model takes once dequantized (`float_bytes`, for the transformers
backend's memory check, memory_check.py) is known from the header alone, before anything is converted. The file type is the one the file
states (`general.file_type`, a llama.cpp `LLAMA_FTYPE_*`, named as llama.cpp's quantize tool names
it: Q4_K_M, not MOSTLY_Q4_K_M); None when the file states none.

A GGUF file is untrusted input, so every number in its header is bounded by the file's size before
it is used: a count of keys, tensors or array elements that the bytes left cannot hold means the
file ends before what it states ("truncated"), so no loop runs longer than the file is long; a tensor
with more than GGML_MAX_DIMS (4) dimensions, or more elements or bytes than the whole file, is
"damaged" (each dimension is bounded before they are multiplied, so no huge integer is ever built);
an unknown value or tensor type is named in one line.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ModelError

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4  # ggml.h: a tensor has at most 4 dimensions

# GGUF value types: id -> struct format of a scalar (8 string, 9 array are handled apart)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class _Truncated(Exception):
    pass


class _Damaged(Exception):
    """A tensor the file cannot hold, or one GGML would refuse; the message says which, in a few words."""


@dataclass(frozen=True)
class GGUFHeader:
    path: str
    version: int
    n_tensors: int
    metadata: dict = field(repr=False)  # scalar values; an array is kept as ("array", length)
    data_start: int
    data_end: int  # the byte after the last tensor's data
    file_size: int
    n_elements: int = 0  # the elements of every tensor, summed (each bounded by the file's size)

    @property
    def architecture(self) -> str | None:
        return self.metadata.get("general.architecture")

    @property
    def file_type(self) -> str | None:
        return file_type_name(self.metadata.get("general.file_type"))

    @property
    def add_bos_token(self) -> bool | None:
        v = self.metadata.get("tokenizer.ggml.add_bos_token")
        return bool(v) if v is not None else None

    def float_bytes(self, bytes_per_element: int) -> int:
        """The tensors' size once dequantized to a float type of `bytes_per_element` bytes (4 for
        float32, 2 for bfloat16 and float16): what the transformers backend holds in memory."""
        return self.n_elements * bytes_per_element


def file_type_name(ftype) -> str | None:
    """'Q4_K_M' for LLAMA_FTYPE_MOSTLY_Q4_K_M (15), 'F32' for ALL_F32, None for None; an id this
    `gguf` package does not know is named by its number."""
    if ftype is None:
        return None
    import gguf

    guessed = bool(int(ftype) & 1024)  # LLAMA_FTYPE_GUESSED: llama.cpp guessed it from the tensors
    try:
        name = gguf.LlamaFileType(int(ftype) & ~1024).name
    except ValueError:
        return f"ftype-{int(ftype)}"
    name = name.removeprefix("MOSTLY_").removeprefix("ALL_")
    return f"{name} (guessed)" if guessed else name


def _quant_size(ggml_type: int) -> tuple[int, int] | None:
    """(elements per block, bytes per block) of a GGML tensor type; None for a type `gguf` does not know."""
    import gguf

    try:
        return gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return None


def shown(text: str, limit: int = 60) -> str:
    """A name from the file, quoted and cut short for a one-line message (no newline gets through)."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


class _Reader:
    def __init__(self, buf, size: int):
        self.buf, self.size, self.pos = buf, size, 0

    def take(self, fmt: str):
        n = struct.calcsize("<" + fmt)
        if self.pos + n > self.size:
            raise _Truncated
        v = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += n
        return v[0] if len(v) == 1 else v

    def count(self, n: int, each: int) -> int:
        """`n`, a count from the file, if `n` things of at least `each` bytes fit in the bytes left; else
        the file ends before what it states. Every loop that follows is bounded by the file's size."""
        if n * each > self.size - self.pos:
            raise _Truncated
        return n

    def string(self, count_fmt: str) -> str:
        n = self.take(count_fmt)
        if self.pos + n > self.size:
            raise _Truncated
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def skip_strings(self, count: int, count_fmt: str) -> None:
        step = struct.calcsize("<" + count_fmt)
        for _ in range(self.count(count, step)):
            if self.pos + step > self.size:
                raise _Truncated
            (n,) = struct.unpack_from("<" + count_fmt, self.buf, self.pos)
            self.pos += step + n
        if self.pos > self.size:
            raise _Truncated


def read_header(path: Path) -> GGUFHeader:
    """Parse the header of the GGUF file at `path`; ModelError (one line) if it is not a GGUF file,
    is truncated or damaged, or cannot be read."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if size < 4 or f.read(4) != MAGIC:
                raise ModelError(f"{path}: not a GGUF file (it does not start with the bytes 'GGUF')")
            if size < 24:
                raise ModelError(
                    f"{path}: the GGUF file is truncated: it has {size} bytes, less than its 24-byte header"
                )
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(path, buf, size)
    except OSError as exc:
        raise ModelError(f"{path}: cannot read the file ({exc.strerror or type(exc).__name__})") from None


def _parse(path: Path, buf, size: int) -> GGUFHeader:
    r = _Reader(buf, size)
    r.pos = 4
    where = "header"
    try:
        version = r.take("I")
        if version not in (1, 2, 3):
            raise ModelError(f"{path}: GGUF version {version} is not one this reader knows (1 to 3)")
        cnt = "I" if version == 1 else "Q"  # version 1 counted in 32 bits
        w = struct.calcsize("<" + cnt)
        n_tensors, n_kv = r.take(cnt), r.take(cnt)
        where = "metadata"
        meta: dict = {}
        for _ in range(r.count(n_kv, w + 4 + 1)):  # a key-value pair: key length, value type, 1 byte at least
            key = r.string(cnt)
            vtype = r.take("I")
            meta[key] = _value(r, vtype, cnt, path, key)
        where = "tensor table"
        end = elements = 0
        for _ in range(r.count(n_tensors, w + 4 + 4 + 8)):  # name length, n_dims, type, offset at least
            name = r.string(cnt)
            stop, n = _tensor_end(r, cnt, path, name, size)
            end, elements = max(end, stop), elements + n
    except _Truncated:
        raise ModelError(f"{path}: the GGUF file is truncated: it ends inside its {where}, at {size} bytes") from None
    except _Damaged as exc:
        raise ModelError(f"{path}: the GGUF file is damaged: {exc}") from None
    align = meta.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or align <= 0:
        align = DEFAULT_ALIGNMENT
    data_start = -(-r.pos // align) * align
    data_end = data_start + end
    if data_end > size:
        raise ModelError(
            f"{path}: the GGUF file is truncated: it has {size} bytes, and its tensors end at byte "
            f"{data_end} ({data_end - size} bytes missing); download or copy it again"
        )
    return GGUFHeader(str(path), version, n_tensors, meta, data_start, data_end, size, elements)


def _tensor_end(r: _Reader, cnt: str, path: Path, name: str, size: int) -> tuple[int, int]:
    """Read one tensor's dimensions, type and offset; return where its data ends (from the data
    start) and its element count.

    A tensor is refused when it has more than GGML_MAX_DIMS dimensions or an unknown type, or when its
    element count or byte size exceeds the whole file. Each dimension is bounded before they are
    multiplied, so the product stays a small integer whatever the file says."""
    n_dims = r.take("I")
    if n_dims > GGML_MAX_DIMS:
        raise _Damaged(f"tensor {shown(name)} has {n_dims} dimensions; GGML allows at most {GGML_MAX_DIMS}")
    dims = [r.take(cnt) for _ in range(n_dims)]
    ggml_type, offset = r.take("I"), r.take("Q")
    quant = _quant_size(ggml_type)
    if quant is None:
        raise ModelError(f"{path}: tensor {shown(name)} has unknown type {ggml_type} (not a GGML type this gguf knows)")
    block, type_size = quant
    most = (size // type_size + 1) * block  # more elements than this need more bytes than the file has
    n = 1
    for d in dims:
        if d > most:
            break
        n *= d
    else:
        if n <= most and n // block * type_size <= size:
            return offset + n // block * type_size, n
    shape = "x".join(map(str, dims))
    raise _Damaged(f"tensor {shown(name)} of shape {shape[:80]} holds more data than the whole file ({size} bytes)")


def _value(r: _Reader, vtype: int, cnt: str, path: Path, key: str):
    if vtype in _SCALARS:
        return r.take(_SCALARS[vtype])
    if vtype == _STRING:
        return r.string(cnt)
    if vtype == _ARRAY:
        etype, n = r.take("I"), r.take(cnt)
        if etype == _STRING:
            r.skip_strings(n, cnt)
        elif etype in _SCALARS:
            each = struct.calcsize("<" + _SCALARS[etype])
            r.pos += r.count(n, each) * each
        else:
            raise ModelError(f"{path}: metadata key {shown(key)} is an array of unknown type {etype}")
        return ("array", n)
    raise ModelError(f"{path}: metadata key {shown(key)} has unknown value type {vtype}")
