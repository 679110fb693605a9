"""Which data a run scores, and whether that lets it be official.

    source = open_data("bundled")            # the bundled set shipped inside the package (also None)
    source = open_data("path/to/test.jsonl") # a file, or a directory holding data/test.jsonl
    source = open_data("hub")                # the gated official file, fetched from the Hub
    source = open_data("hub", say=print)     # ... saying first, in one line, which data it scores
    source.dataset.items, source.record, source.reasons

The two words are the data selector's values everywhere (`--data bundled|hub|PATH`, `evaluate(data=...)`,
the Trainer callback); any other string, and any `Path`, is a file or a directory (so a folder that is
named `hub` is `./hub`, or `Path("hub")`).

Everything is checked here, before any model is loaded: the schema (a bad file raises DataError),
the card's composition and the checksum. The Hub file must match the card exactly, or it is refused;
local data may deviate, and each deviation becomes a reason the run is not official. The bundled set
is never official: its Elo is not comparable with results on the official data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import card
from .dataset import BUNDLED_NAME, DataError, Dataset, bundled_path, load_dataset_file

BUNDLED = "bundled"
HUB = "hub"
HUB_LINE = f"data: the official {card.HUB_DATASET} file: {card.HUB_DATA_FILE} from the Hugging Face Hub (gated)"


# report.json's data.description for each kind of data (the pages show it for the kind the checksum gives)
DESCRIPTIONS = {
    "official": f"official {card.HUB_DATASET}",
    "bundled": BUNDLED_NAME,
    "modified": "modified or unknown data (matches neither the official nor the bundled checksum)",
}


@dataclass(frozen=True)
class DataSource:
    dataset: Dataset
    record: dict  # report.json's "data" block
    reasons: tuple[str, ...]  # why a run on this data is not official (empty for the official file)
    token: str | None = field(default=None, repr=False)  # the Hub token that fetched it; never shown


def local_data_file(where: str | Path) -> Path:
    """A JSONL file, or a directory holding data/test.jsonl (as --local-data takes)."""
    base = Path(where).expanduser()
    if base.is_dir():
        path = base / "data" / "test.jsonl"
        if not path.is_file():
            raise DataError(f"{where}: a directory without data/test.jsonl (expected the data file at {path})")
        return path
    if not base.exists():
        raise DataError(f"{where}: no such directory or data file")
    return base


def open_data(spec: str | Path | None = None, *, fetch=None, say=None) -> DataSource:
    """Load and check the data named by `spec`: None or "bundled" (the bundled set), "hub", or a
    local file or directory.

    `say`, if given, is called once with the line that names the data (`data_line`): before the
    download for the Hub (which may prompt for a token or show a progress bar), else once the file
    is read and checked, so that the line can say what it turned out to be. `fetch` replaces the Hub
    download (tests); by default it is hub.fetch_official_data.
    """
    token = None
    if spec is None or (isinstance(spec, str) and spec == BUNDLED):
        path, source = bundled_path(), "bundled"
    elif isinstance(spec, str) and spec == HUB:
        if fetch is None:
            from .hub import fetch_official_data as fetch
        if say:
            say(HUB_LINE)
        hub_path, token = fetch()
        path, source = Path(hub_path), "hub"
    elif isinstance(spec, (str, Path)):
        path, source = local_data_file(spec), "local"
    else:
        raise DataError(f"data must be 'bundled' (or None), 'hub', or a path; got {type(spec).__name__}")
    ds = load_dataset_file(path)
    problems = ds.composition_problems()
    kind = ds.source_kind()
    if source == "hub" and (problems or kind != "official"):
        raise DataError(
            f"the data downloaded from {card.HUB_DATASET} does not match the card "
            f"({'; '.join(problems) or 'SHA-256 ' + ds.sha256}); refusing to score it as official"
        )
    reasons = []
    if kind == "bundled":
        reasons.append(f"data is the {BUNDLED_NAME}")
    elif kind == "modified":
        reasons.append(f"data SHA-256 {ds.sha256[:12]}… is not the card's official {card.OFFICIAL_SHA256[:12]}…")
    reasons += problems
    description = DESCRIPTIONS[kind]
    record = {
        "source": source,
        "path": str(path),
        "sha256": ds.sha256,
        "kind": kind,
        "description": description,
        "official_sha256": card.OFFICIAL_SHA256,
        "n_items_in_file": len(ds.items),
        "composition_problems": problems,
    }
    if say and source != "hub":
        say(data_line(record))
    return DataSource(ds, record, tuple(reasons), token)


def data_line(record: dict) -> str:
    """The one line that says which data a run scores, from report.json's data block."""
    what = {
        "official": f"the official {card.HUB_DATASET} file",
        "bundled": "the bundled set (base-bench's own items; its Elo is not comparable with official results)",
        "modified": "modified or unknown data (neither the official nor the bundled checksum; not official)",
    }[record["kind"]]
    return f"data: {what}: {record['path']}, SHA-256 {record['sha256'][:12]}…"
