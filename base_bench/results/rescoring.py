"""Finished runs scored again under other selection rules, from their stored log-probs: no model.

    from base_bench import rescore
    table = rescore(["runs/a", "runs/b"], ["mean", "sum", "per_char", "per_byte"], "rescore-out")
    table["runs"][0]["rules"]["sum"]["elo"], table["tau_b"]

    new = rescore_report(report, source.dataset.items, "per_char")   # one run, one rule: a report dict
    reproduction(report, rescore_report(report, items, "mean"))      # how far `mean` is from the run (0.0)

Each run's report holds, per choice, the summed log-prob and the token count; the data file (found
from the SHA-256 the runs recorded, items/lookup.py) holds each continuation's text, whose length in
characters and UTF-8 bytes, leading space included, the per_char and per_byte rules divide by
(rules.py). For every run and rule, `rescore_report` picks each item's choice again and rebuilds the
report with `report.build_report` and the run's own bootstrap settings, so `mean`, the card's rule,
gives back the run's report exactly (same choices, Elo, intervals; official exactly when the run
was), and any other rule gives a report of the same shape whose `scoring.rule` names it and which is
never official. The checked reading (checked.py) recomputes its choices under that rule.

`build_table` sets the runs side by side: each run's Elo and rank under each rule, Kendall's tau-b
between the rankings of each pair of rules (ranking.py), and per run the items whose choice under a
rule differs from the card's rule, with the continuations' lengths. `rescore` reads the runs, checks
everything and refuses in one line before it writes anything: OUT/rescore.json, OUT/rescore.md and
OUT/<run folder>/<rule>/report.json (rescore_view.py renders the Markdown and the terminal lines).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import ReportError
from ..items.lookup import find_data
from ..items.records import ChoiceScore, Item, ItemResult
from . import ranking, rules
from .report import BENCHMARK, build_report, dumps
from .reports_io import as_report, check_finished, check_outputs, display_name, write_outputs
from .stats import DEFAULT_RESAMPLES, DEFAULT_SEED

TABLE_FILES = ("rescore.json", "rescore.md")
DEFAULT_RULES = tuple(rules.RULES)


def never_official(rule: str) -> str:
    """The reason a rescored report gives for not being official (every rule but the card's)."""
    return (
        f"rescored under the {rule} rule ({rules.RULES[rule]}), not the card's mean log-prob per token: never official"
    )


def _choices(it: dict, data_item: Item) -> list[rules.Choice]:
    out = []
    for c, text in zip(it["choices"], data_item.continuations):
        n_chars, n_bytes = rules.lengths(text)
        out.append(rules.Choice(float(c["logprob"]), c.get("n_tokens"), n_chars, n_bytes))
    return out


def _matched(rep: dict, items: Sequence[Item]) -> list[tuple[dict, Item]]:
    """Each report item with its data item; ReportError when the report does not fit the data file."""
    by_id = {it.id: it for it in items}
    where = rep.get("_path") or "the report"
    out = []
    for it in rep["items"]:
        d = by_id.get(it["id"])
        if d is None:
            raise ReportError(f"{where}: item {it['id']!r} is not in the data file")
        if len(it["choices"]) != len(d.continuations) or it["label"] != d.label:
            raise ReportError(f"{where}: item {it['id']!r} has other choices or another label than the data file's")
        out.append((it, d))
    return out


def rule_problem(rep: dict, items: Sequence[Item], rule: str) -> str | None:
    """Why `rule` cannot score this report (one phrase), or None."""
    for it, d in _matched(rep, items):
        need = rules.missing(rule, _choices(it, d))
        if need:
            return f"item {it['id']!r} has no {need} for its choices, which the {rule} rule needs (an older report?)"
    return None


def rescore_report(rep: dict, items: Sequence[Item], rule: str, source: str | None = None) -> dict:
    """The report `rep` (checked) scored under `rule`: each item's choice picked again from its stored
    log-probs (and the data items' continuations), and the results rebuilt as the run built them.
    ReportError when the report does not fit the data or lacks what the rule needs."""
    problem = rule_problem(rep, items, rule)
    if problem:
        raise ReportError(f"{rep.get('_path') or 'the report'}: refused for --rule {rule}: {problem}")
    matched = _matched(rep, items)
    results = {}
    for it, d in matched:
        choices = _choices(it, d)
        stored = tuple(ChoiceScore(c.logprob, c.n_tokens or 1) for c in choices)
        results[d.id] = ItemResult(d.id, stored, rules.pick(rule, choices), d.label, bool(it.get("truncated", False)))
    u = (rep.get("results") or {}).get("uncertainty") or {}
    official = bool(rep.get("official")) and rule == rules.CARD_RULE
    reasons = list(rep.get("non_official_reasons") or [])
    if rule != rules.CARD_RULE:
        reasons.append(never_official(rule))
    new = build_report(
        config=copy.deepcopy(rep.get("config") or {}),
        data=copy.deepcopy(rep["data"]),
        official=official,
        reasons=reasons,
        items=[d for _, d in matched],
        results=results,
        timing=copy.deepcopy(rep.get("timing") or {}),
        n_items_in_data=u.get("n_items_in_data", len(matched)),
        bootstrap_resamples=u.get("bootstrap_resamples", DEFAULT_RESAMPLES),
        bootstrap_seed=u.get("bootstrap_seed", DEFAULT_SEED),
    )
    for (it, d), row in zip(matched, new["items"]):
        for c, text, old in zip(row["choices"], d.continuations, it["choices"]):
            c["n_chars"], c["n_bytes"] = rules.lengths(text)
            if old.get("n_tokens") is None:  # a report without token counts keeps none (no made-up 1)
                c.pop("n_tokens")
                c.pop("mean_logprob")
    for key, value in rep.items():
        if key not in new and not key.startswith("_") and key != "scoring":
            new[key] = copy.deepcopy(value)
    new["benchmark"] = rep.get("benchmark") or BENCHMARK
    new["scoring"] = {
        "rule": rule,
        "description": rules.RULES[rule],
        "official_rule": rule == rules.CARD_RULE,
        "rescored_from": source or rep.get("_path"),
    }
    return new


def _leaves(x, path: str = "") -> dict[str, float]:
    if isinstance(x, dict):
        return {k: v for key, val in x.items() for k, v in _leaves(val, f"{path}.{key}").items()}
    if isinstance(x, list):
        return {k: v for i, val in enumerate(x) for k, v in _leaves(val, f"{path}[{i}]").items()}
    return {path: x}


def reproduction(run: dict, new: dict) -> dict:
    """How far a rescored report is from the run's: items whose choice is the same, and the largest
    absolute difference over every number of the results block and each item's expected p (a field
    one side lacks, or a different non-number, counts as infinitely far: None)."""
    same = sum(a["prediction"] == b["prediction"] for a, b in zip(run["items"], new["items"]))
    left = _leaves(run.get("results") or {}) | {f"items[{a['id']}].p": a.get("expected_p") for a in run["items"]}
    right = _leaves(new["results"]) | {f"items[{b['id']}].p": b.get("expected_p") for b in new["items"]}
    worst: float | None = 0.0
    for key in left.keys() | right.keys():
        a, b = left.get(key), right.get(key)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            worst = None if worst is None else max(worst, abs(float(a) - float(b)))
        elif a != b:
            worst = None
    return {
        "n_items": len(run["items"]),
        "same_choice": same,
        "max_abs_diff": worst,
        "official_same": bool(run.get("official")) == bool(new.get("official")),
    }


def flips(card_rep: dict, rule_rep: dict, rule: str) -> list[dict]:
    """The items whose choice under `rule` differs from the card's rule, with each choice's lengths."""
    out = []
    for a, b in zip(card_rep["items"], rule_rep["items"]):
        if a["prediction"] == b["prediction"]:
            continue
        out.append(
            {
                "id": a["id"],
                "category": a["category"],
                "label": a["label"],
                "mean": a["prediction"],
                rule: b["prediction"],
                "correct_mean": a["correct"],
                f"correct_{rule}": b["correct"],
                "lengths": [
                    {"n_tokens": c.get("n_tokens"), "n_chars": c["n_chars"], "n_bytes": c["n_bytes"]}
                    for c in b["choices"]
                ],
            }
        )
    return out


def _block(rep: dict) -> dict:
    res = rep["results"]
    o = res["overall"]
    return {
        "official": rep["official"],
        "elo": o["elo"],
        "elo_ci95": o.get("elo_ci95"),
        "raw_accuracy": o["raw_accuracy"],
        "weighted_accuracy": o["weighted_accuracy"],
        "n_correct": o["n_correct"],
        "n": o["n"],
        "categories": {c: {"elo": b["elo"], "elo_ci95": b.get("elo_ci95")} for c, b in res["categories"].items()},
    }


def build_table(runs: Sequence[dict], reports: Sequence[dict[str, dict]], rule_names: Sequence[str]) -> dict:
    """The cross-run table: `runs` are the run reports, `reports[i][rule]` run i's rescored reports
    (the card's rule among them whenever the run has token counts, for the flips)."""
    rows = []
    for run, by_rule in zip(runs, reports):
        card_rep = by_rule.get(rules.CARD_RULE)
        row = {
            "name": run["_name"],
            "model": display_name(((run.get("config") or {}).get("model") or {}).get("spec") or "unknown model"),
            "report": run.get("_path"),
            "official": bool(run.get("official")),
            "rules": {},
        }
        for rule in rule_names:
            block = _block(by_rule[rule]) | {"report_written": by_rule[rule].get("_written")}
            if rule == rules.CARD_RULE:
                block["reproduces_run"] = reproduction(run, by_rule[rule])
            elif card_rep is not None:
                changed = flips(card_rep, by_rule[rule], rule)
                block["flips_vs_mean"] = {
                    "n": len(changed),
                    "now_right": sum(f[f"correct_{rule}"] for f in changed),
                    "now_wrong": sum(f["correct_mean"] for f in changed),
                    "items": changed,
                }
            row["rules"][rule] = block
        rows.append(row)
    for rule in rule_names:
        for row, rank in zip(rows, ranking.ranks([r["rules"][rule]["elo"] for r in rows])):
            row["rules"][rule]["rank"] = rank
    taus = [
        {
            "a": a,
            "b": b,
            "tau_b": ranking.kendall_tau_b([r["rules"][a]["elo"] for r in rows], [r["rules"][b]["elo"] for r in rows]),
        }
        for i, a in enumerate(rule_names)
        for b in rule_names[i + 1 :]
    ]
    return {
        "command": "base-bench rescore",
        "benchmark": runs[0].get("benchmark") or BENCHMARK,
        "data_sha256": runs[0]["data"]["sha256"],
        "rules": {r: {"description": rules.RULES[r], "can_be_official": r == rules.CARD_RULE} for r in rule_names},
        "note": "Only the card's rule (mean) can give an official result; every other rule is never official.",
        "runs": rows,
        "tau_b": taus,
    }


# ---------------------------------------------------------------- reading, checking, writing


def _safe(name: str) -> str:
    return (re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-") or "run")[:60]


def run_key(rep: dict) -> str:
    """What tells two runs apart: the report file's resolved path, or a report dict's content."""
    if rep.get("_path"):
        return str(Path(rep["_path"]).resolve())
    return json.dumps({k: v for k, v in rep.items() if not k.startswith("_")}, sort_keys=True)


def _hash(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def run_folder(rep: dict) -> str:
    """The run's folder inside the out-dir: its own folder's name (or its model's) and 8 hex digits of
    its path, so two runs in folders of the same name get two folders."""
    path = Path(rep["_path"]) if rep.get("_path") else None
    if path is None:
        name = display_name(((rep.get("config") or {}).get("model") or {}).get("spec") or "run")
    else:
        name = path.parent.name if path.name == "report.json" else path.stem
    return f"{_safe(name)}-{_hash(run_key(rep))}"


def default_out_dir(reports: Sequence[dict]) -> Path:
    """./rescore-<8 hex digits of the runs' paths>: the same runs, the same folder; other runs, another."""
    return Path(f"rescore-{_hash(chr(0).join(sorted(run_key(r) for r in reports)))}")


def _report(run) -> dict:
    rep = as_report(run)
    if not isinstance(run, dict):
        check_finished(rep)
    return rep


def rescore(
    runs,
    rule_names: Sequence[str] = DEFAULT_RULES,
    out_dir=None,
    *,
    data=None,
    force: bool = False,
    fetch=None,
) -> dict:
    """Score `runs` (run directories, report.json paths or report dicts) again under each of
    `rule_names` (names, or one comma list), write OUT_DIR/rescore.json, rescore.md and OUT_DIR/<run>/<rule>/report.json, and
    return the table (rescore.json's dict, with "out_dir" and "files"). `data`: bundled, hub or a
    path to the file the runs scored (default: the bundled set, found by SHA-256). ReportError,
    DataError or UsageError (one line) before anything is written; existing files need `force`."""
    from .rescore_view import render_markdown

    rule_names = rules.parse_rules([rule_names] if isinstance(rule_names, str) else list(rule_names))
    reps, seen = [], set()
    for run in runs:
        rep = _report(run)
        if run_key(rep) not in seen:
            seen.add(run_key(rep))
            reps.append(rep)
    if not reps:
        raise ReportError("no runs to rescore")
    out = Path(out_dir).expanduser() if out_dir is not None else default_out_dir(reps)
    folders = {}
    for rep in reps:
        rep["_name"] = run_folder(rep)
        folders[rep["_name"]] = folders.get(rep["_name"], 0) + 1
    if any(n > 1 for n in folders.values()):  # 8 hex digits alike for two paths: use the whole hash
        for rep in reps:
            rep["_name"] = f"{rep['_name'][:-8]}{_hash(run_key(rep), 64)}"
    targets = [out / name for name in TABLE_FILES]
    targets += [out / rep["_name"] / rule / "report.json" for rep in reps for rule in rule_names]
    check_outputs(targets, force, out_dir=out)
    source = find_data(reps, data, fetch, what="rescore ranks runs of one data file")
    items = source.dataset.items
    wanted = list(rule_names)
    rescored = []
    for rep in reps:
        by_rule = {}
        for rule in rule_names:
            by_rule[rule] = rescore_report(rep, items, rule)
            by_rule[rule]["_written"] = str(out / rep["_name"] / rule / "report.json")
        if rules.CARD_RULE not in by_rule and rule_problem(rep, items, rules.CARD_RULE) is None:
            by_rule[rules.CARD_RULE] = rescore_report(rep, items, rules.CARD_RULE)
        rescored.append(by_rule)
    table = build_table(reps, rescored, wanted)
    files = {}
    for by_rule in rescored:
        for rule in wanted:
            rep = {k: v for k, v in by_rule[rule].items() if not k.startswith("_")}
            files[Path(by_rule[rule]["_written"])] = dumps(rep)
    files[out / TABLE_FILES[0]] = json.dumps(table, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    files[out / TABLE_FILES[1]] = render_markdown(table)
    write_outputs(files)
    return table | {"out_dir": str(out), "files": [str(p) for p in files]}
