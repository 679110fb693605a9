"""The trajectory of one model over its training: its Elo at each step (or tokens seen), from the
reports of its checkpoints, as a table, a plot and pages. No store and no command line here: the
reports come from `find_reports` (a training run's folder) or from a store (commands/trajectory.py's
`stored_runs`, the sweep's `render_pages`), and `base-bench trajectory` and `base-bench sweep` call
`write_pages`.

    reports = find_reports("runs/train-bench", say=print)      # DIR/step-<N>/report.json, by step
    traj = build_trajectory(reports)                           # JSON-able: one row per step
    traj = build_trajectory(reports, x="tokens_seen")          # against tokens seen
    text = render_markdown(traj, "trajectory.png")
    traj, paths = write_pages(reports, "training_step", Path("out"))   # out/trajectory.{png,md,html}
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from ..errors import ReportError
from . import plots
from .checked import describe_data
from .markdown import md_cell, md_text
from .report import ci_cell, elo_cell, pct
from .reports_io import (
    MAX_WALK_DEPTH,
    check_finished,
    check_outputs,
    display_name,
    find_named,
    html_page,
    load_report,
    write_outputs,
)

OUTPUTS = {"png": "trajectory.png", "md": "trajectory.md", "html": "trajectory.html"}
X_KEYS = {"step": "training_step", "tokens": "tokens_seen"}  # --x: the report field plotted along x
X_NAMES = {"training_step": "step", "tokens_seen": "tokens seen"}


def find_reports(run_dir: str | Path, x: str = "training_step", say=None) -> list[dict]:
    """Every report.json under `run_dir` that carries `x` (a training_step, or tokens_seen), in its
    order. `say` (e.g. print) gets a one-line note for folders too deep to search, and for reports
    without `x` when x is tokens_seen; without it they are left out silently."""
    root = Path(run_dir).expanduser()
    if not root.is_dir():
        raise ReportError(f"{run_dir}: no such directory")
    paths, deeper = find_named(root, "report.json")
    if deeper and say is not None:
        say(f"{deeper} folder(s) lie more than {MAX_WALK_DEPTH} levels below {run_dir}; they were not searched")
    found = [load_report(p) for p in paths]
    reports = [r for r in found if r.get(x) is not None]  # load_report checked it is an int
    if not reports:
        raise ReportError(
            f"{run_dir}: no report.json with a training_step under it (BaseBenchCallback writes "
            "them as step-<N>/report.json)"
            if x == "training_step"
            else f"{run_dir}: no report.json with tokens_seen under it (give runs --tokens N)"
        )
    if x != "training_step" and len(reports) < len(found) and say is not None:
        say(missing_note(len(found) - len(reports), len(found), x))
    return sorted(reports, key=lambda r: r[x])


def missing_note(missing: int, total: int, x: str) -> str:
    """The note that `missing` of `total` runs lack `x` and are left out of the trajectory."""
    return f"{missing} of {total} run(s) have no {x}; they are left out"


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


def write_pages(reports: list[dict], x: str, out: Path, force: bool = True) -> tuple[dict, dict]:
    """The trajectory of `reports` written to out/trajectory.{png,md,html} (refused without `force`
    where they exist); (the trajectory, the paths written). `base-bench sweep` calls it after each member."""
    traj = build_trajectory(reports, x)
    targets = {k: out / name for k, name in OUTPUTS.items()}
    check_outputs(targets.values(), force, out_dir=out)
    png = plots.trajectory_png([r[x] for r in reports], reports, _title(traj), x_label=_x_words(traj))
    write_outputs(
        {
            targets["png"]: png,
            targets["md"]: render_markdown(traj, OUTPUTS["png"]),
            targets["html"]: render_html(traj, png),
        }
    )
    return traj, targets
