"""The documentation holds together: every relative link and #anchor in the README, the changelog
and docs/ resolves, every code block is an example that runs or says why not, the README stays a
front page (at most 250 lines, a link to every docs page), its test command is what CI runs, and
the pages that document the flags and the cache list them all. Fast: nothing is run here
(tests/test_readme.py runs the examples)."""

import re
import shlex
from pathlib import Path
from urllib.parse import unquote

import pytest

from base_bench.commands.cli import build_parser

from docpages import (
    ROOT,
    RUN_LANGS,
    TEXT_LANGS,
    anchors,
    code_blocks,
    example_pages,
    images,
    links,
    not_run_comments,
    pages,
    section,
    slug,
)

README = ROOT / "README.md"
DOCS = ROOT / "docs"


def rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("Two commands", "two-commands"),
        ("Hub mirrors: `HF_ENDPOINT`", "hub-mirrors-hf_endpoint"),
        ("Uncertainty: how sure is the number?", "uncertainty-how-sure-is-the-number"),
        ("Bigger than one device: `--device-map`", "bigger-than-one-device---device-map"),
        ("In a `Trainer`: `BaseBenchCallback`", "in-a-trainer-basebenchcallback"),
        ("2 ranks × 1 thread", "2-ranks--1-thread"),
        ("See [the data](data.md)", "see-the-data"),
    ],
)
def test_slug_is_githubs(heading, anchor):
    assert slug(heading) == anchor


def test_repeated_headings_get_numbered_anchors(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# A\n\n## Notes\n\n```bash\n# not a heading\n```\n\n## Notes\n")
    assert anchors(page) == {"a", "notes", "notes-1"}


def broken_links(path: Path) -> list[str]:
    """Every relative link of a page whose file is missing, or whose #anchor no heading makes."""
    broken = []
    for line, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ... are not checked offline
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{line}: {target} (no such file)")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{line}: {target} (no heading makes #{anchor})")
    return broken


def test_broken_links_are_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## Hub mirrors: `HF_ENDPOINT`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## Here\n\n[ok](other.md#hub-mirrors-hf_endpoint), [ok](#here), "
        "[ok](https://example.com/x.md), `[code](nowhere.md)`\n"
        "[gone](missing.md) and ![gone](img/none.png)\n[bad anchor](other.md#hub-mirrors)\n"
        "[bad here](#there)\n```bash\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        "6: missing.md (no such file)",
        "6: img/none.png (no such file)",
        "7: other.md#hub-mirrors (no heading makes #hub-mirrors)",
        "8: #there (no heading makes #there)",
    ]


@pytest.mark.parametrize("page", [rel(p) for p in pages()])
def test_every_relative_link_and_anchor_resolves(page):
    broken = broken_links(ROOT / page)
    assert not broken, "\n".join(f"{page}:{b}" for b in broken)


@pytest.mark.parametrize("page", [rel(p) for p in pages()])
def test_pictures_live_beside_their_page(page):
    path = ROOT / page
    far = [
        f"{page}:{n}: {t}"
        for n, t in images(path)
        if not re.match(r"^[a-z]+:", t) and not (path.parent / t).resolve().is_relative_to(path.parent)
    ]
    assert not far, "\n".join(far)


@pytest.mark.parametrize("page", [rel(p) for p in example_pages()])
def test_every_code_block_runs_or_says_why_not(page):
    path = ROOT / page
    bad = []
    for b in code_blocks(path):
        if b.lang not in RUN_LANGS + TEXT_LANGS:
            bad.append(
                f"{page}:{b.line}: ```{b.lang}: use ```python or ```bash for examples, ``` or ```text for output"
            )
        elif b.not_run is not None and b.lang not in RUN_LANGS:
            bad.append(f"{page}:{b.line}: a `not run` comment before a ```{b.lang} block, which never runs anyway")
        elif b.not_run == "":
            bad.append(f"{page}:{b.line}: `<!-- not run: -->` must say why")
    marked = {b.line - 1 for b in code_blocks(path) if b.not_run is not None}
    bad += [
        f"{page}:{n}: a `not run` comment that is not right above a code block"
        for n, _ in not_run_comments(path)
        if n not in marked
    ]
    assert not bad, "\n".join(bad)


