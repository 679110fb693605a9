"""Two runs' reports set item by item: what `compare` pairs and counts, and what `explore` shows.

    info = run_info(rep)                        # model, backend, dtype, add_bos, ... of one report
    pairs = pair_items(rep_a, rep_b)            # [(item in A, same item in B)]; ReportError if not the same items
    f = flips(pairs)                            # {"a_right_b_wrong": [...], "a_wrong_b_right": [...]}

One definition of a flipped item for both commands: `compare`'s McNemar counts and flipped lists and
the flip filter of `explore`'s page are the lengths and ids of `flips(pairs)`, so they cannot drift
apart. Pure functions of report dicts (as `reports_io.load_report` returns them).
"""

from __future__ import annotations

from .checked import report_rule
from .reports_io import ReportError, display_name

FLIP_KEYS = ("a_right_b_wrong", "a_wrong_b_right")


def run_info(rep: dict) -> dict:
    cfg = rep.get("config") or {}
    model = cfg.get("model") or {}
    spec = model.get("spec") or "unknown model"
    return {
        "report": rep.get("_path"),
        "model": spec,
        "name": display_name(spec),
        "backend": cfg.get("backend", "transformers"),  # reports from before backends were transformers runs
        "dtype": cfg.get("dtype"),
        "add_bos": cfg.get("add_bos"),
        "device": cfg.get("device"),
        "scoring_version": cfg.get("scoring_version"),
        "official": rep.get("official"),
        "rule": report_rule(rep),
        "data_sha256": rep["data"]["sha256"],
        "n_items": len(rep["items"]),
    }


def pair_items(rep_a: dict, rep_b: dict) -> list[tuple[dict, dict]]:
    """(item in A, same item in B) in A's order; ReportError when the runs are not on the same items."""
    sha_a, sha_b = rep_a["data"]["sha256"], rep_b["data"]["sha256"]
    if sha_a != sha_b:
        raise ReportError(
            f"the runs scored different data (SHA-256 {sha_a[:12]}… vs {sha_b[:12]}…); "
            "a comparison needs both runs on the same data file"
        )
    a = {it["id"]: it for it in rep_a["items"]}
    b = {it["id"]: it for it in rep_b["items"]}
    if set(a) != set(b):
        only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
        raise ReportError(
            f"the runs scored different items (A has {len(a)}, B has {len(b)}; {only_a} only in A, {only_b} only "
            "in B, e.g. one ran with --limit); a comparison needs both runs on the same items"
        )
    for i, it in a.items():
        other = b[i]
        if (it["category"], float(it["item_elo"]), float(it["point_weight"])) != (
            other["category"],
            float(other["item_elo"]),
            float(other["point_weight"]),
        ):
            raise ReportError(f"item {i!r} has a different category, item Elo or weight in the two reports")
    return [(a[i], b[i]) for i in a]


def flipped_item(a: dict, b: dict) -> dict:
    def selected(it):
        return it.get("selected_text", f"choice {it.get('prediction', '?')}")

    return {
        "id": a["id"],
        "category": a["category"],
        "difficulty": a.get("difficulty"),
        "item_elo": a["item_elo"],
        "selected_a": selected(a),
        "selected_b": selected(b),
        "correct": a.get("label_text", b.get("label_text", f"choice {a.get('label', '?')}")),
    }


def flips(pairs) -> dict[str, list[dict]]:
    """The items one run got right and the other wrong, in A's order: "a_right_b_wrong" and
    "a_wrong_b_right", each a list of `flipped_item`s. Their lengths are McNemar's discordant counts."""
    return {
        "a_right_b_wrong": [flipped_item(a, b) for a, b in pairs if a["correct"] and not b["correct"]],
        "a_wrong_b_right": [flipped_item(a, b) for a, b in pairs if not a["correct"] and b["correct"]],
    }
