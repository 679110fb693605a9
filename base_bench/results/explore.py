"""The explore page: several runs of one data file set side by side, item by item, in one HTML file.

    page = build_page(reports, items, data_record)      # JSON-able dict: every number the page shows
    page = build_page(reports, items, data_record, redact=True)   # the same without item texts
    text = render_html(page, canaries)                  # explore.html: self-contained, no network

`reports` are report dicts (`reports_io.load_report`) that scored one data file, and `items` that
file's `Item`s (its SHA-256 is the reports' `data.sha256`; the caller checks that). Each report item
is checked against its data item (same category and label, one score per continuation) before it is
used, so the page never shows a number under the wrong continuation.

Every number is computed here, in Python, and the page's script only filters, sorts and pages what
it is given: per run and item the chosen continuation, right or wrong, each choice's mean log-prob
(the report's own float, shown rounded with the exact value on hover) and the margin of the chosen
choice over the runner-up; per item whether the runs disagree and whether every run misses it; per
pair of runs the flipped items, from `pairing.flips`, the same lists whose lengths `compare` reports
as its McNemar counts. Each run is named in the header as every view names runs
(`reports_io.run_names`: group and step, else the shortest tail of its model spec that tells it
apart), so that no two runs look alike.

With two runs or more labelled with a training step (the checkpoints of a training run, e.g.
`base-bench explore --store URL --group G`), the page also has an item × step grid: one row per
item, one column per checkpoint in step order, each cell right or wrong and shaded by margin, with
when each item was learned for good and how often it was forgotten (`steps_grid.build_grid`, as
`page["grid"]`; None otherwise). The script draws it on one <canvas> from that compact data.

Everything that comes from a report or a data file is text someone else wrote. In the static part of
the page it goes through `html.escape`; the rest travels as JSON inside a
`<script type="application/json">` block with `<`, `>`, `&`, U+2028 and U+2029 escaped (`script_json`),
and the script puts it into the page with `textContent` only, never as markup. A Content-Security-
Policy allows only the page's own inline script and style (by hash) and no request at all.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
from collections.abc import Sequence

from ..items import card
from ..items.records import Item
from .checked import DATA_LABELS, data_kind
from .paired import mcnemar_exact
from .pairing import FLIP_KEYS, flips, pair_items, run_info
from .reports_io import ReportError, backend_name, run_names
from .steps_grid import build_grid

PAGE_FILE = "explore.html"
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")  # a canary tag
TERMS_NOTICE = (
    "These are benchmark items. The benchmark's terms allow them to be used only to evaluate models: "
    "no part of them (questions, continuations, answers, labels) may be used to train a model in any "
    "form, and every user must keep them out of training data. Do not publish this page, put it on "
    "the web or anywhere a crawler can read it; it is marked noindex and carries the benchmark's "
    "canary string so that a corpus holding it can be found."
)
REDACTED_NOTICE = (
    "Item texts are left out of this page (written with --redact): it shows ids, categories, "
    "difficulties, which continuation is correct and the scores only. Labels are covered by the "
    "benchmark's terms as well, so keep this page out of training data too."
)
PUBLISH_WARNING = (
    "explore.html shows the benchmark's items and answers: do not publish it or put it where a "
    "crawler can read it (the benchmark's terms: keep the items out of training data)"
)
REDACTED_WARNING = (
    "explore.html has no item texts, but it still shows the benchmark's answers (which continuation "
    "is correct): share it, but do not publish it or put it where a crawler can read it"
)


def data_name(record: dict) -> str:
    """The data's name on the page, from its checksum (never from a report's own words)."""
    return DATA_LABELS[data_kind(record["sha256"])]


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def choice_numbers(it: dict, n: int, where: str) -> tuple[list, list, list] | None:
    """(mean log-probs, summed log-probs, token counts) of a report item's `n` choices, or None when
    the report has no scores for it; ReportError when they are not `n` finite numbers."""
    choices = it.get("choices")
    if choices is None:
        return None
    if len(choices) != n:
        raise ReportError(f"{where}: {len(choices)} choice scores for {n} continuations in the data file")
    means, sums, toks = [], [], []
    for c in choices:
        lp, nt = c.get("logprob"), c.get("n_tokens")
        mean = c.get("mean_logprob", lp / nt if _finite(lp) and _int(nt) and nt > 0 else None)
        if not (_finite(lp) and _finite(mean) and (nt is None or (_int(nt) and nt > 0))):
            raise ReportError(f"{where}: a choice's log-prob or token count is not a number")
        means.append(float(mean))
        sums.append(float(lp))
        toks.append(nt)
    return means, sums, toks


def margin(means: Sequence[float], chosen: int) -> float | None:
    """How far the chosen continuation's mean log-prob lies above the best of the others (0 for a
    tie, which the card breaks by the lowest index); None with fewer than two choices."""
    others = [m for i, m in enumerate(means) if i != chosen]
    return float(means[chosen] - max(others)) if others else None


def run_label(info: dict, data: dict) -> dict:
    """The parts of a run's label on the page: model, dtype, backend, BOS and data."""
    return {
        "name": info["name"],
        "model": str(info["model"]),
        "dtype": "n/a" if info["dtype"] is None else str(info["dtype"]),
        "backend": backend_name(info["backend"]),
        "bos": "+BOS" if info["add_bos"] else "no BOS",
        "data": data_name(data),
    }


