"""The transformers backend's scorers: torch forward passes that keep the model contract of
engine/scoring.py (`Encoded` items in, one `ChoiceScore` per continuation out).

    scorer = PackedScorer(model, pad_id)       # or PlainScorer, CachedScorer
    scorer.row_length = 285                    # several items per row, rows up to 285 positions
    scores = scorer(batch)                     # batch: a list of engine.scoring.Encoded
    ok, diff = check_packing(model, packing_probe(order), pad_id)

Four scorers keep the contract:

* `score_reference`: the card read literally, one unpadded sequence per choice. Slow; it is the
  yardstick that tests and `bench/` compare the others against.
* `PlainScorer`: every choice is its own row in a padded batch.
* `PackedScorer`: each item is `context | cont0 | cont1 | cont2 | cont3`, with a 4D attention
  mask so that each continuation sees the context and itself only, and position ids that restart
  each continuation right after the context. Each context goes through the model once. Several
  items share a row when the runner gives a row length (engine/packing.py): the mask is then
  block-diagonal, one block per item, and the position ids restart at 0 for each item. On a model
  with sliding-window layers the mask is cut to the window by position, as the model would cut
  each item alone (a 4D mask reaches those layers as it is). `check_packing` compares it with
  `PlainScorer` on real items at start-up, one of them alone in a row and two sharing one; models
  that ignore custom masks or position ids fail that check and the runner falls back to
  `PlainScorer`.
* `CachedScorer`: the contexts fill a KV cache, which is repeated once per choice and extended by
  the continuations in a second pass. Also one pass per context; `bench/speed.py` measures it
  against packing, and the runner uses packing.

A continuation's last token is only ever predicted: no later position reads it, so no scorer but the
literal loop feeds it to the model. Rows start at column 0 and are padded on the right, so a
length-sorted batch wastes little. The
LM head and log_softmax run only at the positions that predict a continuation token: transformers'
`logits_to_keep` takes a boolean [batch, seq] mask of those positions.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..engine.batching import is_oom
from ..engine.packing import row_layout
from ..engine.scoring import Encoded, max_abs_diff
from ..errors import ScoringError
from ..items.records import ChoiceScore


def model_window(model, tokenizer=None) -> int | None:
    """The longest sequence the model takes, from its config (None when it states none)."""
    cfg = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        v = getattr(cfg, name, None)
        if isinstance(v, int) and v > 0:
            return v
    v = getattr(tokenizer, "model_max_length", None)
    return v if isinstance(v, int) and 0 < v < 1_000_000 else None


def unwrap(model):
    """The transformers model inside a DistributedDataParallel or FSDP1 wrapper, or inside a peft
    PeftModel (the base model, with the adapter's layers injected into it). Forward passes still go
    through the wrapper, which gathers the shards or applies the adapter and passes position_ids, a
    4D mask and logits_to_keep on to the base model; checks and signatures read the inner model."""
    while True:
        name = type(model).__name__
        if name in ("DistributedDataParallel", "FullyShardedDataParallel") and hasattr(model, "module"):
            model = model.module
        elif name.startswith("PeftModel") and hasattr(model, "get_base_model"):
            model = model.get_base_model()
        else:
            return model


def input_device(model) -> torch.device:
    """Where the input ids go: the device of the first parameter that is not on the meta device
    (weights offloaded by accelerate sit on 'meta' until their layer runs)."""
    for p in model.parameters():
        if p.device.type != "meta":
            return p.device
    return torch.device("cpu")


@torch.no_grad()
def score_reference(model, enc: Encoded) -> list[ChoiceScore]:
    """The card, literally: one forward pass per choice over context + continuation, no padding."""
    dev = input_device(model)
    out = []
    for cont in enc.continuations:
        ids = torch.tensor([list(enc.context) + list(cont)], device=dev)
        logits = model(input_ids=ids, use_cache=False).logits[0].float()
        logp = logits.log_softmax(-1)
        start = len(enc.context)
        total = sum(logp[start + j - 1, tok].item() for j, tok in enumerate(cont))
        out.append(ChoiceScore(total, len(cont)))
    return out


def _accepts(model, arg: str) -> bool:
    try:
        return arg in inspect.signature(unwrap(model).forward).parameters
    except (TypeError, ValueError):
        return False


class _Targets:
    """Which logits a batch needs, and which token each needed position must predict.

    `add(row, col, token, segment)` says that the logits at (row, col) score `token` into `segment`
    (one segment per choice). Several targets may share a position: in a packed row the last
    context position predicts the first token of all four continuations, and its logits are
    computed once.
    """

    def __init__(self, rows: int, cols: int):
        self.keep = torch.zeros((rows, cols), dtype=torch.bool)
        self.at: list[tuple[int, int]] = []  # (row, col) per target
        self.tokens: list[int] = []
        self.segments: list[int] = []

    def add(self, row: int, col: int, token: int, segment: int) -> None:
        self.keep[row, col] = True
        self.at.append((row, col))
        self.tokens.append(token)
        self.segments.append(segment)

    def sums(self, logits_at_keep: torch.Tensor, n_segments: int) -> list[float]:
        """Summed log-probs per segment from `logits_at_keep` [n_kept, vocab] (row-major order of `keep`)."""
        dev = logits_at_keep.device
        flat = torch.cumsum(self.keep.flatten().long(), 0).view(self.keep.shape) - 1
        at = torch.tensor(self.at)
        rows = flat[at[:, 0], at[:, 1]].to(dev)
        logp = logits_at_keep.float().log_softmax(-1)  # float32 whatever the model's dtype
        picked = logp[rows, torch.tensor(self.tokens, device=dev)]
        sums = torch.zeros(n_segments, dtype=torch.float64, device=dev)
        sums.index_add_(0, torch.tensor(self.segments, device=dev), picked.double())
        return sums.tolist()


class _BatchScorer:
    """Shared plumbing: a forward pass that returns logits only where `keep` is True.

    With transformers' `logits_to_keep` given a boolean [batch, seq] mask, the LM head runs on the
    kept positions only. A model that does not take such a mask gets an integer `logits_to_keep`
    (the LM head then runs from the first kept column on) or, failing that, a full forward; the
    kept positions are picked out afterwards. The mode found on the first batch is kept.
    """

    name = "?"

    def __init__(self, model, pad_id: int = 0):
        self.model = model
        self.pad_id = pad_id
        self.device = input_device(model)
        self.dtype = next(model.parameters()).dtype
        self.keep_mode = "mask" if _accepts(model, "logits_to_keep") else "full"

    def _logits_at(self, keep: torch.Tensor, reset=None, **kwargs) -> torch.Tensor:
        """`reset()`, if given, undoes what a failed attempt left behind before the next one: a
        transformers that takes no boolean `logits_to_keep` (5.17, for one) fails at the LM head,
        after the layers have already appended this pass to a KV cache."""
        n = int(keep.sum())
        if self.keep_mode == "mask":
            try:
                logits = self.model(**kwargs, logits_to_keep=keep.to(self.device)).logits
                if logits.ndim == 2 and logits.shape[0] == n:
                    return logits
            except (TypeError, ValueError, IndexError, RuntimeError) as exc:
                if is_oom(exc):  # out of memory says nothing about the mask; let the caller back off
                    raise
            self.keep_mode = "slice"
            if reset is not None:
                reset()
        if self.keep_mode == "slice":
            first = int(keep.any(0).nonzero()[0])
            logits = self.model(**kwargs, logits_to_keep=keep.shape[1] - first).logits
            return logits[keep[:, first:].to(logits.device)]
        return self.model(**kwargs).logits[keep.to(self.device)]

    def __call__(self, batch: Sequence[Encoded]) -> list[list[ChoiceScore]]:
        raise NotImplementedError


def _split(batch: Sequence[Encoded], sums: list[float]) -> list[list[ChoiceScore]]:
    out, i = [], 0
    for e in batch:
        out.append([ChoiceScore(sums[i + k], len(c)) for k, c in enumerate(e.continuations)])
        i += len(e.continuations)
    return out


class PlainScorer(_BatchScorer):
    """One row per (item, choice): `context | continuation | pad`."""

    name = "plain"

    @torch.no_grad()
    def __call__(self, batch: Sequence[Encoded]) -> list[list[ChoiceScore]]:
        rows = [(e, c) for e in batch for c in e.continuations]
        T = max(len(e.context) + len(c) - 1 for e, c in rows)
        ids = torch.full((len(rows), T), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), T), dtype=torch.long)
        tg = _Targets(len(rows), T)
        for r, (e, cont) in enumerate(rows):
            seq = list(e.context) + list(cont[:-1])  # the last token is predicted, never fed
            ids[r, : len(seq)] = torch.tensor(seq)
            mask[r, : len(seq)] = 1
            L = len(e.context)
            for j, tok in enumerate(cont):
                tg.add(r, L - 1 + j, tok, r)  # token j is predicted at position L - 1 + j
        pos = torch.arange(T).expand(len(rows), T)
        logits = self._logits_at(
            tg.keep,
            input_ids=ids.to(self.device),
            attention_mask=mask.to(self.device),
            position_ids=pos.to(self.device),
            use_cache=False,
        )
        return _split(batch, tg.sums(logits, len(rows)))


@dataclass(frozen=True)
class Packed:
    """A packed pass, before the model: ids, position ids and which position may attend to which
    ([rows, T, T], True where allowed), the targets, and the number of segments (one per choice)."""

    ids: torch.Tensor
    pos: torch.Tensor
    allowed: torch.Tensor
    targets: _Targets
    segments: int


def pack_tensors(batch: Sequence[Encoded], rows: Sequence[Sequence[int]], pad_id: int = 0) -> Packed:
    """Lay `batch` out in `rows` (indices into `batch`): each item `context | cont0[:-1] | cont1[:-1]
    | ...` where its row's previous item ends, position ids from 0 for each item (each continuation
    restarting right after its context), attention allowed within an item only (the context
    causally, each continuation to the context and causally to itself), padding on the right that
    attends to itself alone. Segments (choices) are numbered in batch order."""
    B = len(rows)
    T = max(sum(batch[i].packed_length for i in row) for row in rows)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    pos = torch.zeros((B, T), dtype=torch.long)
    allowed = torch.zeros((B, T, T), dtype=torch.bool)
    used = torch.zeros((B, T), dtype=torch.bool)
    first_segment = [0] * len(batch)
    for i in range(1, len(batch)):
        first_segment[i] = first_segment[i - 1] + len(batch[i - 1].continuations)
    tg = _Targets(B, T)
    for b, row in enumerate(rows):
        s = 0  # where the item starts in the row
        for i in row:
            e = batch[i]
            L = len(e.context)
            ids[b, s : s + L] = torch.tensor(e.context)
            pos[b, s : s + L] = torch.arange(L)
            allowed[b, s : s + L, s : s + L] = torch.ones(L, L, dtype=torch.bool).tril()
            off = s + L
            for k, cont in enumerate(e.continuations):
                n = len(cont) - 1  # the last token is predicted, never fed
                ids[b, off : off + n] = torch.tensor(cont[:-1], dtype=torch.long)
                pos[b, off : off + n] = torch.arange(L, L + n)
                allowed[b, off : off + n, s : s + L] = True
                allowed[b, off : off + n, off : off + n] = torch.ones(n, n, dtype=torch.bool).tril()
                for j, tok in enumerate(cont):  # token j is predicted where the one before it was fed
                    tg.add(b, s + L - 1 if j == 0 else off + j - 1, tok, first_segment[i] + k)
                off += n
            s = off
        used[b, :s] = True
    # Padding positions attend to themselves, so no attention row is empty (an empty row gives NaN,
    # and NaN times a zero weight would still leak into real rows).
    allowed |= torch.eye(T, dtype=torch.bool).expand(B, T, T) & ~used[:, :, None]
    return Packed(ids, pos, allowed, tg, first_segment[-1] + len(batch[-1].continuations))


def window_mask(pos: torch.Tensor, window: int) -> torch.Tensor:
    """[rows, T, T]: True where the key's position is less than `window` before the query's, as a
    sliding-window layer's own mask allows (positions, not columns: each item counts from 0)."""
    return (pos[:, :, None] - pos[:, None, :]) < window


