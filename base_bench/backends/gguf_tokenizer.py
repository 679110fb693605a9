"""A GGUF file's tokenizer, read with the `tokenizers` library alone: no torch, no transformers.

    tokenizer, record = load_tokenizer("model.gguf")           # converted once, then from the GGUF cache
    tokenizer("Hello", add_special_tokens=False)["input_ids"]  # what a transformers tokenizer returns
    tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id

The llama.cpp backend scores the ids of the HF tokenizer that transformers converts from the GGUF's
metadata, the same ids the transformers backend scores. The conversion is transformers' own, and
it needs torch (transformers reads GGUF metadata in modeling_gguf_pytorch_utils, which imports
torch and fails without it), so it runs once per file, in a child process of its own, and its
result is kept in the GGUF cache (gguf_cache.py): the tokenizer.json and tokenizer_config.json that
`save_pretrained` writes. A run reads those with the `tokenizers` library (`GGUFTokenizer`), so the
process that scores never imports torch or transformers. Reading Gemma 3's 262k-token tokenizer
this way holds about 0.1 GB.

`GGUFTokenizer` keeps the part of a transformers tokenizer that `evaluate()` uses: called on a text
(or a list of texts) with `add_special_tokens`, it returns {"input_ids": ..., "attention_mask": ...};
`bos_token_id`, `eos_token_id`, `pad_token_id`, `unk_token_id` (None when the tokenizer has none);
`chat_template` (the GGUF's, where transformers saved one; None otherwise);
`backend_tokenizer`, whose serialization names the tokenizer in a run's fingerprint, as it does for
the transformers tokenizer read from the same files (so runs started with one resume with the other).

Each conversion is checked before it is cached: the child process gives transformers' ids for the
texts of the bundled set (1,750 contexts and continuations) and its special-token ids, and the
`GGUFTokenizer` read from the written files must give the same, or the file is refused (ModelError),
with the number of texts that differ.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

from ..errors import ModelError
from .identity import fingerprint

SPECIAL = ("bos", "eos", "pad", "unk")

# Run by `python -c` in the child: convert, save, and print transformers' ids for the texts on stdin.
_CONVERT = """
import json, sys
from pathlib import Path
try:
    from transformers import AutoTokenizer
    from transformers.utils import logging
    logging.set_verbosity_error()
    gguf, out = Path(sys.argv[1]), sys.argv[2]
    texts = json.load(sys.stdin)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.save_pretrained(out)
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    special = {k: getattr(tok, k + "_token_id") for k in ("bos", "eos", "pad", "unk")}
    print(json.dumps({"ids": ids, "special": special}))
except Exception as exc:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    print(json.dumps({"error": f"{type(exc).__name__}: {first}" if isinstance(exc, ImportError) else first}))
    sys.exit(1)
