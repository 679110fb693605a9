"""What names a model, for the resume signature, the report and the GGUF cache key.

    from base_bench.backends.identity import fingerprint, weights_fingerprint, package_version
    fingerprint(Path("model.gguf"))       # content fingerprint of a file or a directory
    weights_fingerprint(model)            # of a model in memory, without copying it
    tensors_fingerprint(state_dict)       # the same, of named tensors (an adapter's weights)
    package_version("transformers")       # '5.17.0', or None when not installed

No backend-specific code lives here, so every backend (and the GGUF cache) can use it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def package_version(pkg: str) -> str | None:
    """The installed version of `pkg` (None if it is not installed), as reports and cache keys record it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(pkg)
    except PackageNotFoundError:
        return None


FINGERPRINT_SCHEME = "content/2"  # recorded next to the fingerprint; bump when the scheme changes
FULL_HASH_LIMIT = 256 << 20  # files up to this size are hashed whole
EDGE_BYTES = 8 << 20  # larger files: this much of the head and of the tail ...
SAMPLE_BLOCKS, SAMPLE_BYTES = 1024, 64 << 10  # ... and this many blocks this big, evenly spaced between


def file_digest(path: Path) -> str:
    """SHA-256 (hex) of a file's size and content, read in full up to FULL_HASH_LIMIT (256 MiB).

    A larger file is hashed from its size, its first and last 8 MiB, and 1024 blocks of 64 KiB
    evenly spaced between them: 80 MiB read whatever the size (a 140 GB file read whole would take
    minutes, at every run). The trade-off: two large files that differ only between the sampled blocks
    get the same digest. Different checkpoints, quantisations or conversions of a model differ in
    nearly every tensor, so in the metadata at the head and in most sampled blocks; a change
    confined to one small tensor of a huge file can go unseen.
    """
    size = path.stat().st_size
    h = hashlib.sha256(f"{size}\n".encode())
    with path.open("rb") as f:
        if size <= FULL_HASH_LIMIT:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
            return h.hexdigest()
        h.update(f.read(EDGE_BYTES))
        middle = size - 2 * EDGE_BYTES
        step = middle // SAMPLE_BLOCKS
        for i in range(SAMPLE_BLOCKS):
            f.seek(EDGE_BYTES + i * step)
            h.update(f.read(min(SAMPLE_BYTES, step)))
        f.seek(size - EDGE_BYTES)
        h.update(f.read(EDGE_BYTES))
    return h.hexdigest()


def fingerprint(path: Path) -> str:
    """A content fingerprint of a model file or directory (32 hex digits): `file_digest` of the
    file, or of every file of the directory with its relative path. Names and places do not
    count for a file, so a moved or renamed model keeps its fingerprint."""
    if path.is_file():
        return hashlib.sha256(f"{FINGERPRINT_SCHEME}\n{file_digest(path)}".encode()).hexdigest()[:32]
    h = hashlib.sha256(f"{FINGERPRINT_SCHEME} dir\n".encode())
    for p in sorted(p for p in path.rglob("*") if p.is_file() and ".cache" not in p.relative_to(path).parts):
        h.update(f"{p.relative_to(path).as_posix()}:{file_digest(p)}\n".encode())
    return h.hexdigest()[:32]


def weights_fingerprint(model) -> str:
    """A short hash that changes when any weight changes, computed without copying the model.

    Tensors on the CPU are hashed byte for byte (zero-copy views). Tensors elsewhere (a GPU) are
    summarized on their device, with no full-size temporary: the float64 sum and L2 norm, and 256
    evenly spaced elements. A training step moves every sum, so two steps never share a fingerprint.
    """
    named = dict(model.named_parameters())
    named.update(model.named_buffers())
    return tensors_fingerprint(named)


def tensors_fingerprint(named: dict) -> str:
    """`weights_fingerprint` of a {name: tensor} dict (a state dict, an adapter's weights)."""
    import torch

    h = hashlib.sha256()
    for name in sorted(named):
        t = named[name].detach()
        if hasattr(t, "to_local"):  # a DTensor (FSDP2): this rank's shard
            t = t.to_local()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}\n".encode())
        if t.device.type == "meta" or t.numel() == 0:
            continue
        if t.device.type == "cpu":
            h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy())
        else:
            flat = t.reshape(-1)
            idx = torch.linspace(0, flat.numel() - 1, min(256, flat.numel()), device=t.device).long()
            stats = torch.stack([flat.sum(dtype=torch.float64), torch.linalg.vector_norm(flat, dtype=torch.float64)])
            h.update(stats.cpu().numpy().tobytes())
            h.update(flat[idx].to(torch.float64).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash of what the tokenizer does: its serialized fast tokenizer, else its vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        text = backend.to_str()
    else:
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        text = type(tokenizer).__name__ + repr(sorted(vocab.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
