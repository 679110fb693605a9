"""A checked report into the store: one row per run, its items and choices, its report, idempotently.

    key = put(db, report, source="runs/smollm2")             # a checked report dict (reports_io.load_report)
    key = put(db, report, source="evaluate()", raw=text)      # with the exact report.json bytes to keep
    key = run_key(report)                                     # the row's key, without writing

The key of a run is the SHA-256 of three things: the run's `signature_sha256` (everything that changes
a score, as `--resume` checks it: model fingerprint, data SHA-256, scoring version, dtype, device type,
BOS, backend), a hash of the item ids it scored (`--limit` and `--limit-per-category` are not in the
signature, so a smoke run and the full run of one model are two rows), and the scoring rule (a report
that `base-bench rescore` wrote is a row of its own). A report older than `signature_sha256` is keyed
on the configuration fields it holds that go into a signature.

Writing a key that is there already replaces that run (the labels, the source, the report), in one
transaction that holds the run's row: never a duplicate, never an error, whatever the number of
processes writing it at once. The report given must already be checked (`results.checked`): every
number written here is one the checked reading recomputed or range-checked.
"""

from __future__ import annotations

import functools
import hashlib
import json
import zlib
from datetime import datetime, timezone

from sqlalchemy import bindparam, delete

from ..items.dataset import BUNDLED_SHA256
from ..results import checked, rules
from . import schema
from .connect import Store

LABEL_KEYS = ("group", "training_step", "tokens_seen", "tags")  # report.json's labels (labels.py checks them)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def signature_of(rep: dict) -> str:
    """The run's `config.signature_sha256`; for an older report, a hash of what of it the report holds."""
    cfg = rep.get("config") or {}
    sig = cfg.get("signature_sha256")
    if isinstance(sig, str) and checked.SHA256.fullmatch(sig):
        return sig
    model = cfg.get("model") or {}
    legacy = {
        "legacy": True,
        "model": model.get("identity") or model.get("fingerprint") or model.get("spec"),
        "data_sha256": rep["data"]["sha256"],
        **{k: cfg.get(k) for k in ("scoring_version", "dtype", "device", "add_bos", "backend")},
    }
    return _sha(json.dumps(legacy, sort_keys=True, default=str))


def items_hash(rep: dict) -> str:
    """SHA-256 of the ids of the items the run scored, sorted (their order in the report does not matter)."""
    return _sha("\n".join(sorted(it["id"] for it in rep["items"])))


def run_key(rep: dict) -> str:
    return _sha(f"{signature_of(rep)}\n{items_hash(rep)}\n{checked.report_rule(rep)}")


