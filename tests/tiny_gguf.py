"""A tiny llama-architecture GGUF file written on the spot, for fast tests of the GGUF path.

    path = write_tiny_gguf(tmp_path / "tiny.gguf")            # random Q8_0/F32 weights, seeded
    path = write_tiny_gguf(tmp_path / "other.gguf", seed=1)   # same size, other weights
    path = write_tiny_gguf(tmp_path / "bos.gguf", add_bos=True)  # tokenizer.ggml.add_bos_token set
    path = write_bare_gguf(tmp_path / "frob.gguf", "frobnicator")  # one tensor, no tokenizer, any architecture

The vocabulary and merges are those of tiny.tiny_tokenizer() (byte-level BPE, "gpt2" in GGUF
terms), so transformers builds the tokenizer from the file's metadata as it does for a real one.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np

from tiny import tiny_tokenizer

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, CONTEXT = 32, 64, 2, 4, 2, 256


def _tokenizer_metadata():
    tok = tiny_tokenizer()
    tokens = [t for t, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1])]
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    types = [3 if t in ("<s>", "</s>") else 1 for t in tokens]  # 3: control, 1: normal
    return tokens, merges, types


def write_tiny_gguf(
    path,
    seed: int = 0,
    quantized: bool = True,
    add_bos: bool = False,
    file_type: int | None = None,
    chat_template: str | None = None,
) -> Path:
    """Write a 2-layer llama GGUF (embedding and projections Q8_0 when `quantized`, norms F32), with
    tokenizer.ggml.add_bos_token = `add_bos`, general.file_type = `file_type` and
    tokenizer.chat_template = `chat_template` when given."""
    path = Path(path)
    tokens, merges, types = _tokenizer_metadata()
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"tiny-llama-{seed}")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_add_bos_token(add_bos)
    if file_type is not None:
        w.add_file_type(file_type)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    def tensor(name, shape, scale=0.5):
        # numpy shape (out, in); the writer stores it reversed, as GGUF does.
        data = (rng.standard_normal(shape) * scale).astype(np.float32)
        if quantized and len(shape) == 2:
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, data)

    head_dim = HIDDEN // HEADS
    tensor("token_embd.weight", (len(tokens), HIDDEN), 1.0)
    for i in range(LAYERS):
        tensor(f"blk.{i}.attn_norm.weight", (HIDDEN,), 0.1)
        tensor(f"blk.{i}.attn_q.weight", (HIDDEN, HIDDEN))
        tensor(f"blk.{i}.attn_k.weight", (KV_HEADS * head_dim, HIDDEN))
        tensor(f"blk.{i}.attn_v.weight", (KV_HEADS * head_dim, HIDDEN))
        tensor(f"blk.{i}.attn_output.weight", (HIDDEN, HIDDEN))
        tensor(f"blk.{i}.ffn_norm.weight", (HIDDEN,), 0.1)
        tensor(f"blk.{i}.ffn_gate.weight", (FFN, HIDDEN))
        tensor(f"blk.{i}.ffn_up.weight", (FFN, HIDDEN))
        tensor(f"blk.{i}.ffn_down.weight", (HIDDEN, FFN))
    tensor("output_norm.weight", (HIDDEN,), 0.1)
    tensor("output.weight", (len(tokens), HIDDEN), 1.0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_bare_gguf(path, architecture: str = "llama") -> Path:
    """A well-formed GGUF with one tensor and no tokenizer: readable, but not a model to load."""
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_tensor("x", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