def _run_block(rep: dict, tag: str, rows: list[Item], where: dict[str, int]) -> dict:
    info = run_info(rep)
    res = (rep.get("results") or {}).get("overall") or {}
    n = len(rows)
    run = {
        "tag": tag,
        **run_label(info, rep["data"]),
        "report": str(rep.get("_path") or ""),
        "official": bool(rep.get("official")),
        "elo": res.get("elo"),
        "elo_ci95": res.get("elo_ci95"),
        "raw_accuracy": res.get("raw_accuracy"),
        "n_correct": res.get("n_correct"),
        "n_items": len(rep["items"]),
        "pred": [None] * n,
        "correct": [None] * n,
        "margin": [None] * n,
        "mean": [None] * n,
        "logprob": [None] * n,
        "ntok": [None] * n,
        "truncated": [None] * n,
    }
    for it in rep["items"]:
        row = where[it["id"]]
        item = rows[row]
        at = f"{rep.get('_path')}: item {it['id']!r}"
        if it["category"] != item.category:
            raise ReportError(f"{at} is {it['category']!r} in the report but {item.category!r} in the data file")
        n_choices = len(item.continuations)
        label, pred = it.get("label", item.label), it.get("prediction")
        if label != item.label:
            raise ReportError(f"{at}: the report's label {label!r} is not the data file's {item.label}")
        if not (_int(pred) and 0 <= pred < n_choices):
            raise ReportError(f"{at}: prediction {pred!r} is not one of its {n_choices} continuations")
        if bool(it["correct"]) != (pred == item.label):
            raise ReportError(f"{at}: 'correct' does not match its prediction and label")
        numbers = choice_numbers(it, n_choices, at)
        run["pred"][row] = pred
        run["correct"][row] = bool(it["correct"])
        run["truncated"][row] = bool(it.get("truncated", False))
        if numbers:
            run["mean"][row], run["logprob"][row], run["ntok"][row] = numbers
            run["margin"][row] = margin(numbers[0], pred)
    return run


def _pair(reps: list[dict], i: int, j: int, where: dict[str, int]) -> dict:
    """Runs i and j as `compare` pairs them (A = i, B = j): the flipped items as row numbers, the
    counts and the exact McNemar p; or why compare would refuse the pair."""
    try:
        pairs = pair_items(reps[i], reps[j])
    except ReportError as e:
        return {"a": i, "b": j, "refused": str(e)}
    f = flips(pairs)
    out = {"a": i, "b": j, **{k: [where[x["id"]] for x in f[k]] for k in FLIP_KEYS}}
    b, c = len(f["a_right_b_wrong"]), len(f["a_wrong_b_right"])
    out.update(discordant=b + c, p=mcnemar_exact(b, c), n=len(pairs))
    return out