class PackedScorer(_BatchScorer):
    """Rows of whole items, each `context | cont0 | cont1 | cont2 | cont3`, under a 4D mask.

    `row_length` None puts each item in a row of its own. An int packs several items into a row
    (engine/packing.py `row_layout`: first fit in the order given, under the batch's longest item
    or under `row_length`, whichever feeds fewer positions); the runner sets it to the run's row
    length. In a row the mask is block-diagonal, one block per item, and the position ids restart
    at 0 for each item, so an item sees exactly what it would see alone.
    """

    name = "packed"

    def __init__(self, model, pad_id: int = 0, row_length: int | None = None):
        super().__init__(model, pad_id)
        self.row_length = row_length
        self.window, self.window_layers = sliding_window(model)

    @torch.no_grad()
    def __call__(self, batch: Sequence[Encoded]) -> list[list[ChoiceScore]]:
        return self.score_rows(batch, row_layout([e.packed_length for e in batch], self.row_length))

    @torch.no_grad()
    def score_rows(self, batch: Sequence[Encoded], rows: Sequence[Sequence[int]]) -> list[list[ChoiceScore]]:
        """Score `batch` laid out in `rows` (lists of indices into `batch`, each row's items in order)."""
        if not batch:
            return []
        p = pack_tensors(batch, rows, self.pad_id)
        mask = self._mask(p.allowed)
        if self.window is not None and int(p.pos.max()) >= self.window:
            # A 4D mask is taken as it is, also by sliding-window layers: cut it to the window here,
            # by position, as the model's own mask would cut each item alone.
            windowed = self._mask(p.allowed & window_mask(p.pos, self.window))
            if self.window_layers is None:
                mask = windowed
            else:
                mask = {kind: windowed if kind == "sliding_attention" else mask for kind in self.window_layers}
        logits = self._logits_at(
            p.targets.keep,
            input_ids=p.ids.to(self.device),
            attention_mask=mask,
            position_ids=p.pos.to(self.device),
            use_cache=False,
        )
        return _split(batch, p.targets.sums(logits, p.segments))

    def _mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """The additive [B, 1, T, T] mask in the model's dtype, on its device."""
        mask = torch.zeros((allowed.shape[0], 1, *allowed.shape[1:]), dtype=self.dtype)
        mask.masked_fill_(~allowed[:, None], torch.finfo(self.dtype).min)
        return mask.to(self.device)


