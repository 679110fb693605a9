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

from .connect import ENV, Store, open_store, shown_url, store_url
from .ingest import put, run_key
from .query import report, report_bytes, reports_of, resolve, summaries
from .schema import SCHEMA_VERSION, upgrade

__all__ = [
    "ENV",
    "SCHEMA_VERSION",
    "Store",
    "open_store",
    "put",
    "report",
    "report_bytes",
    "reports_of",
    "resolve",
    "run_key",
    "shown_url",
    "store_url",
    "summaries",
    "upgrade",
]