def test_the_readme_is_a_front_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    # the two commands come first: no other example before them
    first = [b for b in code_blocks(README) if b.lang in RUN_LANGS][:2]
    assert "python benchmark.py" in first[0].code and "python -m pytest -q" in first[1].code
    targets = {t.partition("#")[0] for _, t in links(README)}
    for page in sorted(DOCS.glob("*.md")):
        assert rel(page) in targets, f"README.md does not link to {rel(page)}"
    index = {t.partition("#")[0] for _, t in links(DOCS / "index.md")}
    for page in sorted(DOCS.glob("*.md")):
        if page.name != "index.md":
            assert page.name in index, f"docs/index.md does not link to {page.name}"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_every_docs_page_opens_with_what_it_is_for(page):
    """A title, then a paragraph of prose (not a heading, list, table or code) before anything else."""
    paras = [p.strip() for p in (DOCS / page).read_text(encoding="utf-8").split("\n\n") if p.strip()]
    assert paras[0].startswith("# ") and "\n" not in paras[0], f"{page} does not start with one # title"
    assert re.match(r"^[A-Za-z]", paras[1]) and not paras[1].startswith(("|", "-", "```", "<!--")), (
        f"{page}: the title should be followed by a paragraph saying what the page is for"
    )
    assert len(paras[1].split()) >= 15, f"{page}: the opening paragraph is too short to say what the page is for"


def ci_steps(text: str) -> list[str]:
    """The shell steps of .ci/run (or of a README command chained with &&), with pip's -q dropped."""
    steps = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "set ", "cd ")):
            continue
        for step in line.split(" && "):
            words = shlex.split(step)
            cmd = words[1:] if words and words[0].startswith("CMAKE_ARGS=") else words  # an env setting first
            pip = cmd[:1] and cmd[0].rsplit("/", 1)[-1] == "pip"  # pip, or a venv's: .venv-vllm/bin/pip
            if (pip and cmd[1:2] in (["install"], ["uninstall"])) or cmd[:4] == ["python", "-m", "pip", "install"]:
                words = [w for w in words if w != "-q"]
            steps.append(shlex.join(words))
    return steps


def test_readme_test_command_is_what_ci_runs():
    command2 = next(b for b in code_blocks(README) if b.lang == "bash" and "pytest" in b.code)
    readme, ci = ci_steps(command2.code), ci_steps((ROOT / ".ci" / "run").read_text())
    assert readme[-1] == ci[-1] == "python -m pytest -q"
    it = iter(ci)  # every README step, in order, among CI's (which may add some, such as upgrading pip)
    missing = [s for s in readme if s not in it]
    assert not missing, f"README command 2 steps not run by .ci/run (in this order): {missing}"


def test_usage_flags_table_lists_every_flag():
    table = section(DOCS / "usage.md", "Flags")
    flags = [o for a in build_parser()._actions for o in a.option_strings if o.startswith("--")]
    missing = [f for f in flags if f not in ("--help", "--version") and f"`{f}" not in table]
    assert not missing, missing


def test_operations_documents_the_gguf_cache():
    ops = (DOCS / "operations.md").read_text(encoding="utf-8")
    cache = section(DOCS / "operations.md", "GGUF cache")
    assert "BASE_BENCH_CACHE" in cache and "--no-cache" in cache and "rm -rf" in cache
    assert "gguf-cache" in anchors(DOCS / "operations.md") and "XDG_CACHE_HOME" in ops


def test_changelog_names_the_scoring_version_of_each_release():
    from base_bench.evaluation import SCORING_VERSION

    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.split(r"^## ", text, flags=re.M)[1:]
    assert releases and releases[0].startswith("Unreleased")
    from base_bench import __version__

    assert any(r.startswith(__version__) for r in releases), f"no entry for {__version__}"
    for r in releases:
        assert "Scoring version:" in r, f"the entry {r.splitlines()[0]!r} does not say its scoring version"
    assert SCORING_VERSION in releases[0], "the Unreleased entry must name the current SCORING_VERSION"
