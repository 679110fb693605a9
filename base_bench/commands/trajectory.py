"""`base-bench trajectory DIR`: the Elo of one model over its training, from per-step reports.

    base-bench trajectory runs/train-bench [--out-dir OUT] [--x tokens] [--force]
    base-bench trajectory --store URL --group G [--x tokens] [--out-dir OUT]   # a group of stored runs

DIR holds the reports of one training run, one per scored step, as `BaseBenchCallback` writes them
(`DIR/step-<N>/report.json`, each carrying `training_step`). Every report.json under DIR with a
`training_step` is read; nothing is rescored. With no DIR, the runs are those of group G in the
results store (--store, else $BASE_BENCH_STORE; labelled by `store ingest --group G --step N` or by
the run's own --group/--step), each run's `training_step` from its row. `--x tokens` plots against
`tokens_seen` instead of the step: reports (or stored runs) without it are left out, and a note
on stderr says how many. Written into --out-dir (default: DIR itself, or ./trajectory for a store;
`--out` is the older spelling):

    trajectory.png    Overall Elo and each category's Elo against step (or tokens), with 95% bootstrap bands
    trajectory.md     a table per step: Overall Elo, its 95% CI and ±, accuracies, category Elo
    trajectory.html   the same table and the plot in one self-contained page

Refused, with one line and exit code 2: a DIR (or a group) with no such reports, reports on
different data files (their Elo is not comparable), two reports for the same step (or token count),
a store that cannot be read, --store or --group given with DIR, and existing output files unless
--force. A DIR given wins over $BASE_BENCH_STORE. In code:

    traj = build_trajectory(find_reports("runs/train-bench"))
    traj = build_trajectory(reports, x="tokens_seen")          # against tokens seen
    text = render_markdown(traj, "trajectory.png")
"""

from __future__ import annotations

import argparse
import base64
import html
import sys
from pathlib import Path

from ..errors import BaseBenchError, ReportError, StoreError, UsageError
from ..results import plots
from ..results.checked import describe_data
from ..results.markdown import md_cell, md_text
from ..results.report import ci_cell, elo_cell, pct
from ..results.reports_io import (
    MAX_WALK_DEPTH,
    check_finished,
    check_outputs,
    display_name,
    find_named,
    html_page,
    load_report,
    write_outputs,
)
from .cliargs import Parser, add_out_dir, add_store_flag, fail, printable, reading_store

OUTPUTS = {"png": "trajectory.png", "md": "trajectory.md", "html": "trajectory.html"}
X_KEYS = {"step": "training_step", "tokens": "tokens_seen"}  # --x: the report field plotted along x
X_NAMES = {"training_step": "step", "tokens_seen": "tokens seen"}
STORE_OUT_DIR = "trajectory"  # --out-dir's default when the runs come from a store


def find_reports(run_dir: str | Path, x: str = "training_step") -> list[dict]:
    """Every report.json under `run_dir` that carries `x` (a training_step, or tokens_seen), in its
    order; a note on stderr for reports without it when x is tokens_seen."""
    root = Path(run_dir).expanduser()
    if not root.is_dir():
        raise ReportError(f"{run_dir}: no such directory")
    paths, deeper = find_named(root, "report.json")
    if deeper:
        print(
            f"note: {deeper} folder(s) lie more than {MAX_WALK_DEPTH} levels below {printable(str(run_dir))}; "
            "they were not searched",
            file=sys.stderr,
        )
    found = [load_report(p) for p in paths]
    reports = [r for r in found if r.get(x) is not None]  # load_report checked it is an int
    if not reports:
        raise ReportError(
            f"{run_dir}: no report.json with a training_step under it (BaseBenchCallback writes "
            "them as step-<N>/report.json)"
            if x == "training_step"
            else f"{run_dir}: no report.json with tokens_seen under it (give runs --tokens N)"
        )
    if x != "training_step" and len(reports) < len(found):
        _note_missing(len(found) - len(reports), len(found), x)
    return sorted(reports, key=lambda r: r[x])


def _note_missing(missing: int, total: int, x: str) -> None:
    print(f"base-bench: note: {missing} of {total} run(s) have no {x}; they are left out", file=sys.stderr)


