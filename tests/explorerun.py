"""Reports in the runner's own format (results.report.build_report) for the explore tests: real
items of a data file, made-up scores. No model is loaded.

    source = open_data("bundled")                                  # or a generated file (fixtures.py)
    rep = scored_report(source, seed=1, spec="org/model-a")        # a report dict, "_path" unset
    run = write_scored(tmp_path / "a", rep)                        # run dir with report.json
    expected_flips(rep_a, rep_b)                                   # ids, counted independently of base-bench

Each choice gets a random summed log-prob and token count; the prediction follows the card's rule
(pick), so `correct`, `selected_text` and the margins are what a real run would record for those
scores. `skill` brings the label's score nearer 0 on about that share of items, so runs beat chance.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from base_bench.items.records import ChoiceScore, ItemResult, pick
from base_bench.results import elo
from base_bench.results.report import build_report


def scored_report(
    source,
    seed: int,
    spec: str,
    *,
    backend: str = "transformers",
    dtype: str = "float32",
    add_bos: bool = False,
    skill: float = 0.3,
    limit: int | None = None,
    resamples: int = 50,
) -> dict:
    items = list(source.dataset.items)[:limit] if limit else list(source.dataset.items)
    rng = random.Random(seed)
    results = {}
    for it in items:
        choices = []
        for k in range(len(it.continuations)):
            n = rng.randint(1, 8)
            mean = -rng.uniform(0.5, 6.0) * (0.25 if k == it.label and rng.random() < skill else 1.0)
            choices.append(ChoiceScore(mean * n, n))
        choices = tuple(choices)
        results[it.id] = ItemResult(it.id, choices, pick(choices), it.label, truncated=rng.random() < 0.02)
    config = {
        "model": {"spec": spec, "revision": None},
        "backend": backend,
        "dtype": dtype,
        "add_bos": add_bos,
        "device": "cpu",
        "scoring_version": "mean_logprob/1",
    }
    return build_report(
        config=config,
        data=source.record,
        official=False,
        reasons=["made-up scores"],
        items=items,
        results=results,
        bootstrap_resamples=resamples,
    )


def resummarize(report: dict) -> dict:
    """Put the results that `report`'s items give back into it, after a test changed an item (the
    point estimates only: the intervals and expected p, which need the draws, are dropped)."""
    items = report["items"]
    report["results"] = elo.summarize(
        [(it["category"], it["difficulty"], it["item_elo"], it["point_weight"], it["correct"]) for it in items]
    )
    for it in items:
        it.pop("expected_p", None)
    return report


def write_scored(run_dir: Path, report: dict) -> Path:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "report.json").write_text(json.dumps(report), encoding="utf-8")
    return run_dir


def expected_flips(rep_a: dict, rep_b: dict) -> tuple[list[str], list[str]]:
    """(A right and B wrong, A wrong and B right), item ids in A's order, from the reports alone."""
    b = {it["id"]: it["correct"] for it in rep_b["items"]}
    ab = [it["id"] for it in rep_a["items"] if it["correct"] and not b[it["id"]]]
    ba = [it["id"] for it in rep_a["items"] if not it["correct"] and b[it["id"]]]
    return ab, ba
