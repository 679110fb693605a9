"""`python -m base_bench ...` is `base-bench ...` (and `python benchmark.py ...`)."""

import sys

from .commands.cli import main

sys.exit(main())