"""


class GGUFTokenizer:
    """A converted tokenizer (tokenizer.json and tokenizer_config.json) read with `tokenizers`."""

    def __init__(
        self, backend, special_tokens: dict[str, str | None], name_or_path: str = "", chat_template: str | None = None
    ):
        self._tokenizer = backend
        self.name_or_path = name_or_path
        self.chat_template = chat_template  # the GGUF's tokenizer.chat_template, as transformers saved it
        for k in SPECIAL:
            token = special_tokens.get(k)
            setattr(self, f"{k}_token", token)
            setattr(self, f"{k}_token_id", None if token is None else backend.token_to_id(token))

    @classmethod
    def from_dir(cls, folder) -> GGUFTokenizer:
        """Read the tokenizer that `save_pretrained` wrote into `folder`."""
        from tokenizers import Tokenizer

        folder = Path(folder)
        backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
        special: dict[str, str | None] = {}
        template = None
        for name in ("tokenizer_config.json", "special_tokens_map.json"):  # the second wins, as in transformers
            path = folder / name
            if path.is_file():
                cfg = json.loads(path.read_text(encoding="utf-8"))
                special.update({k: _content(cfg[f"{k}_token"]) for k in SPECIAL if f"{k}_token" in cfg})
                template = cfg.get("chat_template") if isinstance(cfg.get("chat_template"), str) else template
        jinja = folder / "chat_template.jinja"  # where newer transformers save it
        if jinja.is_file():
            template = jinja.read_text(encoding="utf-8")
        _trim_heap()
        return cls(backend, special, str(folder), template or None)

    @property
    def backend_tokenizer(self):
        """The `tokenizers.Tokenizer` (tokenizer_fingerprint serializes it)."""
        return self._tokenizer

    def __call__(self, text, add_special_tokens: bool = True) -> dict:
        if isinstance(text, str):
            ids = self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
            return {"input_ids": ids, "attention_mask": [1] * len(ids)}
        encs = self._tokenizer.encode_batch(list(text), add_special_tokens=add_special_tokens)
        return {"input_ids": [e.ids for e in encs], "attention_mask": [[1] * len(e.ids) for e in encs]}

    def get_vocab(self) -> dict[str, int]:
        return self._tokenizer.get_vocab(with_added_tokens=True)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def __repr__(self) -> str:
        return f"GGUFTokenizer({self.name_or_path!r}, vocabulary {len(self)})"


def _content(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _trim_heap() -> None:
    """Give the heap that parsing tokenizer.json freed back to the system (glibc's malloc_trim;
    nothing elsewhere). Gemma 3's tokenizer.json leaves about 0.2 GB of it, which RSS keeps otherwise."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError, TypeError):
        pass


def probe_texts() -> list[str]:
    """The texts a conversion is checked on: every context and continuation of the bundled set."""
    from ..items.dataset import bundled_path, load_dataset_file

    return [t for it in load_dataset_file(bundled_path()).items for t in (it.context, *it.continuations)]


def convert(gguf: Path, folder: Path) -> None:
    """Convert the tokenizer of `gguf` with transformers, in a child process, into `folder`; check
    that `GGUFTokenizer` reads back transformers' ids (ModelError if not, or if it cannot convert)."""
    texts = probe_texts()
    p = subprocess.run(
        [sys.executable, "-c", _CONVERT, str(gguf), str(folder)],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
    )
    lines = p.stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1]) if lines else {}
    except ValueError:
        got = {}
    if p.returncode != 0 or "ids" not in got:
        why = got.get("error") or (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1][:300]
        raise ModelError(f"could not build the tokenizer of {gguf} with transformers: {why}")
    tok = GGUFTokenizer.from_dir(folder)
    differ = [t for t, ids in zip(texts, got["ids"]) if tok(t, add_special_tokens=False)["input_ids"] != ids]
    special = {k: getattr(tok, f"{k}_token_id") for k in SPECIAL}
    if differ or special != got["special"]:
        what = (
            f"{len(differ)} of {len(texts)} texts of the bundled set"
            if differ
            else f"the special tokens ({special} against {got['special']})"
        )
        raise ModelError(
            f"the tokenizer transformers converts from {gguf} reads back with other ids through the "
            f"tokenizers library ({what}); score this file with --backend transformers"
        )


def load_tokenizer(path, use_cache: bool = True):
    """(tokenizer, cache record): the `GGUFTokenizer` of the GGUF at `path`, from the GGUF cache,
    converted first (in a child process) when the cache has no entry for this file."""
    from . import gguf_cache

    path = Path(path).expanduser().resolve()
    try:
        fp = fingerprint(path, remember=use_cache)  # --no-cache: the digest is not kept in the cache folder either
        return gguf_cache.load_tokenizer(
            path, fp, lambda folder: convert(path, folder), GGUFTokenizer.from_dir, use_cache=use_cache
        )
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - one line for the user
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ModelError(f"could not read the tokenizer converted from {path}: {first}") from None
