import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True, scope="session")
def gguf_cache_root(tmp_path_factory):
    """Every test (and every CLI subprocess a test starts) uses one fresh GGUF cache for the whole
    session: nothing is written to the developer's ~/.cache, and the first SmolLM2 load fills the
    cache that later loads in the same run read."""
    old = os.environ.get("BASE_BENCH_CACHE")
    root = tmp_path_factory.mktemp("base-bench-cache")
    os.environ["BASE_BENCH_CACHE"] = str(root)
    yield root
    if old is None:
        os.environ.pop("BASE_BENCH_CACHE", None)
    else:
        os.environ["BASE_BENCH_CACHE"] = old
