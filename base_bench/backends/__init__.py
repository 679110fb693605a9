"""Backends: the one seam between `evaluate()` and a model.

    from base_bench.backends import as_backend
    backend = as_backend(model, tokenizer)   # a transformers model (or its DDP/FSDP wrapper), a
                                             # llama_cpp.Llama, or a Backend already
    with backend.held():                     # eval mode and no gradients, undone afterwards
        scorer, packing = backend.pick_scorer(longest_first, pad_id, ranks)
        scores = scorer(batch)               # Encoded items in, one ChoiceScore per continuation out

Every backend scores the token ids that `engine.scoring.encode_item` made with the (HF) tokenizer,
under the model contract that `engine/scoring.py` documents; `evaluate()` asks the backend for what it
needs (window, vocabulary size, device, identity) and never looks at the model itself. A new backend
is one more subclass of `Backend`, never a second path through `evaluate()`.

- `transformers.py`: torch models from transformers (Hub ids, exports, GGUF files dequantized
  through `gguf_cache.py`), also wrapped in DDP or FSDP, and PEFT adapters;
- `llama_cpp.py`: a GGUF file run by llama.cpp itself, through llama-cpp-python;
- `vllm.py`: a Hub id or a local folder run by `vllm.LLM` in this process (vLLM's own venv), scored
  through its prompt log-probs (`prompt_logprobs.py`, shared with the server backend);
- `identity.py`: content fingerprints and versions, shared by all of them.
"""

from __future__ import annotations

from .base import Backend

__all__ = ["Backend", "as_backend"]


def as_backend(model, tokenizer) -> Backend:
    """The Backend for `model`: itself if it is one, a llama.cpp one for a `llama_cpp.Llama`, else
    the transformers one (which raises ModelError for anything that is not a causal LM)."""
    if isinstance(model, Backend):
        return model
    if type(model).__module__.startswith("llama_cpp"):
        from .llama_cpp import LlamaCppBackend

        return LlamaCppBackend.from_llama(model, tokenizer)
    from .transformers import TransformersBackend

    return TransformersBackend(model, tokenizer)
