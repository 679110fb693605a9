"""base-bench: a runner for BananaMind Base Bench 1.1, a text-completion benchmark for base LMs.

Use it from the command line (`python benchmark.py --help` or `base-bench --help`), or import the
pieces: `base_bench.dataset` loads and validates items, `base_bench.scoring` scores them with a
model, `base_bench.elo` turns outcomes into the card's ratings, `base_bench.report` writes files.
"""

__version__ = "0.1.0"