def stored_runs(db, group: str, x: str = "training_step") -> list[dict]:
    """The runs of `group` in the store that carry `x`, as full reports (with the store's labels), in
    its order; StoreError in one line for a group without such runs, a note for runs without `x`."""
    from ..store import summaries

    runs = summaries(db, group=group)
    if not runs:
        raise StoreError(f"{db.shown}: no runs in group {group!r} (see `base-bench store list`)")
    keep = [r for r in runs if r.get(x) is not None]
    if not keep:
        how = "--step N" if x == "training_step" else "--tokens N"
        raise StoreError(
            f"{db.shown}: none of the {len(runs)} run(s) of group {group!r} has a {x} "
            f"(label them: base-bench store ingest ... --group {group} {how})"
        )
    if len(keep) < len(runs):
        _note_missing(len(runs) - len(keep), len(runs), x)
    from ..store.query import reports_of

    return sorted(reports_of(db, keep), key=lambda r: r[x])


def build_trajectory(reports: list[dict], x: str = "training_step") -> dict:
    """The table behind the plot and pages, as plain JSON-able data, along `x` (training_step or
    tokens_seen); ReportError if the reports cannot form one trajectory (different data files, a
    step twice)."""
    shas = {r["data"]["sha256"] for r in reports}
    if len(shas) > 1:
        raise ReportError(
            f"the reports scored {len(shas)} different data files "
            f"({', '.join(sorted(s[:12] + '…' for s in shas))}); a trajectory needs one"
        )
    seen: dict[int, str] = {}
    for r in reports:
        check_finished(r, ("elo", "raw_accuracy", "weighted_accuracy", "n"))
        at = r.get(x)
        if at is None:
            raise ReportError(f"{r.get('_path')}: no {x}")
        if at in seen:
            raise ReportError(f"{X_NAMES[x]} {at} has two reports: {seen[at]} and {r['_path']}")
        seen[at] = r["_path"]
    categories = plots.category_rows(reports)
    rows = []
    for r in reports:
        res = r["results"]
        o = res["overall"]
        rows.append(
            {
                "step": r.get("training_step"),
                "tokens_seen": r.get("tokens_seen"),
                "x": r[x],
                "elo": o["elo"],
                "elo_ci95": o.get("elo_ci95"),
                "elo_se": o.get("elo_se"),
                "raw_accuracy": o["raw_accuracy"],
                "weighted_accuracy": o["weighted_accuracy"],
                "n_items": o["n"],
                "categories": {c: ((res.get("categories") or {}).get(c) or {}).get("elo") for c in categories},
                "official": r.get("official"),
                "report": r["_path"],
            }
        )
    first = reports[0]
    groups = {r.get("group") for r in reports}
    models = list(
        dict.fromkeys(display_name(((r.get("config") or {}).get("model") or {}).get("spec") or "?") for r in reports)
    )
    return {
        "benchmark": first.get("benchmark", "base-bench"),
        # a group's runs are named by the group (its checkpoints' specs differ); else by the model
        "model": first["group"] if len(groups) == 1 and first.get("group") else ", ".join(models),
        "x": x,
        "data_sha256": first["data"]["sha256"],
        "data_description": describe_data(first["data"]["sha256"]),
        "non_official_reasons": list(dict.fromkeys(x for r in reports for x in r.get("non_official_reasons", []))),
        "categories": categories,
        "rows": rows,
    }


# ---------------------------------------------------------------- rendering (formatting only)


def _x(traj: dict) -> str:
    return traj.get("x", "training_step")


def table_cells(traj: dict) -> tuple[list[str], list[list[str]]]:
    head = [X_NAMES[_x(traj)], "Overall Elo", "95% CI", "±", "raw acc", "weighted acc", "items"] + [
        c.replace("_", " ") for c in traj["categories"]
    ]
    rows = []
    for r in traj["rows"]:
        rows.append(
            [
                str(r.get("x", r["step"])),
                elo_cell(r["elo"]),
                ci_cell(r["elo_ci95"]),
                elo_cell(r["elo_se"]),
                pct(r["raw_accuracy"]),
                pct(r["weighted_accuracy"]),
                str(r["n_items"]),
            ]
            + [elo_cell(r["categories"][c]) for c in traj["categories"]]
        )
    return head, rows


def _title(traj: dict) -> str:
    against = "" if _x(traj) == "training_step" else " (against tokens seen)"
    return f"{traj['benchmark']} over training: {traj['model']}{against}"


def _notes(traj: dict) -> list[str]:
    out = [f"Data: {traj['data_description']} (SHA-256 {traj['data_sha256']})."]
    if traj["non_official_reasons"]:
        out.append("Not official: " + "; ".join(traj["non_official_reasons"]) + ".")
    out.append(
        "Bands and CIs are the reports' 95% bootstrap intervals; ± is the curvature standard error. "
        "A change between steps smaller than the band is not evidence of progress."
    )
    return out


