"""Assemble data/test.jsonl from per-category draft files (how the bundled set was made).

    python tools/build_dataset.py DRAFT_DIR [--out data/test.jsonl]

Each draft line holds {"difficulty", "context", "correct", "distractors": [3], "tags"} (plus a
reviewer note "why", which is not shipped). This script fills in the card's fixed fields (version,
weights, item_elo, score_mode), numbers the ids <category>-001.., and places the correct
continuation so that label positions are 88/88/87/87 overall and 13/13/12/12 within each category,
and appends the bundled set's canary (dataset.BUNDLED_CANARY) to every record's tags. The placement is a seeded shuffle, so the output is reproducible from the drafts.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from base_bench.items import card
from base_bench.items.dataset import BUNDLED_CANARY

SEED = 20261202


def label_plan(cat_index: int) -> list[int]:
    """50 label positions: two positions get 13, two get 12, rotating so totals are 88/88/87/87."""
    big = {0, 1} if cat_index % 2 == 0 else {2, 3}
    plan = []
    for pos in range(4):
        plan += [pos] * (13 if pos in big else 12)
    return plan


def build(draft_dir: Path) -> list[dict]:
    rng = random.Random(SEED)
    out = []
    for ci, cat in enumerate(card.CATEGORIES):
        drafts = [
            json.loads(x) for x in (draft_dir / f"{cat}.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()
        ]
        assert len(drafts) == card.ITEMS_PER_CATEGORY, (cat, len(drafts))
        order = {"easy": 0, "medium": 1, "hard": 2}
        drafts.sort(key=lambda d: order[d["difficulty"]])  # stable: easy, then medium, then hard
        labels = label_plan(ci)
        rng.shuffle(labels)
        for n, (d, label) in enumerate(zip(drafts, labels), 1):
            others = list(d["distractors"])
            rng.shuffle(others)
            conts = others[:label] + [d["correct"]] + others[label:]
            out.append(
                {
                    "id": f"{cat}-{n:03d}",
                    "version": card.VERSION,
                    "category": cat,
                    "difficulty": d["difficulty"],
                    "category_weight": card.category_weight(cat),
                    "difficulty_weight": card.DIFFICULTY_WEIGHTS[d["difficulty"]],
                    "item_elo": card.item_elo(cat, d["difficulty"]),
                    "context": d["context"],
                    "continuations": conts,
                    "label": label,
                    "score_mode": card.SCORE_MODE,
                    "tags": list(d["tags"]) + [BUNDLED_CANARY],
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafts", type=Path)
    ap.add_argument("--out", type=Path, default=Path("data/test.jsonl"))
    args = ap.parse_args()
    recs = build(args.drafts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    print(f"wrote {len(recs)} records to {args.out}")


if __name__ == "__main__":
    main()
