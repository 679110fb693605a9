"""base-bench: a runner for BananaMind Base Bench 1.1, a text-completion benchmark for base LMs.

From the command line: `python benchmark.py --help` or `base-bench --help`. From Python, on a model
that is already loaded (in a notebook, or inside a training job):

    from base_bench import evaluate, BaseBenchError
    report = evaluate(model, tokenizer)        # the dict report.json holds
    report["results"]["overall"]["elo"]

Finished runs, side by side item by item in one self-contained page (`base-bench explore`):

    from base_bench import explore
    explore(["runs/a", "runs/b"], "explore-out")   # writes explore-out/explore.html

The same runs under lm-eval's rules, from their stored log-probs (`base-bench rescore`):

    from base_bench import rescore
    table = rescore(["runs/a", "runs/b"], ["mean", "sum"], "rescore-out")   # rescore.json's dict

`base_bench.integrations.BaseBenchCallback` scores the live model from a transformers Trainer.
The layout, top to bottom (each subpackage imports only those below it; tests/test_layout.py):
`commands/` (the command lines), `contamination/` and `integrations/`, `evaluation.py` (the one
orchestration), `backends/` (transformers, llama.cpp), `engine/` (scoring, batching, ranks, the run
directory), `results/` (Elo, intervals, reports), `items/` (the card, the data), `errors.py`.
"""

from .errors import (
    BaseBenchError,
    DataError,
    DistributedError,
    HubError,
    ModelError,
    ReportError,
    RunError,
    ScoringError,
    StorageError,
    StoreError,
    UsageError,
)
from .version import __version__

__all__ = [
    "evaluate",
    "explore",
    "rescore",
    "BaseBenchError",
    "DataError",
    "DistributedError",
    "HubError",
    "ModelError",
    "ReportError",
    "RunError",
    "ScoringError",
    "StorageError",
    "StoreError",
    "UsageError",
    "__version__",
]


def __getattr__(name):
    # `evaluate` imports the engine, the backends and numpy (torch only once a transformers model
    # is scored); load it on first use so that `base-bench --help` stays quick.
    if name == "evaluate":
        from .evaluation import evaluate

        return evaluate
    if name == "explore":
        from .commands.explore import explore

        return explore
    if name == "rescore":
        from .results.rescoring import rescore

        return rescore
    raise AttributeError(f"module 'base_bench' has no attribute {name!r}")
