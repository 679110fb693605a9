"""Keep the benchmark out of training data: a corpus scan, a canary probe, and clean-subset scores.

    from base_bench import contamination
    rep = contamination.scan(["corpus/"], "scan-out", data=".", workers=2, write_clean="clean/")
    res = contamination.probe(model, tokenizer)                     # has the model seen the canary?
    res = contamination.report("runs/my-run", "scan-out")           # Elo on the clean and dirty items

On the command line: `base-bench contamination scan|probe|report` (commands/contamination.py). The modules:
normalize (GPT-3's normalisation and N), index (the items' n-grams and the matcher), corpus (which
files), steps (the datatrove readers and filter), scanner (the stages and executors), results and
render (contamination.json and its views), clean (--write-clean), canary and probing, rescore
(report). Importing this package imports neither datatrove nor torch.
"""

from __future__ import annotations


def scan(paths, out_dir, **kwargs):
    """See scanner.scan: find the items of `data` in the corpus `paths`; returns the contamination.json dict."""
    from .scanner import scan as _scan

    return _scan(paths, out_dir, **kwargs)


def probe(model, tokenizer, canary: str | None = None, candidates: int = 999, seed: int = 1234) -> dict:
    """Rank the true second half of the canary's GUID among random ones for a loaded transformers model."""
    from ..items.dataset import BUNDLED_CANARY
    from .canary import parse
    from .probing import probe_canary, transformers_backend

    c = parse(canary or BUNDLED_CANARY)
    if c is None:
        raise ValueError(f"{canary!r} holds no GUID")
    return probe_canary(transformers_backend(model, tokenizer), c, candidates=candidates, seed=seed)


def report(run, scan_dir, resamples: int = 2000, seed: int = 1234) -> dict:
    """Overall Elo of a finished run on the scan's clean and dirty items, and their differences from the full set."""
    from ..results.reports_io import load_report
    from .rescore import load_scan, rescore

    return rescore(load_report(run), load_scan(scan_dir), resamples=resamples, seed=seed)
