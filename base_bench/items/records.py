"""Small frozen records that flow through the runner.

`Item` is one validated benchmark record. `ChoiceScore` is what the model contract returns for
one continuation. `ItemResult` is one scored item, the unit that `partial_results.jsonl` stores
and `report.json` lists. All are plain dataclasses with `to_json()`/`from_json()` helpers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Item:
    id: str
    category: str
    difficulty: str
    category_weight: float
    difficulty_weight: float
    item_elo: float
    context: str
    continuations: tuple[str, ...]
    label: int
    tags: tuple[str, ...] = ()

    @property
    def point_weight(self) -> float:
        return self.category_weight * self.difficulty_weight


@dataclass(frozen=True)
class ChoiceScore:
    """Summed conditional log-prob of one continuation's tokens, and how many tokens it has."""

    logprob: float
    n_tokens: int

    @property
    def mean(self) -> float:
        return self.logprob / self.n_tokens


@dataclass(frozen=True)
class ItemResult:
    id: str
    choices: tuple[ChoiceScore, ...]
    prediction: int
    label: int
    truncated: bool = False

    @property
    def correct(self) -> bool:
        return self.prediction == self.label

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "choices": [{"logprob": c.logprob, "n_tokens": c.n_tokens, "mean_logprob": c.mean} for c in self.choices],
            "prediction": self.prediction,
            "label": self.label,
            "correct": self.correct,
            "truncated": self.truncated,
        }

    @classmethod
    def from_json(cls, d: dict) -> ItemResult:
        """The inverse of to_json; ValueError (or KeyError, TypeError) for a record that is not a
        whole, well-formed result (a partial file may come from elsewhere)."""
        choices = tuple(ChoiceScore(float(c["logprob"]), int(c["n_tokens"])) for c in d["choices"])
        r = cls(d["id"], choices, int(d["prediction"]), int(d["label"]), bool(d.get("truncated", False)))
        if not isinstance(r.id, str) or not r.id:
            raise ValueError("id is not a non-empty string")
        if not choices or any(c.n_tokens < 1 or not math.isfinite(c.logprob) for c in choices):
            raise ValueError("choices are not finite log-probs of at least one token each")
        if not (0 <= r.prediction < len(choices) and 0 <= r.label < len(choices)):
            raise ValueError("prediction or label is not a choice")
        return r


def pick(choices: tuple[ChoiceScore, ...] | list[ChoiceScore]) -> int:
    """The card's selection rule: the highest mean log-prob; a tie goes to the lowest index."""
    best = 0
    for i in range(1, len(choices)):
        if choices[i].mean > choices[best].mean:
            best = i
    return best


def item_to_json(item: Item) -> dict:
    d = asdict(item)
    d["continuations"] = list(item.continuations)
    d["tags"] = list(item.tags)
    return d
