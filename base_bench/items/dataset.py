"""Load a Base Bench JSONL file and check it against the card before any model is loaded.

    data = load_dataset_file(path)      # raises DataError listing every schema error
    data.items, data.sha256, data.composition_problems(), data.source_kind()

Three layers of checks, in order:
1. schema: every line is one JSON object with the card's fields, types and table values;
2. composition: 50 items per category, 117/117/116 by difficulty, labels 88/88/87/87;
3. checksum: the file's SHA-256 against the card's official one (and this repo's bundled set).
A schema error always refuses the run. Composition and checksum deviations are reported, and the
caller decides (they are only allowed for --local-data, and make the run non-official).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .. import untrusted
from ..errors import DataError
from . import card
from .records import Item

# SHA-256 of the bundled set, base-bench's own 350 items: base_bench/data/test.jsonl inside the
# package (the repository's data/test.jsonl is a link to it, for `--local-data .`).
BUNDLED_SHA256 = "91a54c5052a41098a6e3ffa41f3a09d86a03e2c0a1b946c3fa587d28b6ed02ca"
# The bundled set's canary, the last tag of every record (data/README.md says why there): a corpus that
# holds it holds these items. `base-bench contamination scan` looks for it, `... probe` asks a model.
BUNDLED_CANARY = "BASE-BENCH-BUNDLED-CANARY 395bed8f-52cb-47dc-a967-31acfca315c0"
BUNDLED_NAME = "base-bench bundled set (independently authored, not the official BananaMind data)"

FIELDS = {
    "id": str,
    "version": str,
    "category": str,
    "difficulty": str,
    "category_weight": (int, float),
    "difficulty_weight": (int, float),
    "item_elo": (int, float),
    "context": str,
    "continuations": list,
    "label": int,
    "score_mode": str,
    "tags": list,
}


def _is_type(value, types) -> bool:
    # bool is a subclass of int in Python, but JSON true/false is never a number here.
    if isinstance(value, bool):
        return False
    return isinstance(value, types)


def validate_record(obj) -> list[str]:
    """All schema problems of one parsed record, as short messages naming the field."""
    if not isinstance(obj, dict):
        return ["record is not a JSON object"]
    errs = []
    for name, types in FIELDS.items():
        if name not in obj:
            errs.append(f"missing field '{name}'")
        elif not _is_type(obj[name], types):
            errs.append(f"field '{name}' has type {type(obj[name]).__name__}")
    extra = sorted(set(obj) - set(FIELDS))
    if extra:
        errs.append(f"unknown field(s) {', '.join(repr(e) for e in extra)}")
    if errs:
        return errs
    if obj["version"] != card.VERSION:
        errs.append(f"field 'version' is {obj['version']!r}, expected {card.VERSION!r}")
    cat, diff = obj["category"], obj["difficulty"]
    if cat not in card.CATEGORIES:
        errs.append(f"field 'category' is {cat!r}, not one of the 7 card categories")
    if diff not in card.DIFFICULTY_WEIGHTS:
        errs.append(f"field 'difficulty' is {diff!r}, expected easy, medium or hard")
    if cat in card.CATEGORIES and obj["category_weight"] != card.category_weight(cat):
        errs.append(
            f"field 'category_weight' is {obj['category_weight']}, the card says {card.category_weight(cat)} for {cat}"
        )
    if diff in card.DIFFICULTY_WEIGHTS and obj["difficulty_weight"] != card.DIFFICULTY_WEIGHTS[diff]:
        errs.append(
            f"field 'difficulty_weight' is {obj['difficulty_weight']}, the card says {card.DIFFICULTY_WEIGHTS[diff]} for {diff}"
        )
    if cat in card.CATEGORIES and diff in card.DIFFICULTY_WEIGHTS and obj["item_elo"] != card.item_elo(cat, diff):
        errs.append(f"field 'item_elo' is {obj['item_elo']}, the card says {card.item_elo(cat, diff)} for {cat}/{diff}")
    if not obj["id"]:
        errs.append("field 'id' is empty")
    if not obj["context"]:
        errs.append("field 'context' is empty")
    conts = obj["continuations"]
    if len(conts) != card.N_CHOICES:
        errs.append(f"field 'continuations' has {len(conts)} entries, expected {card.N_CHOICES}")
    for i, c in enumerate(conts):
        if not isinstance(c, str):
            errs.append(f"continuations[{i}] is not a string")
        elif not c.strip():
            errs.append(f"continuations[{i}] is empty")
        elif not c[0].isspace():
            errs.append(f"continuations[{i}] does not start with whitespace")
    if all(isinstance(c, str) for c in conts) and len(set(conts)) != len(conts):
        errs.append("field 'continuations' has duplicates")
    if not 0 <= obj["label"] < card.N_CHOICES:
        errs.append(f"field 'label' is {obj['label']}, expected 0..3")
    if obj["score_mode"] != card.SCORE_MODE:
        errs.append(f"field 'score_mode' is {obj['score_mode']!r}, expected {card.SCORE_MODE!r}")
    if not all(isinstance(t, str) for t in obj["tags"]):
        errs.append("field 'tags' must be a list of strings")
    return errs


@dataclass(frozen=True)
class Dataset:
    path: str
    sha256: str
    items: tuple[Item, ...]

    def composition_problems(self) -> list[str]:
        """Deviations from the card's counts, as readable sentences (empty when it matches)."""
        probs = []
        cats = Counter(i.category for i in self.items)
        for cat in card.CATEGORIES:
            if cats[cat] != card.ITEMS_PER_CATEGORY:
                probs.append(f"category {cat} has {cats[cat]} items, the card says {card.ITEMS_PER_CATEGORY}")
        diffs = Counter(i.difficulty for i in self.items)
        for diff, n in card.DIFFICULTY_COUNTS.items():
            if diffs[diff] != n:
                probs.append(f"difficulty {diff} has {diffs[diff]} items, the card says {n}")
        labels = Counter(i.label for i in self.items)
        got = tuple(labels[k] for k in range(card.N_CHOICES))
        if got != card.LABEL_COUNTS:
            probs.append(
                f"label positions are {'/'.join(map(str, got))}, the card says {'/'.join(map(str, card.LABEL_COUNTS))}"
            )
        return probs

    def source_kind(self) -> str:
        """'official' (card checksum), 'bundled' (this repo's set) or 'modified' (neither)."""
        if self.sha256 == card.OFFICIAL_SHA256:
            return "official"
        if self.sha256 == BUNDLED_SHA256:
            return "bundled"
        return "modified"


