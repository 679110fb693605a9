"""The documentation pages as the tests see them: their fenced code blocks, headings and links.

    pages()                      # README.md, CHANGELOG.md, data/README.md, bench/README.md, every docs/**/*.md
    example_pages()              # README.md and docs/*.md: the pages whose examples tests/test_readme.py runs
    code_blocks(path)            # [Block(lang, code, line, not_run)], in page order
    prose(path)                  # [(line, text)] of every line outside the fenced blocks
    anchors(path)                # the #anchors GitHub makes of the page's headings
    links(path)                  # [(line, target)] of every [text](target) and ![alt](target)
    bench_script("readme_runs")  # a bench/ script imported as a module, as tests read its tables

A ```python or ```bash block is an example, and tests/test_readme.py runs it, unless the line just
before its opening fence is a comment saying why it cannot run:

    <!-- not run: needs a GPU and the gated data -->

A plain ``` or ```text (or ```json) block is output or a synopsis, not code. Fenced blocks are
skipped when headings and links are read, so a `# comment` inside one is not a heading.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_LANGS = ("python", "bash")  # fenced blocks that are examples
TEXT_LANGS = ("", "text", "json")  # fenced blocks that are output, synopses or data
NOT_RUN = re.compile(r"^<!--\s*not run:(.*?)-->\s*$")
FENCE = re.compile(r"^```([^`\s]*)\s*$")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # 1-based line of the opening fence
    not_run: str | None  # the reason given in the comment before it, or None


def pages() -> list[Path]:
    docs = sorted((ROOT / "docs").rglob("*.md"))
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "data" / "README.md", ROOT / "bench" / "README.md", *docs]


def example_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _scan(path: Path):
    """(blocks, prose) of a page: the fenced blocks, and the other lines as (line number, text)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    blocks, prose = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            i += 1
        if i == len(lines):
            raise AssertionError(f"{path}:{start + 1}: a code fence that is never closed")
        before = lines[start - 1] if start > 0 else ""
        reason = NOT_RUN.match(before)
        blocks.append(
            Block(
                m.group(1),
                "\n".join(lines[start + 1 : i]) + "\n",
                start + 1,
                reason.group(1).strip() if reason else None,
            )
        )
        i += 1
    return blocks, prose


def code_blocks(path: Path) -> list[Block]:
    return _scan(path)[0]


def prose(path: Path) -> list[tuple[int, str]]:
    """Every line of a page outside its fenced blocks, as (line number, text)."""
    return _scan(path)[1]


def not_run_comments(path: Path) -> list[tuple[int, str]]:
    """Every `<!-- not run: ... -->` line outside code blocks, as (line, reason)."""
    return [(n, m.group(1).strip()) for n, text in _scan(path)[1] if (m := NOT_RUN.match(text))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links become their text, then lower case, everything but
    letters, digits, `_`, `-` and spaces dropped, spaces turned into `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, text in _scan(path)[1]:
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", text)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(path: Path) -> list[tuple[int, str]]:
    out = []
    for n, text in _scan(path)[1]:
        text = re.sub(r"`[^`]*`", "", text)  # a code span is not a link
        out += [(n, m.group(1)) for m in LINK.finditer(text)]
    return out


def images(path: Path) -> list[tuple[int, str]]:
    out = []
    for n, text in _scan(path)[1]:
        text = re.sub(r"`[^`]*`", "", text)
        out += [(n, m.group(1)) for m in re.finditer(r"!\[[^\]]*\]\(([^)\s]+)\)", text)]
    return out


def section(path: Path, title: str) -> str:
    """The text of the `## title` section of a page (up to the next `## ` heading)."""
    text = Path(path).read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def bench_script(name: str):
    """bench/NAME.py as a module, with bench/ on sys.path as when the script runs (the scripts import
    benchlib and each other from their own folder); they import nothing heavy at the top."""
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module
