"""A platform without what a run folder needs (Windows: no os.O_NOFOLLOW, os.fchmod, os.pread,
os.pwrite, fcntl or resource): `from base_bench import evaluate` works, `evaluate()` without an
out-dir scores a model, compare, leaderboard and explore write their files, and a run that would
write a run folder is refused in one line with exit code 2, before anything is written.

Each case runs in a fresh Python process that removes those names before base_bench is imported
(PREAMBLE). psutil is imported first: its Linux code needs `resource`, where on Windows it has its
own. The run folders the views read are made by ordinary runs in this process first.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from base_bench import evaluate
from base_bench.engine import runstore
from base_bench.errors import RunError

from tiny import save_tiny, tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
REMOVED = ("os.O_NOFOLLOW", "os.fchmod", "os.pread", "os.pwrite", "fcntl", "resource")
PREAMBLE = f"""
import os, sys
sys.path.insert(0, {str(TESTS)!r})
import psutil  # its Linux code imports resource; Windows has psutil's own
for name in ("O_NOFOLLOW", "fchmod", "pread", "pwrite"):
    delattr(os, name)
sys.modules["fcntl"] = None  # import fcntl: ImportError
sys.modules["resource"] = None
"""
CLI = PREAMBLE + "from base_bench.commands.cli import main\nsys.exit(main(sys.argv[1:]))\n"
REFUSAL = (
    "base-bench: error: this platform lacks os.O_NOFOLLOW, fcntl.flock, os.pread and os.pwrite, which keep a "
    "run folder safe; run under Linux, macOS, or Windows through WSL 2"
)
SUBPROCESS = pytest.mark.slow(reason="a fresh Python process per case, each importing torch (5 to 15 s)")


def python(code: str, *args, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def cli(*args) -> subprocess.CompletedProcess:
    return python(CLI, *args)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished run folders of tiny random models (two seeds), made on this platform."""
    root = tmp_path_factory.mktemp("runs")
    tok = tiny_tokenizer()
    for seed in (0, 1):
        evaluate(
            tiny_model("llama", tok, seed=seed), tok, limit_per_category=2, progress=False, out_dir=root / f"s{seed}"
        )
    return root / "s0", root / "s1"


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_here_nothing_is_missing():
    """The platform the suite runs on keeps run folders (so the cases below test a removal)."""
    assert runstore.platform_problem() is None and runstore.NOFOLLOW & os.O_NOFOLLOW


@SUBPROCESS
def test_import_and_evaluate_without_out_dir(tmp_path):
    code = PREAMBLE + (
        "import json, os\n"
        "from base_bench import evaluate, RunError\n"
        "from tiny import tiny_model, tiny_tokenizer\n"
        "assert not hasattr(os, 'O_NOFOLLOW') and not hasattr(os, 'fchmod')\n"
        "tok = tiny_tokenizer()\n"
        "rep = evaluate(tiny_model('llama', tok), tok, limit=4, progress=False)\n"
        "print(json.dumps({'n': len(rep['items']), 'elo': rep['results']['overall']['elo']}))\n"
        "try:\n"
        "    evaluate(tiny_model('llama', tok), tok, limit=4, progress=False, out_dir=sys.argv[1])\n"
        "except RunError as e:\n"
        "    print('refused:', e)\n"
    )
    res = python(code, tmp_path / "run")
    assert res.returncode == 0, res.stderr[-3000:]
    first, second = res.stdout.strip().splitlines()[-2:]
    scored = json.loads(first)
    tok = tiny_tokenizer()
    here = evaluate(tiny_model("llama", tok), tok, limit=4, progress=False)
    assert scored == {"n": 4, "elo": here["results"]["overall"]["elo"]}  # the same scores as here
    assert second == "refused: " + REFUSAL.removeprefix("base-bench: error: ") + (
        " (evaluate() without out_dir, compare, leaderboard and explore work without them)"
    )
    assert not (tmp_path / "run").exists()


@SUBPROCESS
def test_views_write_their_files(runs, tmp_path):
    before = [snapshot(r) for r in runs]
    res = cli("compare", *runs, "--out-dir", tmp_path / "cmp", "--resamples", "50")
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "cmp").iterdir()) == ["compare.json", "compare.md"]
    assert json.loads((tmp_path / "cmp" / "compare.json").read_text())["bootstrap"]["resamples"] == 50
    res = cli("leaderboard", *runs, "--out-dir", tmp_path / "board")
    assert res.returncode == 0, res.stderr[-3000:]
    assert {"leaderboard.md", "leaderboard.html"} <= {p.name for p in (tmp_path / "board").iterdir()}
    res = cli("explore", *runs, "--out-dir", tmp_path / "explore")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "explore" / "explore.html").stat().st_size > 1000
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not [p for p in written if p.name.endswith(".tmp")]  # each written whole, then renamed
    assert [snapshot(r) for r in runs] == before  # the runs read are left as they were


@SUBPROCESS
def test_a_run_folder_is_refused_in_one_line(runs, tmp_path):
    model = save_tiny(tmp_path / "tiny-llama")
    out = tmp_path / "run"
    for extra in ([], ["--resume"]):
        res = cli("--model", model, "--data", "bundled", "--device", "cpu", "--limit", "2", "--out-dir", out, *extra)
        assert res.returncode == 2, res.stderr[-3000:]
        assert res.stderr.splitlines() == [
            REFUSAL + " (evaluate() without out_dir, compare, leaderboard and explore work without them)"
        ]
        assert "Traceback" not in res.stderr and not out.exists()
    # an existing run folder is not touched either (its lock, its partial file)
    before = snapshot(runs[0])
    res = cli("--model", model, "--data", "bundled", "--device", "cpu", "--out-dir", runs[0], "--resume")
    assert res.returncode == 2 and res.stderr.startswith(REFUSAL) and res.stderr.count("\n") == 1
    assert snapshot(runs[0]) == before


def test_the_refusal_names_only_what_is_missing(monkeypatch, tmp_path):
    """In this process: no flock alone is named alone, and the store refuses before it writes."""
    monkeypatch.setattr(runstore, "fcntl", None)
    problem = runstore.platform_problem()
    assert problem.startswith("this platform lacks fcntl.flock, which keeps a run folder safe;")
    store = runstore.RunStore(tmp_path / "out")
    with pytest.raises(RunError, match="lacks fcntl.flock"):
        store.check({}, resume=False)
    with pytest.raises(RunError, match="lacks fcntl.flock"):
        with store.lock():
            pass
    assert not (tmp_path / "out").exists()


def test_reading_without_o_nofollow_still_refuses_a_link(monkeypatch, tmp_path):
    """untrusted.read_regular(follow=False) where os has no O_NOFOLLOW: a regular file is read, a
    symbolic link to one is refused (lstat first, then the opened file must be the one looked at)."""
    from base_bench import untrusted

    real = tmp_path / "real.json"
    real.write_text('{"a": 1}')
    link = tmp_path / "link.json"
    link.symlink_to(real)
    monkeypatch.delattr(os, "O_NOFOLLOW")
    assert untrusted.read_regular(real, follow=False) == b'{"a": 1}'
    with pytest.raises(ValueError, match="a symbolic link, not a regular file; not followed"):
        untrusted.read_regular(link, follow=False)
    assert untrusted.read_regular(link) == b'{"a": 1}'  # a path the user gives may be a link
