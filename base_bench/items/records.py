"""Small frozen records that flow through the runner.

`Item` is one validated benchmark record. `ChoiceScore` is what the model contract returns for
one continuation. `ItemResult` is one scored item, the unit that `partial_results.jsonl` stores
and `report.json` lists. All are plain dataclasses with `to_json()`/`from_json()` helpers.
"""

from __future__ import annotations

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
        choices = tuple(ChoiceScore(float(c["logprob"]), int(c["n_tokens"])) for c in d["choices"])
        return cls(d["id"], choices, int(d["prediction"]), int(d["label"]), bool(d.get("truncated", False)))


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
