"""The selection rules a stored run can be scored under again, as pure functions of each choice's
stored numbers: the card's and lm-evaluation-harness's.

    rule = parse_rules(["sum,per_char", "per_byte"])       # ("sum", "per_char", "per_byte"); UsageError
    c = Choice(logprob=-7.5, n_tokens=3, n_chars=9, n_bytes=10)
    score("per_char", c)                                     # -7.5 / 9
    pick("sum", [c, other])                                  # the highest score; a tie goes to the lowest index
    missing("mean", choices)                                 # None, or the field a rule needs and lacks
    n_chars, n_bytes = lengths(" café")                      # (5, 6): as stored, leading space included

    mean      summed log-prob / tokens   the card's rule (base-bench; official runs use it and only it)
    sum       summed log-prob            lm-eval's `acc`
    per_char  summed log-prob / chars    lm-eval's `acc_norm` (Python's len of the continuation)
    per_byte  summed log-prob / bytes    lm-eval's `acc_bytes` (its UTF-8 bytes)

The lengths are the continuation's as the data file stores it, its leading space included, as
lm-eval counts them. Rules in the PMI family (lm-eval's `acc_mutual_info`, OLMES's unconditional
normalisation) divide by the continuation's log-prob without its context, which a run never
computed: they need another forward pass of the model and are refused by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import UsageError

CARD_RULE = "mean"
RULES = {
    "mean": "mean log-prob per token (the card's rule)",
    "sum": "summed log-prob (lm-eval's acc)",
    "per_char": "summed log-prob per character of the continuation (lm-eval's acc_norm)",
    "per_byte": "summed log-prob per UTF-8 byte of the continuation (lm-eval's acc_bytes)",
}
NEEDS = {"mean": "n_tokens", "sum": None, "per_char": "n_chars", "per_byte": "n_bytes"}
PMI_RULES = ("pmi", "dcpmi", "acc_mutual_info", "mutual_info", "unconditional", "uncond")
PMI_REASON = (
    "divides by the continuation's log-prob without its context, which a stored run never computed "
    "(it needs another forward pass of the model); rescore only uses what a run stored"
)


@dataclass(frozen=True)
class Choice:
    """One continuation's stored numbers: the summed log-prob of its tokens, and its length in
    tokens (the run's), characters and UTF-8 bytes (the data file's). A length a source lacks is None."""

    logprob: float
    n_tokens: int | None = None
    n_chars: int | None = None
    n_bytes: int | None = None


def lengths(text: str) -> tuple[int, int]:
    """(characters, UTF-8 bytes) of a continuation as stored, its leading space included."""
    return len(text), len(text.encode("utf-8"))


def score(rule: str, c: Choice) -> float:
    """The number `rule` ranks a choice by (higher is better)."""
    if rule == "sum":
        return c.logprob
    length = getattr(c, NEEDS[rule])
    if not length:
        raise ValueError(f"the {rule} rule needs {NEEDS[rule]}, and this choice has {length!r}")
    return c.logprob / length


def pick(rule: str, choices: Sequence[Choice]) -> int:
    """The index of the highest score under `rule`; a tie goes to the lowest index (as the card's rule)."""
    return best([score(rule, c) for c in choices])


def best(scores: Sequence[float]) -> int:
    """The index of the highest of `scores`; a tie goes to the lowest index."""
    top = 0
    for i in range(1, len(scores)):
        if scores[i] > scores[top]:
            top = i
    return top


def missing(rule: str, choices: Sequence[Choice]) -> str | None:
    """The field `rule` needs that some choice lacks (None or below 1), or None when it can be used."""
    need = NEEDS[rule]
    if need is None:
        return None
    return need if any(not isinstance(getattr(c, need), int) or getattr(c, need) < 1 for c in choices) else None


def parse_rules(values: Sequence[str]) -> tuple[str, ...]:
    """The rules named by `values` (each a name or a comma list), in order, each once. UsageError in
    one line for an unknown name, a PMI-style rule (with why), or none at all."""
    out: list[str] = []
    for value in values:
        for name in (part.strip() for part in value.split(",")):
            if not name:
                continue
            key = name.lower().replace("-", "_")
            if key in PMI_RULES:
                raise UsageError(f"--rule {name}: a PMI-style rule {PMI_REASON}")
            if key not in RULES:
                raise UsageError(f"--rule {name}: not a rule; the rules are {', '.join(RULES)}")
            if key not in out:
                out.append(key)
    if not out:
        raise UsageError(f"--rule names no rule; the rules are {', '.join(RULES)}")
    return tuple(out)
