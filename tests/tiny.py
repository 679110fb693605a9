"""Tiny random models and a tokenizer trained on the spot, for fast tests without the network.

tok = tiny_tokenizer()                 # byte-level BPE, trained on CORPUS, BOS "<s>", no pad token
model = tiny_model("llama", tok)       # random weights from a seeded config ("llama", "gpt2", "gemma3")
save_tiny(tmp_path, "llama")           # a local model directory the CLI can load
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, Gemma3TextConfig, GPT2Config, LlamaConfig, PreTrainedTokenizerFast

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def add(a, b):\n    return a + b\n",
    "She put the keys in the drawer and left for work.",
    "Water boils at 100 degrees Celsius at sea level.",
    "If all cats are mammals and Tom is a cat, then Tom is a mammal.",
    "SELECT name FROM users WHERE id = 3;",
    "The train left at noon and arrived three hours later.",
    "0123456789 + - * / = ( ) [ ] { } , . ; : ' \" ! ?",
] * 20
GEMMA3_WINDOW = 6  # the tiny Gemma 3's sliding window, in positions


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tk.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>")


def tiny_config(kind: str, vocab: int, window: int = 256):
    if kind == "llama":
        return LlamaConfig(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=window,
            bos_token_id=0,
            eos_token_id=1,
            tie_word_embeddings=False,
        )
    if kind == "gpt2":
        return GPT2Config(
            vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=window, bos_token_id=0, eos_token_id=1
        )
    if kind == "gemma3":  # a sliding-window layer and a full one; the window is shorter than the items
        return Gemma3TextConfig(
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            sliding_window=GEMMA3_WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            max_position_embeddings=window,
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )
    raise ValueError(kind)


def tiny_model(kind: str, tok, window: int = 256, seed: int = 0, dtype=torch.float32):
    torch.manual_seed(seed)
    cfg = tiny_config(kind, len(tok), window)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    # Random init gives near-uniform predictions; widen the logits so that scores differ clearly.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    return model.eval()


def save_tiny(path, kind: str = "llama", window: int = 256, seed: int = 0):
    tok = tiny_tokenizer()
    model = tiny_model(kind, tok, window, seed)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
