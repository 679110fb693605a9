"""Reports in the runner's own format (results.report.build_report) for the explore tests: real
items of a data file, made-up scores. No model is loaded.

    source = open_data("bundled")                                  # or a generated file (fixtures.py)
    rep = scored_report(source, seed=1, spec="org/model-a")        # a report dict, "_path" unset
    run = write_scored(tmp_path / "a", rep)                        # run dir with report.json
    expected_flips(rep_a, rep_b)                                   # ids, counted independently of base-bench
    reps = checkpoint_reports(source, steps=[0, 100, 200], outcomes={"id": [False, True, True]})

Each choice gets a random summed log-prob and token count; the prediction follows the card's rule
(pick), so `correct`, `selected_text` and the margins are what a real run would record for those
scores. `skill` brings the label's score nearer 0 on about that share of items, so runs beat chance;
`right` (item id -> True / False) makes an item right or wrong whatever the draw: the label's
score is lifted above the others', or the best other's above the label's.

`checkpoint_reports` makes the checkpoints of one training run: one report per step, labelled with
the group and the step, each item right or wrong at each step as `outcomes` says (items it does not
name are drawn).
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
    right: dict[str, bool] | None = None,
) -> dict:
    items = list(source.dataset.items)[:limit] if limit else list(source.dataset.items)
    rng = random.Random(seed)
    results = {}
    for it in items:
        means, counts = [], []
        for k in range(len(it.continuations)):
            counts.append(rng.randint(1, 8))
            means.append(-rng.uniform(0.5, 6.0) * (0.25 if k == it.label and rng.random() < skill else 1.0))
        want = (right or {}).get(it.id)
        if want is not None:
            others = [k for k in range(len(means)) if k != it.label]
            top = max(others, key=lambda k: means[k])
            lift = rng.uniform(0.01, 1.5)
            if want and means[it.label] <= means[top]:
                means[it.label] = min(means[top] + lift, -0.01)
                if means[it.label] <= means[top]:  # the best other is at -0.01 already
                    means[top] = means[it.label] - lift
            elif not want and means[top] <= means[it.label]:
                means[top] = min(means[it.label] + lift, -0.01)
                if means[top] <= means[it.label]:
                    means[it.label] = means[top] - lift
        choices = tuple(ChoiceScore(m * n, n) for m, n in zip(means, counts))
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


def checkpoint_reports(
    source,
    steps,
    outcomes: dict[str, list[bool]] | None = None,
    *,
    group: str = "pretrain",
    spec: str = "/ckpt/pretrain/checkpoint-{step}/hf",
    seed: int = 0,
    resamples: int = 10,
) -> list[dict]:
    """One report per step in `steps` (labelled `group`, training_step; the model `spec` with the
    step in it, so that a store keeps each checkpoint apart): `outcomes[id][k]` says whether the
    item is right at the k-th step; the items it does not name are drawn."""
    outcomes = outcomes or {}
    reps = []
    for k, step in enumerate(steps):
        right = {i: o[k] for i, o in outcomes.items()}
        rep = scored_report(source, seed * 1000 + k, spec.format(step=step), resamples=resamples, right=right)
        rep["group"], rep["training_step"] = group, step
        reps.append(rep)
    return reps


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
