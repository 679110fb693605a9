"""Which data file a set of finished runs scored, found from the SHA-256 their reports recorded.

    source = find_data(reports)                  # the bundled set, when the runs scored it
    source = find_data(reports, "my/test.jsonl") # any other file, given (also "hub", the gated file)
    source.dataset.items                         # the texts the reports do not hold

`explore` and `rescore` need the texts of the items (contexts, continuations) that a report names
only by id. A path written in a report is never opened (a report may come from someone else): the
bundled set is recognised by its SHA-256, and any other file must be given; a file whose SHA-256 is
not the runs' is refused in one line (DataError), as are runs of different data files (ReportError).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import DataError, ReportError
from . import card
from .dataset import BUNDLED_SHA256
from .datasource import BUNDLED, DataSource, open_data


def one_sha(reports: Sequence[dict], what: str = "explore sets runs of one data file side by side") -> str:
    """The one data SHA-256 of `reports`; ReportError naming each SHA-256 when they differ."""
    shas: dict[str, int] = {}
    for r in reports:
        shas[r["data"]["sha256"]] = shas.get(r["data"]["sha256"], 0) + 1
    if len(shas) > 1:
        listed = ", ".join(f"{s[:12]}… ({n} run(s))" for s, n in shas.items())
        raise ReportError(f"the runs scored different data files ({listed}); {what}")
    return next(iter(shas))


def find_data(reports: Sequence[dict], data=None, fetch=None, what: str | None = None) -> DataSource:
    """The data file the runs scored: `data` (bundled, hub or a path) when given, else the bundled
    set when its SHA-256 is the runs'. DataError (one line) when none is found or it does not match.
    `what` ends the line that refuses runs of different data files (why one file is needed)."""
    sha = one_sha(reports, *([what] if what else []))
    if data is None:
        if sha != BUNDLED_SHA256:
            kind = "the official" if sha == card.OFFICIAL_SHA256 else "a"
            hint = "--data hub (the gated file) or --data PATH" if sha == card.OFFICIAL_SHA256 else "--data PATH"
            raise DataError(
                f"the runs scored {kind} data file with SHA-256 {sha[:12]}…, not the bundled set; give that file with {hint}"
            )
        data = BUNDLED
    source = open_data(data, fetch=fetch)
    if source.dataset.sha256 != sha:
        raise DataError(
            f"{source.record['path']}: SHA-256 {source.dataset.sha256[:12]}… is not the data file the runs "
            f"scored ({sha[:12]}…); give the file they scored"
        )
    return source