def sliding_window(model) -> tuple[int | None, tuple[str, ...] | None]:
    """(window, layer kinds) of a model with sliding-window attention layers; (None, None) without.

    The kinds are the model's `layer_types` (as in Gemma 3: "sliding_attention" and
    "full_attention"), whose forward then takes one mask per kind; None when every layer slides
    (Mistral), which takes one mask."""
    cfg = unwrap(model).config
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    window = getattr(cfg, "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        return None, None
    types = getattr(cfg, "layer_types", None)
    if types:
        if "sliding_attention" not in types:
            return None, None
        return window, tuple(sorted(set(types)))
    if getattr(cfg, "use_sliding_window", True) is False:
        return None, None
    return window, None


class CachedScorer(_BatchScorer):
    """Two passes: the contexts (left-padded) fill a KV cache, which is copied once per choice and
    extended by the continuations (right-padded). Each context is computed once, as in packing;
    the second pass attends to the cache instead of one long packed row.
    """

    name = "kv-cache"

    @torch.no_grad()
    def __call__(self, batch: Sequence[Encoded]) -> list[list[ChoiceScore]]:
        B = len(batch)
        K = len(batch[0].continuations)
        if any(len(e.continuations) != K for e in batch):
            raise ScoringError("the kv-cache scorer needs the same number of choices in every item of a batch")
        P = max(len(e.context) for e in batch)
        ids = torch.full((B, P), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, P), dtype=torch.long)
        pos = torch.zeros((B, P), dtype=torch.long)
        for b, e in enumerate(batch):
            L = len(e.context)
            ids[b, P - L :] = torch.tensor(e.context)
            mask[b, P - L :] = 1
            pos[b, P - L :] = torch.arange(L)
        dev = self.device
        keep_last = {} if self.keep_mode == "full" else {"logits_to_keep": 1}
        first = self.model(
            input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev), use_cache=True, **keep_last
        )
        logp0 = first.logits[:, -1].float().log_softmax(-1)  # predicts every continuation's first token
        conts = [c for e in batch for c in e.continuations]
        sums = [logp0[i // K, c[0]].item() for i, c in enumerate(conts)]
        C = max(len(c) for c in conts) - 1  # the last token of each continuation is predicted, never fed
        if C > 0:
            cache = first.past_key_values
            cache.batch_repeat_interleave(K)
            ids2 = torch.full((B * K, C), self.pad_id, dtype=torch.long)
            mask2 = torch.zeros((B * K, C), dtype=torch.long)
            pos2 = torch.zeros((B * K, C), dtype=torch.long)
            tg = _Targets(B * K, C)
            for r, c in enumerate(conts):
                L = len(batch[r // K].context)
                ids2[r, : len(c) - 1] = torch.tensor(c[:-1], dtype=torch.long)
                mask2[r, : len(c) - 1] = 1
                pos2[r] = torch.arange(L, L + C)
                for j in range(1, len(c)):
                    tg.add(r, j - 1, c[j], r)
            full_mask = torch.cat([mask.repeat_interleave(K, 0), mask2], 1)
            if tg.tokens:
                cache_kw = {"cache" if _accepts(self.model, "cache") else "past_key_values": cache}

                def back_to_contexts():  # a negative crop removes that many tokens in every transformers 5
                    extra = cache.get_seq_length() - P
                    if extra > 0:
                        cache.crop(-extra)

                logits = self._logits_at(
                    tg.keep,
                    reset=back_to_contexts,
                    input_ids=ids2.to(dev),
                    attention_mask=full_mask.to(dev),
                    position_ids=pos2.to(dev),
                    use_cache=True,
                    **cache_kw,
                )
                sums = [a + b for a, b in zip(sums, tg.sums(logits, B * K))]
        return _split(batch, sums)


def probe_rows(n: int) -> list[list[int]]:
    """The rows `check_packing` lays its probe out in: the first item alone (padded when the others
    together are longer), the others together in one row (padded when the first is longer)."""
    return [[0], list(range(1, n))] if n > 1 else [[0]] if n else []


def check_packing(model, batch: Sequence[Encoded], pad_id: int = 0) -> tuple[bool, float]:
    """Does the packed path agree with the plain path on this batch? Returns (ok, max |delta|).

    The packed pass puts the first item in a row of its own and all the others into one row
    (`probe_rows`), so both padding and several items in one row (block-diagonal mask, position ids
    restarting per item) are checked in one forward pass."""
    dtype = next(model.parameters()).dtype
    tol = 1e-3 if dtype == torch.float32 else 0.25
    try:
        packed = PackedScorer(model, pad_id).score_rows(batch, probe_rows(len(batch)))
    except Exception as exc:  # a model that rejects 4D masks or position ids
        if is_oom(exc):
            raise
        return False, float("inf")
    plain = PlainScorer(model, pad_id)(batch)
    diff = max_abs_diff(packed, plain)
    return diff <= tol, diff
