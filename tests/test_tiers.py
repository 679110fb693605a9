"""The suite's own rules (tests/tiers.py), on a small suite made in a temporary folder and run by a
pytest of its own: a `slow` marker must give its reason, `integration` is `slow`, and under `-n 2`
a module's tests share a worker, the tests that use the vLLM server share one whatever their module,
and the heaviest group starts first."""

import json
import os
import textwrap
from pathlib import Path

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from tiers import pytest_collection_modifyitems, pytest_xdist_make_scheduler  # noqa: F401
import pytest

@pytest.fixture(scope="session")
def vllm_server():
    return "a server"
"""

# each test writes (its worker, its name) to a line of the log, in the order it ran
RECORD = """
import json, os, pytest
def record(name):
    with open(os.environ["TIERS_LOG"], "a") as f:
        f.write(json.dumps([os.environ.get("PYTEST_XDIST_WORKER"), name]) + "\\n")
"""


def suite(pytester, monkeypatch, **modules):
    # this suite may itself run on an xdist worker, whose variables the inner run would inherit
    for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("TIERS_LOG", str(pytester.path / "log"))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**{name: RECORD + textwrap.dedent(body) for name, body in modules.items()})
    return pytester.path / "log"  # where the tests' record() writes


def ran(pytester, log, *args):
    result = pytester.runpytest_subprocess(*args)
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return result, lines


def test_a_slow_marker_without_a_reason_stops_the_collection(pytester, monkeypatch):
    suite(
        pytester,
        monkeypatch,
        test_bare="""
        @pytest.mark.slow
        def test_bare(): record("bare")
    """,
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*marked slow without a reason*test_bare.py::test_bare*"])


def test_integration_is_slow_and_the_fast_tier_leaves_it_out(pytester, monkeypatch):
    log = suite(
        pytester,
        monkeypatch,
        test_mix="""
        @pytest.mark.integration
        def test_model(): record("model")
        @pytest.mark.slow(reason="a subprocess per case")
        def test_sub(): record("sub")
        def test_logic(): record("logic")
    """,
    )
    result, lines = ran(pytester, log, "-m", "not slow")
    assert result.ret == 0 and [name for _, name in lines] == ["logic"]


def test_under_two_workers_modules_and_the_vllm_server_keep_together(pytester, monkeypatch):
    many = "".join(f"def test_{i}(): record('{{m}}{i}')\n" for i in range(6))
    log = suite(
        pytester,
        monkeypatch,
        test_a=many.replace("{m}", "a"),
        test_b=many.replace("{m}", "b"),
        test_c=many.replace("{m}", "c"),
        # the server's tests sit in two modules, each beside a test that does not use it
        test_s1="""
            def test_served(vllm_server): record("s1-served")
            def test_plain(): record("s1-plain")
        """,
        test_s2="""
            def test_served(vllm_server): record("s2-served")
        """,
        test_heavy="""
            @pytest.mark.slow(reason="a real model")
            def test_one(): record("heavy1")
            @pytest.mark.slow(reason="a real model")
            def test_two(): record("heavy2")
        """,
    )
    result, lines = ran(pytester, log, "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder")
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert len(lines) == 6 * 3 + 3 + 2 and {w for w, _ in lines} == {"gw0", "gw1"}, lines
    worker = {}
    for w, name in lines:
        worker.setdefault(name.rstrip("0123456789").removesuffix("-served").removesuffix("-plain"), set()).add(w)
    for module in ("a", "b", "c", "heavy"):
        assert len(worker[module]) == 1, (module, lines)
    served = {w for w, name in lines if name.endswith("-served")}
    assert len(served) == 1, lines
    # the server's group is the heaviest: the first test its worker ran; the slow module is the next
    # heaviest: the first test of the other worker
    first = {}
    for w, name in lines:
        first.setdefault(w, name)
    assert first[served.pop()].endswith("-served"), lines
    assert "heavy1" in first.values(), lines


def test_without_workers_the_order_is_the_files(pytester, monkeypatch):
    """The groups and their order are for xdist only: a plain run keeps pytest's order."""
    log = suite(
        pytester,
        monkeypatch,
        test_a="def test_a(): record('a')\n",
        test_z="""
            def test_served(vllm_server): record("z")
        """,
    )
    result, lines = ran(pytester, log, "--dist", "loadgroup", "--no-loadscope-reorder")
    assert result.ret == 0 and [name for _, name in lines] == ["a", "z"] and {w for w, _ in lines} == {None}
