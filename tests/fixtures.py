"""Generated data files in the card's format, for tests that must not depend on the bundled set.

write_dataset(tmp_path)                 # tmp_path/data/test.jsonl with the card's full composition
write_dataset(tmp_path, records=recs)   # any list of dicts
records()                               # the 350 generated records, to edit before writing
"""

from __future__ import annotations

import json
from pathlib import Path

from base_bench.items import card

WORDS = ["river", "lamp", "garden", "window", "engine", "letter", "market", "cloud", "ladder", "violin"]


def record(cat: str, diff: str, n: int, label: int) -> dict:
    w = WORDS[n % len(WORDS)]
    conts = [f" the {WORDS[(n + k) % len(WORDS)]} was {k + n % 3} feet away." for k in range(4)]
    return {
        "id": f"{cat}-{n:03d}",
        "version": card.VERSION,
        "category": cat,
        "difficulty": diff,
        "category_weight": card.category_weight(cat),
        "difficulty_weight": card.DIFFICULTY_WEIGHTS[diff],
        "item_elo": card.item_elo(cat, diff),
        "context": f"Item {n} of {cat}: she looked at the {w} and said that" + " again" * (n % 5),
        "continuations": conts,
        "label": label,
        "score_mode": card.SCORE_MODE,
        "tags": ["generated"],
    }


def records() -> list[dict]:
    """350 records with 50 per category, 117/117/116 by difficulty and labels 88/88/87/87."""
    diffs = ["easy"] * 117 + ["medium"] * 117 + ["hard"] * 116
    # Interleave so every category gets 16 or 17 of each difficulty.
    diffs = [diffs[(i * 107) % 350] for i in range(350)]
    labels = [0] * 88 + [1] * 88 + [2] * 87 + [3] * 87
    out, i = [], 0
    for cat in card.CATEGORIES:
        for n in range(1, card.ITEMS_PER_CATEGORY + 1):
            out.append(record(cat, diffs[i], n, labels[(i * 3) % 350]))
            i += 1
    return out


def write_dataset(root: Path, recs: list[dict] | None = None, lines: list[str] | None = None) -> Path:
    path = Path(root) / "data" / "test.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    if lines is None:
        lines = [json.dumps(r) for r in (records() if recs is None else recs)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
