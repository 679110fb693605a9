"""A plain wheel install finds the bundled set: build the wheel, install it into a fresh venv, and
run `evaluate(model, tokenizer)` there with data=None, and the `base-bench` command it installs with
`--data bundled`, away from this checkout."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import venv
from pathlib import Path

import pytest

from tiny import save_tiny

pytestmark = pytest.mark.slow(reason="a subprocess: builds the wheel, installs it into a fresh venv and runs there")

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    import base_bench
    from base_bench import evaluate
    from base_bench.items.dataset import BUNDLED_SHA256
    sys.path.insert(0, {tests!r})
    from tiny import tiny_model, tiny_tokenizer
    assert "site-packages" in base_bench.__file__ and {root!r} not in base_bench.__file__, base_bench.__file__
    tok = tiny_tokenizer()
    rep = evaluate(tiny_model("llama", tok), tok, limit=3, progress=False)
    assert rep["data"]["source"] == "bundled" and rep["data"]["sha256"] == BUNDLED_SHA256, rep["data"]
    assert Path(rep["data"]["path"]).is_file() and Path(rep["data"]["path"]).is_relative_to(
        Path(base_bench.__file__).parent), rep["data"]["path"]
    print("OK", rep["data"]["path"])
""")


def copy_source(dest):
    """The checkout's files as git sees them (tracked, or new and not ignored), none of what is built
    or installed beside them: .venv and .venv-vllm (3.5 GB), build/, runs. Outside git, the tree less
    those folders."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True
    )
    if listed.returncode:
        shutil.copytree(
            ROOT,
            dest,
            symlinks=True,
            ignore=shutil.ignore_patterns(".*", "build", "dist", "runs", "*.egg-info", "__pycache__"),
        )
        return
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (ROOT / name).is_file():  # a file deleted but not yet committed is still listed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name, follow_symlinks=False)


def test_wheel_install_carries_the_bundled_set(tmp_path):
    dist, src = tmp_path / "dist", tmp_path / "src"
    # a clean copy of the source: a build/ folder left in the checkout would hide a missing data file
    copy_source(src)
    # --no-build-isolation: build with this environment's setuptools, so no download is needed
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
        check=True,
        cwd=tmp_path,
        capture_output=True,
    )
    wheel = next(dist.glob("base_bench-*.whl"))
    # the installed wheel alone: no PYTHONPATH pointing at a checkout (as tests are run from one)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True
    )
    # Its dependencies (torch, transformers...) come from this environment, appended after the
    # fresh venv's own site-packages, so base_bench itself can only come from the wheel.
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    out = subprocess.run(
        [py, "-c", SCRIPT.format(tests=str(ROOT / "tests"), root=str(ROOT))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "\nOK " in out.stdout and "site-packages/base_bench/data/test.jsonl" in out.stdout
    # the command line of the wheel reaches the bundled set too, with no checkout and no network
    model = save_tiny(tmp_path / "tiny")
    run = tmp_path / "run"
    cli = [env_dir / "bin" / "base-bench", "--model", model, "--data", "bundled", "--limit", "3", "--device", "cpu"]
    out = subprocess.run(
        [*map(str, cli), "--out-dir", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert out.stdout.splitlines()[0].startswith("data: the bundled set (")
    rep = json.loads((run / "report.json").read_text())
    assert rep["data"]["source"] == "bundled" and "site-packages/base_bench/data/test.jsonl" in rep["data"]["path"]
    assert rep["data"]["path"].startswith(str(env_dir)) and len(rep["items"]) == 3
