"""Which data a run scores, and whether that lets it be official.

    source = open_data(None)                 # the bundled set shipped inside the package
    source = open_data("path/to/test.jsonl") # a file, or a directory holding data/test.jsonl
    source = open_data("hub")                # the gated official file, fetched from the Hub
    source.dataset.items, source.record, source.reasons

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

HUB = "hub"


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


def open_data(spec: str | Path | None = None, *, fetch=None) -> DataSource:
    """Load and check the data named by `spec`: None (bundled), "hub", or a local file or directory.

    `fetch` replaces the Hub download (tests); by default it is hub.fetch_official_data.
    """
    token = None
    if spec is None:
        path, source = bundled_path(), "bundled"
    elif isinstance(spec, str) and spec == HUB:
        if fetch is None:
            from .hub import fetch_official_data as fetch
        hub_path, token = fetch()
        path, source = Path(hub_path), "hub"
    elif isinstance(spec, (str, Path)):
        path, source = local_data_file(spec), "local"
    else:
        raise DataError(f"data must be None (the bundled set), 'hub', or a path; got {type(spec).__name__}")
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
    description = {
        "official": f"official {card.HUB_DATASET}",
        "bundled": BUNDLED_NAME,
        "modified": "modified or unknown data (matches neither the official nor the bundled checksum)",
    }[kind]
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
    return DataSource(ds, record, tuple(reasons), token)
