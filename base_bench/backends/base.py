"""The `Backend` base class: what `evaluate()` asks of a model (see backends/__init__.py).

class MyBackend(Backend):
    name = "my-backend"
    def __init__(self, ...): self.device, self.dtype, self.window, self.vocab_size = ...
    def pick_scorer(self, longest_first, pad_id, ranks): return MyScorer(...), None
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    """Where a backend that needs no torch computes: what evaluate() reads of a torch.device.

    Device.parse("cuda:1") -> Device("cuda", 1); str() gives the name back, as str(torch.device) does."""

    type: str
    index: int | None = None

    @classmethod
    def parse(cls, name: str) -> Device:
        kind, _, idx = str(name).partition(":")
        return cls(kind, int(idx) if idx else None)

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


class Backend:
    """What `evaluate()` needs from a model. Subclasses set the attributes in their constructor.

    name         "transformers", "llama.cpp", "vllm", ...; recorded in the report, and in the resume
                 signature of every backend but the default one (so old runs still resume).
    device       a torch.device (or a `Device`, for a backend without torch): where inputs go, for
                 the report, the signature and OOM handling.
    dtype        what the weights compute in, as the report spells it ("float32", "bfloat16";
                 for llama.cpp the GGUF file type, "Q4_1", "Q4_K_M", ...).
    window       the longest sequence the model takes (None if it states none): contexts are cut
                 from the left to fit.
    vocab_size   rows of the embedding: every token id must be below it.
    expects_bos  the tokenizer (or the GGUF) is set to put BOS first; the card's rule does not,
                 so `evaluate` then prints a note.
    chat_template  the model file carries a chat template of its own (a GGUF's
                 tokenizer.chat_template), besides any its tokenizer carries; `evaluate` then notes
                 that the model looks chat-tuned.
    sharded      the weights are split across ranks (FSDP), so the fingerprint covers all ranks.
    threads      CPU threads the backend computes with, for the report.
    model_name   the Hub id or path the weights say they were loaded from (None if unknown); an
                 adapter's base model is checked against it.
    adapter      what the report records about a PEFT adapter applied to the model (None if none).
    """

    name = "?"
    device = None
    dtype = "?"
    window: int | None = None
    vocab_size = 0
    expects_bos = False
    chat_template = False
    sharded = False
    threads: int | None = None
    model_name: str | None = None
    adapter: dict | None = None

    def describe(self) -> dict:
        """Report fields about the model: model_type, n_parameters, bytes_in_memory, and the like."""
        return {}

    def fingerprint(self) -> str:
        """A short hash of the weights as they are now (for a model handed in from memory)."""
        raise NotImplementedError

    def spec(self) -> str:
        """How the report names a model handed in from memory."""
        return self.name

    def versions(self) -> dict:
        """The versions of the libraries that compute the scores, for the report."""
        return {}

    def held(self):
        """A context manager around scoring: eval mode, no gradients, and everything restored after."""
        return nullcontext()

    def pick_scorer(self, longest_first: list, pad_id: int, ranks) -> tuple[object, dict | None]:
        """(scorer, packing check record or None). `longest_first` is the items, longest first."""
        raise NotImplementedError
