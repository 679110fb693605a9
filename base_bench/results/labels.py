"""The labels a user gives a run: a group (a training run, a sweep), a step and tokens seen (for
checkpoints), and free tags. They are written into report.json, so that a store rebuilt from run
folders keeps them, and `trajectory` plots any training loop's steps.

    labels = Labels.make(group="pretrain-7", step=4000, tokens=8_388_608_000, tags=["ablation"])
    labels.apply(report)             # report["group"], ["training_step"], ["tokens_seen"], ["tags"]
    Labels.of(report)                # back from a (checked) report
    problem = labels_problem(report) # None, or the label field that cannot be used (checked.py)

A label that cannot be used is a UsageError in one line: a group or tag must be 1 to MAX_TEXT
printable characters, a step or token count a whole number from 0 to MAX_COUNT.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError

MAX_TEXT = 200  # characters in a group name or a tag
MAX_TAGS = 64
MAX_COUNT = 2**53  # a step or a token count (a float holds every whole number up to it: the plots need that)
_TEXT = re.compile("[^\\x00-\\x1f\\x7f]{1," + str(MAX_TEXT) + "}")  # printable: no control characters, no newline


def _text_ok(x) -> bool:
    return isinstance(x, str) and bool(_TEXT.fullmatch(x)) and x.strip() == x


def _count_ok(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= MAX_COUNT


@dataclass(frozen=True)
class Labels:
    group: str | None = None
    step: int | None = None
    tokens: int | None = None
    tags: tuple[str, ...] = ()

    @classmethod
    def make(cls, group=None, step=None, tokens=None, tags=()) -> Labels:
        """Labels from arguments (evaluate's, the CLI's); UsageError naming the first that cannot be used."""
        if group is not None and not _text_ok(group):
            raise UsageError(f"group must be 1 to {MAX_TEXT} printable characters, without spaces at its ends")
        for name, x in (("step", step), ("tokens", tokens)):
            if x is not None and not _count_ok(x):
                raise UsageError(f"{name} must be a whole number from 0 to {MAX_COUNT:,}; got {x!r}")
        if isinstance(tags, str):
            tags = [tags]
        tags = tuple(dict.fromkeys(tags or ()))
        if len(tags) > MAX_TAGS or not all(_text_ok(t) for t in tags):
            raise UsageError(
                f"tags must be at most {MAX_TAGS}, each 1 to {MAX_TEXT} printable characters without spaces at its ends"
            )
        return cls(group, step, tokens, tags)

    @classmethod
    def of(cls, rep: dict) -> Labels:
        return cls(rep.get("group"), rep.get("training_step"), rep.get("tokens_seen"), tuple(rep.get("tags") or ()))

    def apply(self, rep: dict) -> dict:
        """Write the labels that are set into `rep` (in place) and return it."""
        for key, value in (("group", self.group), ("training_step", self.step), ("tokens_seen", self.tokens)):
            if value is not None:
                rep[key] = value
        if self.tags:
            rep["tags"] = list(self.tags)
        return rep

    def __bool__(self) -> bool:
        return any(x is not None for x in (self.group, self.step, self.tokens)) or bool(self.tags)


def labels_problem(rep: dict) -> str | None:
    """Why a report's labels cannot be used (one phrase naming the field), or None."""
    if "group" in rep and not _text_ok(rep["group"]):
        return f"group is not 1 to {MAX_TEXT} printable characters"
    for key in ("training_step", "tokens_seen"):
        if rep.get(key) is not None and not _count_ok(rep[key]):
            return f"{key} is not a whole number from 0 to {MAX_COUNT:,}"
    tags = rep.get("tags")
    if tags is not None and not (isinstance(tags, list) and len(tags) <= MAX_TAGS and all(_text_ok(t) for t in tags)):
        return f"tags is not a list of at most {MAX_TAGS} printable strings"
    at = rep.get("scored_at")
    if at is not None and not (isinstance(at, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT[0-9:.+\-Z]{8,32}", at)):
        return "scored_at is not an ISO 8601 time"
    return None
