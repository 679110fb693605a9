#!/usr/bin/env python3
"""Run BananaMind Base Bench 1.1 on a model: `python benchmark.py --model MODEL [flags]`.

See `python benchmark.py --help` and README.md. The code lives in the base_bench package.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from base_bench.commands.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