def now() -> str:
    """The time, as `scored_at` and `stored_at` hold it: ISO 8601 in UTC, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _versions(versions) -> str | None:
    """The report's config.versions as JSON text: a flat object of short strings (anything else, a
    report from elsewhere may hold, is left out)."""
    if not isinstance(versions, dict):
        return None
    kept = {str(k)[:64]: v[:64] for k, v in list(versions.items())[:32] if isinstance(v, str)}
    return json.dumps(kept, sort_keys=True)


def _ci(block: dict, i: int):
    ci = block.get("elo_ci95")
    return float(ci[i]) if isinstance(ci, list) and len(ci) == 2 else None


def _lengths(rep: dict) -> dict[str, list[tuple[int, int]]]:
    """Each item's continuations' (characters, bytes), where the report lacks them and its data is the
    bundled set (a path in a report is never opened); {} otherwise."""
    if rep["data"]["sha256"] != BUNDLED_SHA256 or all("n_chars" in it["choices"][0] for it in rep["items"]):
        return {}
    return _bundled_lengths()


@functools.cache
def _bundled_lengths() -> dict[str, list[tuple[int, int]]]:
    from ..items.datasource import BUNDLED, open_data

    return {d.id: [rules.lengths(t) for t in d.continuations] for d in open_data(BUNDLED).dataset.items}


def rows_of(rep: dict, key: str, source: str, raw: bytes) -> dict:
    """The rows of one checked, finished report: {table name: rows}. The run's row is a dict; the other
    tables' rows are tuples of their columns in the table's order without the first, "run" (the run
    row's id, which `put` puts before each when it is known)."""
    cfg = rep.get("config") or {}
    res = rep["results"]
    o = res["overall"]
    rule = checked.report_rule(rep)
    lengths = _lengths(rep)
    run = {
        "key": key,
        "signature_sha256": signature_of(rep),
        "items_sha256": items_hash(rep),
        "rule": rule,
        "model": str((cfg.get("model") or {}).get("spec") or "unknown model"),
        "backend": cfg.get("backend"),
        "dtype": cfg.get("dtype"),
        "add_bos": cfg.get("add_bos"),
        "data_sha256": rep["data"]["sha256"],
        "data_kind": checked.data_kind(rep["data"]["sha256"]),
        "official": bool(rep.get("official")),
        "elo": float(o["elo"]),
        "elo_lo": _ci(o, 0),
        "elo_hi": _ci(o, 1),
        "elo_se": o.get("elo_se"),
        "raw_accuracy": float(o["raw_accuracy"]),
        "weighted_accuracy": float(o["weighted_accuracy"]),
        "n_items": len(rep["items"]),
        "n_correct": int(o["n_correct"]),
        "runner_version": cfg.get("runner_version"),
        "scoring_version": cfg.get("scoring_version"),
        "versions": _versions(cfg.get("versions")),
        "scored_at": rep.get("scored_at"),
        "stored_at": now(),
        "source": source,
        "group_name": rep.get("group"),
        "step": rep.get("training_step"),
        "tokens": rep.get("tokens_seen"),
        "report_sha256": hashlib.sha256(raw).hexdigest(),
    }
    cats = [
        (c, float(b["elo"]), _ci(b, 0), _ci(b, 1), float(b["raw_accuracy"]), float(b["weighted_accuracy"]))
        + (int(b["n"]), int(b["n_correct"]))
        for c, b in (res.get("categories") or {}).items()
    ]
    item_rows, choice_rows = [], []
    at = {"n_tokens": 3, "n_chars": 5, "n_bytes": 6}.get(rules.NEEDS[rule])  # the length the rule divides by
    for it in rep["items"]:
        known = lengths.get(it["id"])
        iid = it["id"]
        rows = []
        for n, c in enumerate(it["choices"]):
            n_chars, n_bytes = (c.get("n_chars"), c.get("n_bytes")) if "n_chars" in c or not known else known[n]
            nt, lp = c.get("n_tokens"), float(c["logprob"])
            rows.append((iid, n, lp, nt, lp / nt if nt else None, n_chars, n_bytes))
        choice_rows += rows
        scores = [r[2] if at is None else r[2] / r[at] for r in rows]  # rules.score (checked: lengths from 1)
        item_rows.append(
            (iid, it["category"], it["difficulty"], bool(it["correct"]), int(it["prediction"]), int(it["label"]))
            + (margin(scores, it["label"]), bool(it.get("truncated", False)))
        )
    return {
        "runs": [run],
        "tags": [(t,) for t in dict.fromkeys(rep.get("tags") or [])],
        "categories": cats,
        "items": item_rows,
        "choices": choice_rows,
        "reports": [(zlib.compress(raw, 1),)],
    }


def margin(scores: list[float], label: int) -> float:
    """The label's score minus the best other choice's (scores under the run's rule): above 0 the item
    is won with room to spare, below 0 lost by that much (0.0 for an item of one choice)."""
    others = [x for i, x in enumerate(scores) if i != label]
    return float(scores[label] - max(others)) if others else 0.0


def report_bytes(rep: dict) -> bytes:
    """A report dict as report.json holds it (what `evaluate` writes), for a report with no file."""
    from ..results.report import dumps

    return dumps({k: v for k, v in rep.items() if not k.startswith("_")}).encode()


def put(db: Store, rep: dict, source: str, raw: bytes | None = None, labels=None) -> str:
    """Write one checked, finished report (its `raw` report.json bytes, else as `evaluate` writes it)
    and return its key. The same key written again replaces the run in one transaction. `labels`
    (results.labels.Labels) replace the report's own in the row; the stored report is left as it is."""
    return put_many(db, [(rep, source, raw, labels)])[0]


def put_many(db: Store, entries: list[tuple]) -> list[str]:
    """`put` for several (report, source, raw or None, labels or None) in one transaction; their keys,
    in order. The runs are written in key order, so that two processes writing overlapping runs take
    their rows' locks in one order and never wait for each other in a circle."""
    keyed, keys = {}, []
    for rep, source, raw, labels in entries:
        raw = report_bytes(rep) if raw is None else raw
        keys.append(run_key(rep))
        keyed[keys[-1]] = _labelled(rows_of(rep, keys[-1], source, raw), labels)
    with schema.writing(db) as conn:
        for key in sorted(keyed):
            rows = keyed[key]
            run_id = conn.execute(_upsert(db.dialect), rows["runs"][0]).scalar_one()
            for table in schema.CHILDREN:
                conn.execute(_deletes()[table.name], {"run": run_id})
            for table in schema.CHILDREN:
                if rows[table.name]:
                    insert_many(conn, table, [(run_id, *r) for r in rows[table.name]])
    return keys


def _labelled(rows: dict, labels) -> dict:
    """The rows with `labels` (results.labels.Labels or None) in place of the report's own."""
    if labels:
        run = rows["runs"][0]
        for col, value in (("group_name", labels.group), ("step", labels.step), ("tokens", labels.tokens)):
            if value is not None:
                run[col] = value
        if labels.tags:
            rows["tags"] = [(t,) for t in labels.tags]
    return rows


def insert_many(conn, table, rows: list[tuple]) -> None:
    """Insert `rows` (tuples of all of `table`'s columns, in order) without SQLAlchemy's work per row
    (thousands of choices per run): on PostgreSQL by COPY, in one stream (psycopg's executemany sends
    a message a row, 70 ms a run); on SQLite by the driver's executemany of the statement compiled
    once for the dialect."""
    names = [c.name for c in table.columns]
    if conn.dialect.name == "postgresql":
        raw = conn.connection.dbapi_connection  # psycopg's, inside this transaction
        with raw.cursor() as cur, cur.copy(f"COPY {table.name} ({', '.join(names)}) FROM STDIN") as copy:
            for r in rows:
                copy.write_row(r)
        return
    sql, at = _sqlite_insert(table.name)
    params = rows if at is None else [tuple(r[i] for i in at) for r in rows]
    conn.exec_driver_sql(sql, params)


@functools.cache
def _sqlite_insert(name: str) -> tuple[str, list[int] | None]:
    """The SQLite INSERT of every column of table `name`, compiled once, and the order its parameters
    take the columns in (None: the table's own order)."""
    from sqlalchemy.dialects import sqlite

    table = schema.metadata.tables[name]
    names = [c.name for c in table.columns]
    compiled = table.insert().compile(dialect=sqlite.dialect(), column_keys=names)
    at = [names.index(k) for k in compiled.positiontup]
    return compiled.string, None if at == list(range(len(names))) else at


@functools.cache
def _deletes() -> dict:
    """DELETE FROM <child table> WHERE run = :run, built once for each of the run's other tables."""
    return {t.name: delete(t).where(t.c.run == bindparam("run")) for t in schema.CHILDREN}


@functools.cache
def _upsert(dialect: str):
    """INSERT the run's row, or on a key stored already UPDATE it in place, RETURNING its id: built
    once per dialect and executed with the row as parameters. The row is locked until the
    transaction ends, so that two processes writing one run take turns (SQLite: BEGIN IMMEDIATE does
    the same)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    stmt = insert(schema.runs)
    names = [c.name for c in schema.runs.columns if c.name not in ("id", "key")]
    stmt = stmt.on_conflict_do_update(index_elements=[schema.runs.c.key], set_={k: stmt.excluded[k] for k in names})
    return stmt.returning(schema.runs.c.id)