def build_page(reports: Sequence[dict], items: Sequence[Item], data_record: dict, redact: bool = False) -> dict:
    """Everything the page shows, as a JSON-able dict (see the module docstring); ReportError (one
    line) for a report that does not fit the data file."""
    if not reports:
        raise ReportError("no runs to explore")
    by_id = {it.id: it for it in items}
    for rep in reports:
        unknown = [it["id"] for it in rep["items"] if it["id"] not in by_id]
        if unknown:
            raise ReportError(
                f"{rep.get('_path')}: item {unknown[0]!r} is not in the data file ({len(unknown)} such item(s))"
            )
    scored = {it["id"] for rep in reports for it in rep["items"]}
    rows = [it for it in items if it.id in scored]
    where = {it.id: n for n, it in enumerate(rows)}
    runs = [_run_block(rep, f"R{k + 1}", rows, where) for k, rep in enumerate(reports)]
    # named as every view names runs; the header shows dtype, backend and BOS in columns of their own
    for run, name in zip(runs, run_names(reports, beside=("dtype", "backend", "add_bos"))):
        run["name"] = name
    present = list(dict.fromkeys(it.category for it in rows))
    categories = [c for c in card.CATEGORIES if c in present] + [c for c in present if c not in card.CATEGORIES]
    seen = list(dict.fromkeys(it.difficulty for it in rows))
    difficulties = [d for d in card.DIFFICULTY_WEIGHTS if d in seen] + [
        d for d in seen if d not in card.DIFFICULTY_WEIGHTS
    ]
    disagree, all_wrong = [], []
    for r in range(len(rows)):
        preds = [run["pred"][r] for run in runs if run["pred"][r] is not None]
        disagree.append(len(set(preds)) > 1)
        all_wrong.append(bool(preds) and not any(run["correct"][r] for run in runs if run["pred"][r] is not None))
    page_items = {
        "id": [it.id for it in rows],
        "category": [categories.index(it.category) for it in rows],
        "difficulty": [difficulties.index(it.difficulty) for it in rows],
        "item_elo": [it.item_elo for it in rows],
        "label": [it.label for it in rows],
        "n_choices": [len(it.continuations) for it in rows],
        "disagree": disagree,
        "all_wrong": all_wrong,
    }
    if not redact:
        page_items["context"] = [it.context for it in rows]
        page_items["continuations"] = [list(it.continuations) for it in rows]
        page_items["tags"] = [[t for t in it.tags if not _GUID.search(t)] for it in rows]  # the canary is on top
    sha = data_record["sha256"]
    return {
        "benchmark": f"BananaMind Base Bench {card.VERSION}",
        "redacted": bool(redact),
        "data": {"sha256": sha, "name": data_name(data_record), "n_items_in_file": len(items)},
        "categories": categories,
        "difficulties": difficulties,
        "runs": runs,
        "items": page_items,
        "pairs": [_pair(list(reports), i, j, where) for i in range(len(reports)) for j in range(i + 1, len(reports))],
        "grid": build_grid(reports, runs),
    }


# ---------------------------------------------------------------- the HTML file


def script_json(obj) -> str:
    """`obj` as JSON that can sit inside a <script> element: ASCII only (so U+2028/U+2029 and lone
    surrogates are escapes), and `<`, `>`, `&` as \\u escapes, so no `</script>` or `<!--` can end
    or change the element. JSON.parse reads it back unchanged."""
    text = json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _fmt(x, spec: str = ".0f") -> str:
    return "n/a" if x is None else format(x, spec)


def _ci(ci) -> str:
    return "n/a" if not ci or None in ci else f"{ci[0]:.0f}–{ci[1]:.0f}"