def bundled_path() -> Path:
    """Where the bundled set lies in this installation (a wheel or a checkout alike)."""
    from importlib.resources import files

    return Path(str(files("base_bench") / "data" / "test.jsonl"))


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_dataset_file(path: str | Path) -> Dataset:
    """Parse and schema-check every line; raise DataError naming every bad line and field."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    try:
        raw = untrusted.read_regular(path)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: {untrusted.problem(e)}") from None
    errors: list[str] = []
    items: list[Item] = []
    seen: dict[str, int] = {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 ({e})") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            errors.append(f"line {n}: empty line")
            continue
        try:
            obj = untrusted.loads(line)
        except json.JSONDecodeError as e:
            errors.append(f"line {n}: not valid JSON ({e.msg} at column {e.colno})")
            continue
        except ValueError as e:  # nested too deeply, a number too long
            errors.append(f"line {n}: not valid JSON ({e})")
            continue
        errs = validate_record(obj)
        if not errs:
            if obj["id"] in seen:
                errs.append(f"id {obj['id']!r} repeats line {seen[obj['id']]}")
            else:
                seen[obj["id"]] = n
        if errs:
            rid = obj.get("id") if isinstance(obj, dict) and isinstance(obj.get("id"), str) else "?"
            errors.extend(f"line {n} (id {rid}): {e}" for e in errs)
            continue
        items.append(
            Item(
                id=obj["id"],
                category=obj["category"],
                difficulty=obj["difficulty"],
                category_weight=float(obj["category_weight"]),
                difficulty_weight=float(obj["difficulty_weight"]),
                item_elo=float(obj["item_elo"]),
                context=obj["context"],
                continuations=tuple(obj["continuations"]),
                label=obj["label"],
                tags=tuple(obj["tags"]),
            )
        )
    if not errors and not items:
        errors.append("the file holds no records")
    if errors:
        raise DataError(f"{path}: {len(errors)} schema error(s)", errors)
    return Dataset(str(path), hashlib.sha256(raw).hexdigest(), tuple(items))