def render_markdown(traj: dict, png_name: str) -> str:
    head, rows = table_cells(traj)
    out = [f"# {md_text(_title(traj))}", ""] + [md_text(n) + "\n" for n in _notes(traj)]
    out += ["| " + " | ".join(md_cell(h) for h in head) + " |", "|" + "---:|" * len(head)]
    out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows]
    out += ["", f"![Overall and category Elo against {_x_words(traj)}]({png_name})"]
    return "\n".join(out) + "\n"


def render_html(traj: dict, png: bytes) -> str:
    e = html.escape
    head, rows = table_cells(traj)
    out = [f"<h1>{e(_title(traj))}</h1>"]
    out += [f'<p class="note">{e(n)}</p>' for n in _notes(traj)]
    out.append("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr></thead><tbody>")
    out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
    out.append("</tbody></table>")
    data = base64.b64encode(png).decode("ascii")
    out.append(f'<img alt="Overall and category Elo against {_x_words(traj)}" src="data:image/png;base64,{data}">')
    return html_page(_title(traj), out)


def _x_words(traj: dict) -> str:
    return "training step" if _x(traj) == "training_step" else "tokens seen"


def summary_lines(traj: dict) -> list[str]:
    lines = [_title(traj)]
    name, width = ("step", 7) if _x(traj) == "training_step" else ("tokens", 13)
    for r in traj["rows"]:
        lines.append(
            f"  {name} {r.get('x', r['step']):>{width}}  Overall Elo {elo_cell(r['elo']):>5}  95% CI {ci_cell(r['elo_ci95']):<10}  "
            f"raw {pct(r['raw_accuracy'])}"
        )
    return lines


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="base-bench trajectory",
        description="Plot a model's Overall and category Elo against training step (or tokens seen), from the "
        "step-<N>/report.json files BaseBenchCallback writes or from a group of runs in a results store, and "
        "write a Markdown table and a self-contained HTML page.",
    )
    p.add_argument(
        "run_dir",
        nargs="?",
        metavar="DIR",
        help="directory holding the per-step reports of one training run (none: --group G of the store)",
    )
    add_store_flag(p, "with no DIR: read the runs of --group G from this store")
    p.add_argument("--group", metavar="G", help="with a store (no DIR): the group whose runs make the trajectory")
    p.add_argument(
        "--x",
        choices=sorted(X_KEYS),
        default="step",
        help="what to plot Elo against: the runs' training step (default) or the tokens seen (runs without "
        "tokens_seen are left out)",
    )
    add_out_dir(
        p,
        f"where to write trajectory.png/.md/.html (default: DIR, or ./{STORE_OUT_DIR} for a store); "
        "--out is the older spelling",
    )
    p.add_argument("--force", action="store_true", help="overwrite existing trajectory files")
    return p


def read_runs(args, x: str) -> list[dict]:
    """The reports of the trajectory: DIR's, or with no DIR those of --group in the store."""
    db = reading_store(args.store, args.run_dir is not None)
    if db is None:
        if args.run_dir is None:
            raise UsageError("give DIR (a training run's per-step reports) or --store URL --group G")
        if args.group is not None:
            raise UsageError("--group selects stored runs: give it with --store and no DIR")
        return find_reports(args.run_dir, x)
    try:
        if args.group is None:
            raise UsageError(f"{db.shown}: give --group G, the group of runs to plot (see `base-bench store list`)")
        return stored_runs(db, args.group, x)
    finally:
        db.dispose()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    x = X_KEYS[args.x]
    out = Path(args.out_dir or args.run_dir or STORE_OUT_DIR).expanduser()
    try:
        check_outputs([], args.force, out_dir=out)
        reports = read_runs(args, x)
        traj = build_trajectory(reports, x)
        targets = {k: out / name for k, name in OUTPUTS.items()}
        check_outputs(targets.values(), args.force, out_dir=out)
        png = plots.trajectory_png([r[x] for r in reports], reports, _title(traj), x_label=_x_words(traj))
        write_outputs(
            {
                targets["png"]: png,
                targets["md"]: render_markdown(traj, OUTPUTS["png"]),
                targets["html"]: render_html(traj, png),
            }
        )
    except BaseBenchError as exc:
        return fail(exc)
    print(printable("\n".join(summary_lines(traj))))
    print(f"wrote {targets['png']}, {targets['md']} and {targets['html']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
