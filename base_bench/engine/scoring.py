"""Turn items into token ids: the model contract every backend keeps, and the batching helpers around it.

    enc = encode_item(tokenizer, item, add_bos=False, window=2048)   # an `Encoded` item
    order = length_order(encoded)                                     # longest packed row first
    scores = score_in_batches(backend_scorer, encoded, batch_size=8)  # [[ChoiceScore] * 4] per item
    scores = score_in_batches(backend_scorer, encoded, batch_tokens=4096)  # rows packed full

The model contract
------------------
A scorer gets `Encoded` items, already tokenized, and returns one `ChoiceScore` per continuation:

* `Encoded.context` is the context's token ids, from `tokenizer(context, add_special_tokens=False)`,
  with the tokenizer's BOS id put in front only when `--add-bos` is set. Nothing else is added: no
  chat template, no separator, no EOS.
* `Encoded.continuations[k]` is the k-th continuation's ids, tokenized on its own with
  `add_special_tokens=False`. Every continuation starts with whitespace, so the whitespace is part
  of the continuation's first token(s), never of the context.
* The scored sequence for choice k is `context + continuations[k]`. Its score is the sum over the
  continuation's tokens of log p(token | everything before it), with log_softmax taken in float32
  whatever dtype the model runs in, plus the number of those tokens. The mean is sum / count.
* If `context + continuation` is longer than the model's window, the context is cut from the left
  (after a BOS, which stays) to `window - longest continuation` tokens, the same cut for all four
  choices, and the item is marked truncated.

Every backend implements it (backends/): the transformers backend's torch scorers live in
`backends/transformers_scorers.py`, llama.cpp's in `backends/llama_cpp.py`. This module imports no
model library, so a backend that needs no torch never loads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ScoringError
from ..items.records import ChoiceScore, Item
from .packing import Batching, length_key, longest_first


@dataclass(frozen=True)
class Encoded:
    id: str
    context: tuple[int, ...]
    continuations: tuple[tuple[int, ...], ...]
    truncated: bool = False

    @property
    def packed_length(self) -> int:
        """Tokens a packed row feeds the model: the context, and each continuation but its last token."""
        return len(self.context) + sum(len(c) - 1 for c in self.continuations)


def encode_item(tokenizer, item: Item, add_bos: bool = False, window: int | None = None) -> Encoded:
    """Tokenize one item under the contract above, cutting the context from the left if needed."""
    ctx = list(tokenizer(item.context, add_special_tokens=False)["input_ids"])
    conts = [tuple(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in item.continuations]
    for k, c in enumerate(conts):
        if not c:
            raise ScoringError(f"item {item.id}: continuation {k} tokenizes to nothing")
    bos = []
    if add_bos:
        if tokenizer.bos_token_id is None:
            raise ScoringError("--add-bos was given but the tokenizer has no BOS token")
        bos = [tokenizer.bos_token_id]
    truncated = False
    if window is not None:
        room = window - max(len(c) for c in conts) - len(bos)
        if room < (0 if bos else 1):
            raise ScoringError(f"item {item.id}: a continuation alone does not fit the model's {window}-token window")
        if len(ctx) > room:
            ctx = ctx[len(ctx) - room :] if room > 0 else []
            truncated = True
    full_ctx = tuple(bos + ctx)
    if not full_ctx:
        raise ScoringError(f"item {item.id}: empty context and no BOS token; nothing to condition on")
    return Encoded(item.id, full_ctx, tuple(conts), truncated)


def length_order(encs: Sequence[Encoded]) -> list[int]:
    """Indices of `encs` in `packing.longest_first` order (longest packed row first)."""
    return sorted(range(len(encs)), key=lambda i: length_key(encs[i]))


def score_in_batches(
    scorer, encs: Sequence[Encoded], batch_size: int | None = None, *, batch_tokens: int | None = None
) -> list[list[ChoiceScore]]:
    """Score `encs` as the runner does: `batch_size` items per pass, or at most `batch_tokens` fed
    positions per pass (give one), with a packed scorer's rows up to the longest item's packed
    length (engine/packing.py). Results come back in input order."""
    plan = Batching(items=batch_size, tokens=batch_tokens)
    if not encs:
        return []
    order = longest_first(encs)
    row_length = order[0].packed_length
    set_row_length(scorer, plan.row_capacity(row_length))
    where: dict[int, list[int]] = {}
    for i, e in enumerate(encs):
        where.setdefault(id(e), []).append(i)
    got = {}
    for batch in plan.cut(order, row_length):
        for e, scores in zip(batch, scorer(batch)):
            got[where[id(e)].pop()] = scores
    return [got[i] for i in range(len(encs))]


def set_row_length(scorer, row_length: int) -> None:
    """Tell a scorer that packs several items into a row (one with a `row_length`) how long its
    rows may be; other scorers take one item at a time and are left as they are."""
    if hasattr(scorer, "row_length"):
        scorer.row_length = row_length


def max_abs_diff(a: Sequence[Sequence[ChoiceScore]], b: Sequence[Sequence[ChoiceScore]]) -> float:
    return max(abs(x.logprob - y.logprob) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def packing_probe(order: Sequence[Encoded]) -> list[Encoded]:
    """The real batch `check_packing` runs on: a median-length item and the two shortest (from a
    length-sorted list). The check puts the median item in a row of its own and the two shortest
    together in another, so padding and several items in one row are both exercised while the plain
    path, four rows per item, stays cheap."""
    return list(dict.fromkeys([order[len(order) // 2], *order[-2:][::-1]])) if order else []
