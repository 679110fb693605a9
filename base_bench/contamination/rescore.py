"""`contamination report RUN --scan DIR`: did contamination inflate a finished run's Elo?

    rep = reports_io.load_report("runs/my-run"); scan = load_scan("scan-out")
    res = rescore(rep, scan, resamples=2000, seed=1234)      # JSON-able dict; pure
    print("\\n".join(summary_lines(res))); text = render_markdown(res)

As GPT-3 did, the run's items are split by the scan into the clean subset (not dirty) and the dirty
one, and the Overall Elo is refitted on each (elo.fit_elo, the card's weighted fit with its prior).
The intervals come from the report's own bootstrap: items drawn with replacement within each
category of the full set (stats.resample_counts, taken a block of resamples at a time by
stats.resample_count_blocks, so a large report costs the memory of one block); in every draw the full set, the clean subset and
the dirty subset are refitted on the same drawn items (elo.fit_elo_many), so "clean − full" and
"dirty − full" are paired differences with percentile intervals. A clean Elo well below the full
one (the interval of clean − full below 0) is the warning sign of a score inflated by
contamination. A subset with no items has no Elo (null).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import ReportError
from ..results.elo import fit_elo, fit_elo_many
from ..results.markdown import md_code, md_text
from ..results.reports_io import MAX_ITEMS, SHA256, load_checked
from ..results.stats import CONFIDENCE, block_rows, percentile_interval, resample_count_blocks


def load_scan(where: str | Path) -> dict:
    """A scan's contamination.json, read within bounds (untrusted.load_json) and checked where
    `rescore` reads it; ReportError (one line) if it cannot be used."""
    p = Path(where).expanduser()
    f = p / "contamination.json" if p.is_dir() else p
    if not f.exists():
        raise ReportError(f"--scan {where}: no contamination.json there (is the scan finished?)")
    return load_checked(f, _scan_problem, "a base-bench contamination scan")


def _scan_problem(scan) -> str | None:
    if not isinstance(scan, dict) or not isinstance(scan.get("items"), list):
        return "no items"
    data = scan.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("sha256"), str) or not SHA256.fullmatch(data["sha256"]):
        return "data.sha256 is not 64 lowercase hex digits"
    if len(scan["items"]) > MAX_ITEMS:
        return f"{len(scan['items'])} items; at most {MAX_ITEMS:,} are read"
    for n, it in enumerate(scan["items"]):
        if not (isinstance(it, dict) and isinstance(it.get("id"), str) and isinstance(it.get("dirty"), bool)):
            return f"item {n} has no string id and true/false dirty"
    if not isinstance(scan.get("settings", {}), dict):
        return "settings is not an object"
    return None


def rescore(rep: dict, scan: dict, resamples: int = 2000, seed: int = 1234) -> dict:
    if rep["data"]["sha256"] != scan["data"]["sha256"]:
        raise ReportError(
            f"the run scored data SHA-256 {rep['data']['sha256'][:12]}… but the scan looked for the items "
            f"of {scan['data']['sha256'][:12]}…; scan with the run's data (--local-data)"
        )
    dirty_of = {i["id"]: i for i in scan["items"]}
    items = rep["items"]
    missing = [it["id"] for it in items if it["id"] not in dirty_of]
    if missing:
        raise ReportError(f"{len(missing)} of the run's items are not in the scan (e.g. {missing[0]!r})")
    e = np.array([float(it["item_elo"]) for it in items])
    w = np.array([float(it["point_weight"]) for it in items])
    y = np.array([1.0 if it["correct"] else 0.0 for it in items])
    dirty = np.array([bool(dirty_of[it["id"]]["dirty"]) for it in items])
    full = fit_elo(zip(e, w, y))
    # The draws a block of resamples at a time (the same numbers as one matrix; memory of one block).
    masks = {"clean": ~dirty, "dirty": dirty}
    boots: dict[str, list] = {"full": [], "clean": [], "dirty": []}
    empty = {"clean": 0, "dirty": 0}
    strata = [it["category"] for it in items]
    for counts in resample_count_blocks(strata, resamples, seed, block_rows(len(items), resamples)):
        cw = counts * w[None, :]
        boots["full"].append(fit_elo_many(e, cw, y))
        for key, mask in masks.items():
            if mask.any():
                boots[key].append(fit_elo_many(e, cw * mask[None, :], y))
                empty[key] += int(((counts * mask[None, :]).sum(axis=1) == 0).sum())
    boot_full = np.concatenate(boots["full"])

    def block(key):
        mask = masks[key]
        n = int(mask.sum())
        acc = {
            "n": n,
            "n_correct": int(y[mask].sum()),
            "raw_accuracy": float(y[mask].mean()) if n else None,
            "weighted_accuracy": float((w * y)[mask].sum() / w[mask].sum()) if n else None,
        }
        if not n:
            return {
                **acc,
                "elo": None,
                "elo_ci95": None,
                "diff_vs_full": None,
                "diff_ci95": None,
                "empty_resamples": resamples,
            }
        elo = fit_elo(zip(e[mask], w[mask], y[mask]))
        boot = np.concatenate(boots[key])
        return {
            **acc,
            "elo": elo,
            "elo_ci95": list(percentile_interval(boot, CONFIDENCE)),
            "diff_vs_full": elo - full,
            "diff_ci95": list(percentile_interval(boot - boot_full, CONFIDENCE)),
            "empty_resamples": empty[key],
        }

    clean, dirty_b = block("clean"), block("dirty")
    res = {
        "tool": "base-bench contamination report",
        "run": rep.get("_path"),
        "scan": scan.get("_path"),
        "model": ((rep.get("config") or {}).get("model") or {}).get("spec"),
        "data_sha256": rep["data"]["sha256"],
        "n_items": len(items),
        "rule": scan.get("settings", {}).get("dirty_rule"),
        "bootstrap": {
            "resamples": resamples,
            "seed": seed,
            "confidence": CONFIDENCE,
            "method": "items drawn with replacement within each category of the full set; full set, clean "
            "and dirty subsets refitted on the same draws; percentile intervals",
        },
        "full": {
            "n": len(items),
            "n_correct": int(y.sum()),
            "raw_accuracy": float(y.mean()),
            "weighted_accuracy": float((w * y).sum() / w.sum()),
            "elo": full,
            "elo_ci95": list(percentile_interval(boot_full, CONFIDENCE)),
            "run_reported_elo": ((rep.get("results") or {}).get("overall") or {}).get("elo"),
        },
        "clean": clean,
        "dirty": dirty_b,
        "dirty_items": [it["id"] for it, d in zip(items, dirty) if d],
    }
    res["verdict"] = verdict(res)
    return res


def _n(x: float) -> str:
    """A whole number with a real minus sign (and no "-0")."""
    s = f"{x:.0f}"
    return "0" if s == "-0" else s.replace("-", "−")


def verdict(res: dict) -> str:
    c, d = res["clean"], res["dirty"]
    if d["n"] == 0:
        return "no item is dirty: the clean subset is the whole set, and contamination cannot have moved the Elo"
    if c["n"] == 0:
        return "every item is dirty: there is no clean subset to compare with"
    lo, hi = c["diff_ci95"]
    head = f"clean − full = {_n(c['diff_vs_full'])} Elo (95% CI {_n(lo)} to {_n(hi)}) on {c['n']} clean items"
    if hi < 0:
        return head + ": the clean Elo is below the full Elo, so contamination has likely inflated the score"
    if lo > 0:
        return head + ": the clean Elo is above the full Elo; no sign that contamination inflated the score"
    return head + ": the interval includes 0; no clear sign that contamination moved the score"


def _ci(ci) -> str:
    return "–" if ci is None else f"[{_n(ci[0])}, {_n(ci[1])}]"


def _elo(x) -> str:
    return "–" if x is None else f"{x:.1f}".replace("-", "−")


def summary_lines(res: dict) -> list[str]:
    f, c, d = res["full"], res["clean"], res["dirty"]
    return [
        f"{res['n_items']} items of {res['model']} ({res['run']}); scan {res['scan']}",
        f"full   Elo {_elo(f['elo'])}  95% CI {_ci(f['elo_ci95'])}  ({f['n']} items)",
        f"clean  Elo {_elo(c['elo'])}  95% CI {_ci(c['elo_ci95'])}  ({c['n']} items)  clean − full "
        f"{_elo(c['diff_vs_full'])}  95% CI {_ci(c['diff_ci95'])}",
        f"dirty  Elo {_elo(d['elo'])}  95% CI {_ci(d['elo_ci95'])}  ({d['n']} items)  dirty − full "
        f"{_elo(d['diff_vs_full'])}  95% CI {_ci(d['diff_ci95'])}",
        "",
        "Verdict: " + res["verdict"],
    ]


def render_markdown(res: dict) -> str:
    rows = []
    for name in ("full", "clean", "dirty"):
        b = res[name]
        acc = "–" if b["raw_accuracy"] is None else f"{100 * b['raw_accuracy']:.1f}%"
        diff = "" if name == "full" else f"{_elo(b['diff_vs_full'])} | {_ci(b['diff_ci95'])}"
        rows.append(f"| {name} | {b['n']} | {_elo(b['elo'])} | {_ci(b['elo_ci95'])} | {diff or ' | '} | {acc} |")
    bs = res["bootstrap"]
    return "\n".join(
        [
            "# Elo on the clean and dirty items",
            "",
            f"Run: {md_code(res['run'])} (model {md_code(res['model'])}); scan: {md_code(res['scan'])}.",
            "",
            f"**Verdict:** {res['verdict']}.",  # our own words and numbers
            "",
            "| subset | items | Overall Elo | 95% CI | − full | 95% CI of − full | accuracy |",
            "|---|---:|---:|---|---:|---|---:|",
            *rows,
            "",
            f"Dirty: {md_text(res['rule'])}.",
            "",
            f"Bootstrap: {bs['resamples']} resamples, seed {bs['seed']}; {md_text(bs['method'])}.",
            "",
            f"Dirty items ({len(res['dirty_items'])}): "
            + (", ".join(md_text(i) for i in res["dirty_items"]) or "none")
            + ".",
            "",
        ]
    )
