"""The results store: one database that every run can write to and every view can read.

    from base_bench.store import open_store, put, summaries, report
    db = open_store("sqlite:///runs/bench.db")            # or "runs/bench.db", or postgresql://USER:PASSWORD@HOST/DB
    key = put(db, load_report("runs/smollm2"), source="runs/smollm2")   # a checked report: one row, idempotent
    for run in summaries(db, group="pretrain-7"):          # report-shaped summaries, best Elo first
        print(run["_key"][:12], run["results"]["overall"]["elo"])

report.json stays the source of truth: the store is an index over reports (every row is computed
from a checked report, and the report itself is kept), so `store rebuild` can make it again from the
run folders. The modules: connect.py (URLs, connections, one-line errors), schema.py (tables, schema
version, migrations), ingest.py (a checked report to rows), query.py (what the views read).
`engine/runstore.py`'s RunStore is something else: one run's out-dir.
"""

from importlib import import_module

# Where each name lives. They are imported on first use, so that a run without a store (and
# `import base_bench`) never imports SQLAlchemy: connect.py needs it only to open a store.
_WHERE = {
    "ENV": "connect",
    "Store": "connect",
    "open_store": "connect",
    "shown_url": "connect",
    "store_url": "connect",
    "put": "ingest",
    "run_key": "ingest",
    "report": "query",
    "report_bytes": "query",
    "reports_of": "query",
    "resolve": "query",
    "summaries": "query",
    "SCHEMA_VERSION": "schema",
    "upgrade": "schema",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_WHERE[name]}", __name__), name)
