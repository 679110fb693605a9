"""One version everywhere: base_bench/version.py, the newest heading of CHANGELOG.md, the
`runner_version` a report records, `base-bench --version` and the wheel's metadata (pyproject reads
version.py). A release bumps version.py and closes the changelog's entry under the same number, in
one commit; these tests fail when either is forgotten."""

import re
import subprocess
import sys

import pytest

from base_bench import __version__, evaluate

from docpages import ROOT
from fixtures import write_dataset
from tiny import tiny_model, tiny_tokenizer

HEADING = re.compile(r"^## (.+?)\s*$", re.M)
RELEASE = re.compile(r"^(\d+\.\d+\.\d+) \((\d{4}-\d{2}-\d{2})\)$")  # `## 0.2.0 (2026-12-04)`


def changelog() -> str:
    return (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def release_problems(text: str, version: str) -> list[str]:
    """What keeps `text` (a changelog) from being the one of release `version`: its newest entry
    must be `## <version> (YYYY-MM-DD)`, and every entry a dated release, newest first."""
    headings = HEADING.findall(text)
    if not headings:
        return ["no `## ` entry"]
    problems = []
    newest = RELEASE.match(headings[0])
    if not newest or newest.group(1) != version:
        problems.append(f"the newest entry is {headings[0]!r}, not `{version} (YYYY-MM-DD)`")
    released = [RELEASE.match(h) for h in headings]
    problems += [f"{h!r} is not a dated release" for h, m in zip(headings, released) if not m]
    numbers = [tuple(int(x) for x in m.group(1).split(".")) for m in released if m]
    if numbers != sorted(set(numbers), reverse=True):
        problems.append(f"the releases are not newest first, each once: {numbers}")
    return problems


def test_the_changelog_is_the_one_of_this_version():
    assert release_problems(changelog(), __version__) == []


@pytest.mark.parametrize(
    "text",
    [
        "## Unreleased\n\n## 0.2.0 (2026-12-04)\n",  # an open entry above the release
        "## 0.2.0\n\n## 0.1.0 (2026-12-03)\n",  # not dated
        "## 0.1.0 (2026-12-03)\n",  # version.py bumped, the changelog not
        "## 0.2.0 (2026-12-04)\n\n## 0.3.0 (2026-12-05)\n",  # out of order
    ],
)
def test_a_changelog_that_is_not_released_is_caught(text):
    assert release_problems(text, "0.2.0")


def test_the_wheel_takes_its_version_from_version_py():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^dynamic = \["version"\]', text, re.M)
    assert 'version = { attr = "base_bench.version.__version__" }' in text


def test_a_report_and_the_command_line_name_this_version(tmp_path):
    tok = tiny_tokenizer()
    rep = evaluate(tiny_model("llama", tok), tok, data=write_dataset(tmp_path), limit=2, progress=False)
    newest = RELEASE.match(HEADING.findall(changelog())[0])
    assert newest and rep["config"]["runner_version"] == __version__ == newest.group(1)
    out = subprocess.run([sys.executable, "-m", "base_bench", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == f"base-bench {__version__}"
