"""Scoring through an engine that returns prompt log-probs (a served model, or vLLM in-process), and
the check that such an engine's log-probs can be trusted.

    def engine(prompts: list[list[int]]) -> list[list[float | None]]: ...   # a `PromptLogprobs`
    record = check_engine(engine, vocab_size=49152, avoid=tokenizer.all_special_ids)  # or EngineCheckError
    scorer = PromptScorer(engine)
    scores = scorer(batch)            # Encoded items in, [[ChoiceScore] * 4] per item out

An engine takes token-id prompts and gives, for each prompt, one entry per prompt token: None for the
first token, then log p(token_i | tokens_<i). Nothing here knows where the numbers come from: an
HTTP server (backends/server.py) or `vllm.LLM` (backends/vllm.py) wraps itself in such a function.

`PromptScorer` keeps the model contract of engine/scoring.py: one prompt per choice, context +
continuation, the ids `encode_item` made (context and continuation tokenized apart, as the card
says); the score of a choice is the sum of its continuation tokens' log-probs.

`check_engine` is the server check, run on synthetic prompts (a fixed seed) before any item is
scored. A served model can return numbers that look right and are not: llama.cpp's server returns
log-probs for the generated token only (every choice scores 0), llama-cpp-python's are one position
off, and vLLM with prefix caching can return stale values for cached positions. The check:

1. shape: one finite log-prob per prompt token after the first (else the engine returns none for
   the prompt, or not one per token);
2. copy: a random sequence A of COPY_LENGTH distinct tokens, repeated (A A), must be far more
   likely the second time (a model copies from its context): the mean log-prob of the second copy
   must beat the first by COPY_MIN_GAIN nats. Log-probs paired with the wrong logits row show no
   copying at all;
3. alignment: A A with one token of the second copy replaced, at three places. A correct engine
   reports the same values as for A A up to that token, and a much lower one (ALIGN_MIN_DROP) at
   that token, which the first copy made predictable. Values one position early change before the
   replaced token; values one position late do not drop at it;
4. invariance: A A scored alone, inside a batch, and again after prompts that share its prefix
   (the alignment probes and a batch neighbour), and each probe's prefix against A A's: the largest
   difference (the spread) must not exceed SPREAD_MAX nats per token. A nonzero spread below it is
   recorded and printed as a note.

Every number the check computes (a mean, a gain, a drop, a spread) must be finite, and so must
every continuation's sum that PromptScorer makes: log-probs that are each finite (-1e308) can add
up past a float's range, and a report must hold no Infinity. Either is refused in one line.

The record it returns goes into the report (config.packing_check, the backend's start-up check).
`spread_max` (the command line's --max-spread) sets another limit for the invariance: a larger one
accepts an engine whose spread the card's check would refuse (bfloat16 kernels on a GPU can vary
with the batch they run in). The record keeps the limit used (invariance.threshold), and
`loosened(record)` is the non-official reason of a run checked under a limit above SPREAD_MAX.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence

from ..engine.scoring import Encoded
from ..errors import EngineCheckError, ScoringError, UsageError
from ..items import card
from ..items.records import ChoiceScore

__all__ = ["EngineCheckError", "PromptLogprobs", "PromptScorer", "check_engine", "check_spread_max", "loosened"]
log = logging.getLogger("base_bench")

PromptLogprobs = Callable[[list[list[int]]], list[list[float | None]]]

COPY_LENGTH = 32  # tokens in the random sequence that the copy test repeats
COPY_MIN_GAIN = 2.0  # nats: mean log-prob of the second copy over the first (SmolLM2-135M: 7.8)
ALIGN_MIN_DROP = 2.0  # nats: how much lower a replaced, no longer predictable token must score
MAX_LOGPROB = 1e-6  # a log-prob above this is a probability over 1: refused at start-up and while scoring
SPREAD_MAX = card.SPREAD_MAX  # nats per token: the most one prompt's log-probs may vary with what else is computed

KNOWN = (
    "known to work: vLLM (its OpenAI-compatible server, and vllm.LLM); known not to: llama-cpp-python's "
    "server (refuses token-id prompts, log-probs one position off) and llama.cpp's server (log-probs "
    "for the generated token only)"
)


class PromptScorer:
    """The model contract on a `PromptLogprobs` engine: one prompt per choice, the continuation's
    log-probs summed (in float64, in token order). `label` names the engine in error messages."""

    name = "prompt-logprobs"

    def __init__(self, engine: PromptLogprobs, label: str = "the server"):
        self.engine = engine
        self.label = label

    def __call__(self, batch: Sequence[Encoded]) -> list[list[ChoiceScore]]:
        prompts = [list(e.context) + list(c) for e in batch for c in e.continuations]
        got = self.engine(prompts) if prompts else []
        if len(got) != len(prompts):
            raise ScoringError(f"{self.label} returned {len(got)} results for {len(prompts)} prompts")
        out, k = [], 0
        for e in batch:
            row = []
            for j, c in enumerate(e.continuations):
                values, n_ctx = got[k], len(e.context)
                k += 1
                if len(values) != n_ctx + len(c):
                    raise ScoringError(
                        f"item {e.id}, choice {j}: {self.label} returned {len(values)} log-probs for a "
                        f"prompt of {n_ctx + len(c)} tokens"
                    )
                total = 0.0
                for i in range(n_ctx, n_ctx + len(c)):
                    v = values[i]
                    if not _is_finite(v) or v > MAX_LOGPROB:
                        raise ScoringError(
                            f"item {e.id}, choice {j}: {self.label} returned {_clip_repr(v)} as the log-prob of "
                            f"continuation token {i - n_ctx}"
                        )
                    total += float(v)
                if not math.isfinite(total):  # finite values, each of them, can still add up past a float's range
                    raise ScoringError(
                        f"item {e.id}, choice {j}: the log-probs {self.label} returned for the continuation's "
                        f"{len(c)} tokens sum to {total}, not a finite number (each is finite, but too large in "
                        "magnitude to add up)"
                    )
                row.append(ChoiceScore(total, len(c)))
            out.append(row)
        return out


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_finite(v) -> bool:
    """A number (not a bool) that is finite as a float: an integer too large for one is not."""
    if not _is_number(v):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _finite(x: float, what: str, label: str) -> float:
    """`x`, a number the check computed from the engine's log-probs (a mean, a difference), where it
    is finite; else EngineCheckError: log-probs each finite (-1e308) can still overflow a sum, and the
    record must hold no Infinity (strict JSON has none)."""
    if not math.isfinite(x):
        raise EngineCheckError(
            f"{label} failed the server check: {what} is {x}, not a finite number (its log-probs are each "
            f"finite, but so large in magnitude that they overflow a float when added up); {KNOWN}"
        )
    return x


def _clip_repr(v) -> str:
    """repr(v) for a message, at most 60 characters, with any registered secret removed."""
    from ..redact import redact

    try:
        text = repr(v)
    except (ValueError, RecursionError):  # an int of more than 4300 digits has no repr
        text = f"a {type(v).__name__}"
    return redact(text if len(text) <= 60 else text[:59] + "…")


def check_engine(
    engine: PromptLogprobs,
    vocab_size: int,
    *,
    seed: int = 0,
    avoid: Sequence[int] = (),
    length: int = COPY_LENGTH,
    label: str = "the server",
    spread_max: float = SPREAD_MAX,
) -> dict:
    """The server check (see the module docstring): EngineCheckError, one line, if the engine fails
    it; else the record the report keeps. Prompts are drawn from token ids 0..vocab_size-1 except
    `avoid` (the special tokens), with a fixed `seed`, so every run sends the same ones. `spread_max`
    is the most the invariance may show, in nats per token (SPREAD_MAX unless --max-spread says)."""
    rng = random.Random(seed)
    avoided = set(avoid)
    pool = [t for t in range(vocab_size) if t not in avoided]
    n = length
    if len(pool) < 3 * n + 8:
        raise ValueError(f"check_engine needs at least {3 * n + 8} usable token ids; got {len(pool)}")
    picks = rng.sample(pool, 3 * n)
    a, b, c = picks[:n], picks[n : 2 * n], picks[2 * n :]
    spare = [t for t in rng.sample(pool, 3 * n + 8) if t not in set(a)]
    s = a + a
    places = [n + n // 4, n + n // 2, n + (3 * n) // 4]
    probes = [s[:p] + [spare[k]] + s[p + 1 :] for k, p in enumerate(places)]
    neighbour = a[: n // 2] + c  # shares the first half of A with A A
    other = b + b

    def ask(prompts: list[list[int]]) -> list[list[float | None]]:
        got = engine(prompts)
        return [_shape(v, p, label) for v, p in zip(_count(got, prompts, label), prompts)]

    alone = ask([s])[0]
    probed = ask(probes)
    batch = ask([other, s, neighbour])
    after = ask([s])[0]

    first = _finite(_mean(alone[1:n]), "the mean log-prob of the sequence's first copy", label)
    second = _finite(_mean(alone[n + 1 : 2 * n]), "the mean log-prob of its second copy", label)
    gain = _finite(second - first, "the copy test's gain", label)
    if gain < COPY_MIN_GAIN:
        raise EngineCheckError(
            f"{label} failed the copy test: a random sequence of {n} tokens repeated twice was not far more "
            f"likely the second time (mean log-prob {first:.2f} the first time, {second:.2f} the second; "
            f"a correct engine gains over {COPY_MIN_GAIN:g} nats): its log-probs are not aligned with the "
            f"prompt tokens, or the model cannot copy from its context; {KNOWN}"
        )

    drops, prefix_diffs = [], []
    for p, vals in zip(places, probed):
        diffs = [abs(x - y) for x, y in zip(vals[1:p], alone[1:p])]
        worst = max(range(len(diffs)), key=diffs.__getitem__)
        if diffs[worst] >= ALIGN_MIN_DROP and worst + 1 == p - 1:
            raise EngineCheckError(
                f"{label}'s log-probs are one position early: replacing prompt token {p} changed the "
                f"log-prob reported for token {p - 1} by {diffs[worst]:.2f} nats (each value belongs to "
                f"the next token); {KNOWN}"
            )
        prefix_diffs.append(_finite(diffs[worst], "the alignment test's difference", label))
        drop = _finite(alone[p] - vals[p], "the alignment test's drop", label)
        drops.append(drop)
        if drop < ALIGN_MIN_DROP:
            raise EngineCheckError(
                f"{label}'s log-probs are one position off: replacing prompt token {p}, which the first copy "
                f"made predictable, changed its log-prob by {-drop:+.2f} nats (a correct engine drops it by "
                f"over {ALIGN_MIN_DROP:g}); {KNOWN}"
            )

    spreads = {
        "alone_vs_batch": _max_diff(alone, batch[1]),
        "alone_vs_after_shared_prefix": _max_diff(alone, after),
        "shared_prefix": max(prefix_diffs),
        "neighbour_shared_prefix": _max_diff(alone[: n // 2], batch[2][: n // 2]),
    }
    spread = _finite(max(spreads.values()), "the invariance test's spread", label)
    record = {
        "check": "prompt log-probs",
        "ok": True,
        "seed": seed,
        "copy_length": n,
        "prompts": 1 + len(probes) + 3 + 1,
        "copy": {"first_mean": first, "second_mean": second, "gain": gain, "min_gain": COPY_MIN_GAIN},
        "alignment": {"replaced_at": places, "drops": drops, "min_drop": ALIGN_MIN_DROP},
        "invariance": {**spreads, "spread": spread, "threshold": spread_max},
        "note": None,
    }
    if spread > spread_max:
        raise EngineCheckError(
            f"{label}'s log-probs depend on what else it computes: the same prompt scored alone, in a batch "
            f"and after prompts sharing its prefix differs by up to {spread:.3g} nats per token (the check "
            f"allows {spread_max:g}); prefix caching does this in vLLM (start it with "
            f"--no-enable-prefix-caching), and so can bfloat16 kernels on a GPU (score in float32, or accept "
            f"the spread with --max-spread, which makes the run non-official); {KNOWN}"
        )
    if spread > SPREAD_MAX:
        record["note"] = (
            f"note: {label}'s log-probs vary by up to {spread:.3g} nats per token with what else it computes "
            f"(batching, cached prefixes), above the card check's {SPREAD_MAX:g} and accepted by --max-spread "
            f"{spread_max:g}: choices closer than {2 * spread:.3g} nats can swap from run to run, and the run "
            "is not official"
        )
        log.warning(record["note"])
    elif spread > 0:
        record["note"] = (
            f"note: {label}'s log-probs vary by up to {spread:.3g} nats per token with what else it computes "
            f"(batching, cached prefixes); below the check's {SPREAD_MAX:g}, but scores can differ in their "
            "last digits from run to run"
        )
        log.warning(record["note"])
    return record


def loosened(record) -> str | None:
    """The non-official reason of a run whose engine check allowed a larger spread than SPREAD_MAX
    (--max-spread), or None: for any other check record (the transformers packing check's), too."""
    inv = record.get("invariance") if isinstance(record, dict) else None
    limit = inv.get("threshold") if isinstance(inv, dict) else None
    if not isinstance(limit, (int, float)) or limit <= SPREAD_MAX:
        return None
    return (
        f"--max-spread {limit:g} let the engine check accept log-probs that vary by up to {limit:g} nats per "
        f"token with what else is computed (the card's check allows {SPREAD_MAX:g}; measured "
        f"{inv.get('spread', float('nan')):.3g})"
    )


def check_spread_max(value) -> float | None:
    """--max-spread as check_engine takes it: None for none (or SPREAD_MAX itself, the default), else
    a finite number above 0; UsageError (one line) for anything else."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise UsageError(f"--max-spread must be a number of nats per token above 0, not {value!r}")
    return None if float(value) == SPREAD_MAX else float(value)


def _count(got, prompts: list[list[int]], label: str) -> list:
    if not isinstance(got, (list, tuple)) or len(got) != len(prompts):
        size = len(got) if isinstance(got, (list, tuple)) else type(got).__name__
        raise EngineCheckError(f"{label} returned {size} results for {len(prompts)} prompts; {KNOWN}")
    return list(got)


def _shape(values, prompt: list[int], label: str) -> list[float | None]:
    """One finite log-prob per prompt token after the first; EngineCheckError saying what is wrong."""
    if not isinstance(values, (list, tuple)):
        raise EngineCheckError(f"{label} returned {type(values).__name__} instead of a list of log-probs; {KNOWN}")
    real = [v for v in list(values)[1:] if v is not None]
    if len(values) <= 1 or not real:
        raise EngineCheckError(
            f"{label} returned no log-probs for the prompt ({len(values)} value{'' if len(values) == 1 else 's'} "
            f"for a prompt of {len(prompt)} tokens; log-probs for the generated token only score every "
            f"choice 0); {KNOWN}"
        )
    if len(values) != len(prompt):
        raise EngineCheckError(
            f"{label} did not return one log-prob per prompt token ({len(values)} for a prompt of "
            f"{len(prompt)} tokens); {KNOWN}"
        )
    for i, v in enumerate(values[1:], start=1):
        if not _is_finite(v) or v > MAX_LOGPROB:
            raise EngineCheckError(f"{label} returned {_clip_repr(v)} as the log-prob of prompt token {i}; {KNOWN}")
    return [None] + [float(v) for v in values[1:]]


def _mean(xs: Sequence[float | None]) -> float:
    return sum(xs) / len(xs)


def _max_diff(x: Sequence[float | None], y: Sequence[float | None]) -> float:
    return max((abs(a - b) for a, b in zip(x[1:], y[1:])), default=0.0)