def _run_rows(page: dict) -> list[str]:
    e = html.escape
    out = []
    for r in page["runs"]:
        acc = "n/a" if r["raw_accuracy"] is None else f"{100 * r['raw_accuracy']:.1f}%"
        full = f"{r['model']} — {r['report']}"
        out.append(
            f'<tr data-run="{e(r["tag"])}"><td class="tag">{e(r["tag"])}</td>'
            f'<td class="label" title="{e(full)}">{e(r["name"])}</td>'
            f"<td>{e(r['dtype'])}</td><td>{e(r['backend'])}</td><td>{e(r['bos'])}</td><td>{e(r['data'])}</td>"
            f'<td class="num">{_fmt(r["elo"], ".1f")}</td><td class="num">{_ci(r["elo_ci95"])}</td>'
            f'<td class="num">{acc}</td><td class="num">{r["n_items"]}</td>'
            f"<td>{'yes' if r['official'] else 'no'}</td></tr>"
        )
    return out


def render_html(page: dict, canaries: Sequence[str]) -> str:
    """explore.html for `page` (build_page's dict); `canaries` are the canary strings of the data
    (the benchmark's, and any in the items' tags), written into the page."""
    from .explore_assets import CSS, LIST_RUNS, SCRIPT

    e = html.escape
    csp = (
        f"default-src 'none'; script-src {_csp_hash(SCRIPT)}; style-src {_csp_hash(CSS)}; "
        "img-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'"
    )
    title = f"{page['benchmark']}: {len(page['runs'])} run(s) item by item"
    d = page["data"]
    n_rows = len(page["items"]["id"])
    canary_text = " ".join(canaries)
    n_runs = len(page["runs"])
    many = n_runs > LIST_RUNS  # the checkpoints of a training run: the runs' table folds away
    body = [
        '<header id="top">',
        f"<h1>{e(title)}</h1>",
        f'<p class="terms" id="terms"><strong>Evaluation only.</strong> {e(TERMS_NOTICE)}</p>',
        *([f'<p class="terms redacted" id="redacted">{e(REDACTED_NOTICE)}</p>'] if page["redacted"] else []),
        f'<p class="canary" id="canary">Canary: <code>{e(canary_text)}</code></p>',
        f'<p class="note">Data: {e(d["name"])}, SHA-256 <code>{e(d["sha256"])}</code>; {n_rows} item(s) '
        f"scored by at least one run, of {d['n_items_in_file']} in the file.</p>",
        *([f'<details class="runs"><summary>the {n_runs} runs (R1–R{n_runs})</summary>'] if many else []),
        '<table class="runs" id="runs"><thead><tr><th>run</th><th>model</th><th>dtype</th><th>backend</th>'
        "<th>BOS</th><th>data</th><th>Overall Elo</th><th>95% CI</th><th>raw acc</th><th>items</th>"
        "<th>official</th></tr></thead><tbody>",
        *_run_rows(page),
        "</tbody></table>",
        *(["</details>"] if many else []),
        "</header>",
        '<noscript><p class="terms">The item table needs JavaScript (the script is inline; the page '
        "makes no request).</p></noscript>",
        '<section id="controls" aria-label="filters"></section>',
        '<section id="pairinfo" aria-live="polite"></section>',
        '<div id="status" aria-live="polite"></div>',
        *(['<section id="grid" aria-label="items by checkpoint"></section>'] if page.get("grid") else []),
        '<div id="pager-top" class="pager"></div>',
        '<table class="items" id="items"></table>',
        '<div id="pager-bottom" class="pager"></div>',
        f'<script type="application/json" id="bb-data">{script_json(page)}</script>',
        f"<script>{SCRIPT}</script>",
    ]
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="robots" content="noindex, noarchive">',
        f'<meta http-equiv="Content-Security-Policy" content="{e(csp)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<!-- {e(canary_text).replace('--', '- -')} -->",
    ]
    return "\n".join(head + body + ["</body></html>"]) + "\n"
