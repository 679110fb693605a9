"""The documentation holds together: every relative link and #anchor in the README, the changelog
and docs/ resolves, every code block is an example that runs or says why not, the README stays a
front page (at most 250 lines, a link to every docs page), its test command is what CI runs, and
the pages that document the flags and the cache list them all. The user pages quote only figures
that bench/RESULTS.md holds (`unsourced_figures` says which), no two examples write one out-dir and
every run folder an example reads is one an example writes (`out_dir_problems`), and no page speaks
of targets met, of "here" for a machine, or of commits (`banned_words`); each checker is first shown
to fail on planted text. Fast: nothing is run here (tests/test_readme.py runs the examples)."""

import json
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
    bench_script,
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
    assert readme[-1] == ci[-1] == "python -m pytest -q -n 2"
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
    from base_bench import __version__

    assert releases and releases[0].startswith(__version__), f"the newest entry is not {__version__}"
    for r in releases:
        assert "Scoring version:" in r, f"the entry {r.splitlines()[0]!r} does not say its scoring version"
    assert SCORING_VERSION in releases[0], "the newest entry must name the current SCORING_VERSION"


# ---------------------------------------------------------------- the docs speak of the project only

# Notes about how the work on base-bench was organised, which a reader cannot act on: work-item
# numbers, which machine a work session had, a tool's status line. Where something is not measured,
# a page says so and names the script that measures it ("not yet measured on a GPU;
# `bench/gpu_check.py` measures it").
WORK_NOTES = [
    (r"\bissues? #?\d+", "a work-item number"),
    (r"\bthe issue\b|\bthe [\w.-]+(?: [\w.-]+)? issue\b|\bthis issue\b", "a work item ('the speed issue')"),
    (r"\bwork items?\b|\bstop #?\d+\b", "a work item or a numbered stop"),
    (
        r"\bthis session\b|\bthis task (?:was|had|did|wrote)\b|\ba session\b"
        r"|\b(?:session|task)s? (?:that|which) (?:wrote|was|were|had)\b",
        "a work session",
    ),
    (r"\bother helpers?\b|\bhelpers? (?:session|wrote|did|work)|\bthe lead\b", "who did the work"),
    (
        r"\b(?:was|were|is|not) (?:not )?lent\b|\blends?\b(?: no)? device|\bdevice (?:tool|machine)\b",
        "which machine was lent",
    ),
    (r"can_start_another|through the draw|\bworkplace\b|budget_left_s|`device` tool", "a tool's status line"),
]


def work_notes(text: str) -> list[tuple[int, str, str]]:
    """(line, what, the matched words) for every work note in `text`."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for pattern, what in WORK_NOTES:
            found += [(n, what, m.group(0)) for m in re.finditer(pattern, line, flags=re.I)]
    return found


def markdown_pages() -> list[Path]:
    """Every Markdown file of the repository (not of a virtual environment, a build, a run or the
    output folders that leaderboard and rescore make by default)."""
    skip = {"runs", "build", "dist", "node_modules", "leaderboard"}
    return sorted(
        p
        for p in ROOT.rglob("*.md")
        if not any(
            part.startswith((".", "rescore-")) or part in skip or part.endswith(".egg-info")
            for part in p.relative_to(ROOT).parts
        )
    )


def python_texts() -> list[tuple[str, int, str]]:
    """(file, line, text) of every string literal in the package, bench/, tools/ and benchmark.py:
    docstrings, --help texts and messages, all of which a user reads."""
    import ast

    files = [ROOT / "benchmark.py", *sorted(ROOT.glob("base_bench/**/*.py")), *sorted(ROOT.glob("bench/*.py"))]
    files += sorted(ROOT.glob("tools/*.py"))
    out = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append((rel(f), node.lineno, node.value))
    return out


def test_work_notes_are_recognised(tmp_path):
    planted = tmp_path / "planted.md"
    planted.write_text(
        "# The llama.cpp backend (issue 14)\n\n"
        "GPU: not measured. This task was not lent the GPU device (the `device` tool's `status` said\n"
        '`can_start_another: false` and "this workplace lends no device machine through the draw").\n'
        "Targets from the speed issue, as stop 3 of this session found; other helpers and the lead agree.\n"
        "Not yet measured on a GPU; `bench/gpu_check.py` is the script that will measure it.\n"
        "The callback logs once per training step; `timing.items_scored_this_session` counts items; on this task\n"
        "lm-eval's acc_norm is close; a helper function.\n"
    )
    found = work_notes(planted.read_text())
    assert {n for n, _, _ in found} == {1, 3, 4, 5}, found  # the user-facing lines 6 to 8 pass
    words = {w.lower() for _, _, w in found}
    assert {"issue 14", "this task was", "was not lent", "can_start_another", "the speed issue", "stop 3"} <= words
    assert {"this session", "other helpers", "the lead", "workplace", "`device` tool"} <= words


@pytest.mark.parametrize("page", [rel(p) for p in markdown_pages()])
def test_pages_speak_only_of_the_project(page):
    found = work_notes((ROOT / page).read_text(encoding="utf-8"))
    assert not found, "\n".join(f"{page}:{n}: {what}: {words!r}" for n, what, words in found)


def test_docstrings_and_help_texts_speak_only_of_the_project():
    found = [f"{f}:{n + k - 1}: {what}: {w!r}" for f, n, text in python_texts() for k, what, w in work_notes(text)]
    assert not found, "\n".join(found)


def test_every_markdown_page_is_checked():
    names = {rel(p) for p in markdown_pages()}
    assert {"README.md", "bench/RESULTS.md", "data/README.md", "CHANGELOG.md", "docs/index.md"} <= names
    assert "tools/AUTHORING_BRIEF.md" in names and not any(n.startswith(".venv") for n in names)


# ---------------------------------------------------------------- the card's facts on docs/data.md


def md_tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of `text`: each a list of rows (the header first, no separator row), each
    row a list of its cells, stripped."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def card_problems(text: str) -> list[str]:
    """Where the text of docs/data.md's "The card" section differs from base_bench/items/card.py."""
    from base_bench.engine.runstore import RUN_FILES
    from base_bench.items import card

    problems = []
    tables = md_tables(text)
    composition = next((t for t in tables if t[0][0] == "category"), None)
    want = [
        [c, str(card.ITEMS_PER_CATEGORY), f"{w:.2f}", *(str(elo[d]) for d in ("easy", "medium", "hard"))]
        for c, (w, elo) in card.CATEGORIES.items()
    ]
    if composition is None or composition[1:] != want:
        problems.append(f"composition table: {composition and composition[1:]} != {want}")
    difficulty = next((t for t in tables if t[0][0] == "difficulty"), None)
    want = [[d, str(card.DIFFICULTY_COUNTS[d]), f"{w:.2f}"] for d, w in card.DIFFICULTY_WEIGHTS.items()]
    if difficulty is None or difficulty[1:] != want:
        problems.append(f"difficulty table: {difficulty and difficulty[1:]} != {want}")
    weights = [w * dw for w, _ in card.CATEGORIES.values() for dw in card.DIFFICULTY_WEIGHTS.values()]
    *first, last = (str(n) for n in card.LABEL_COUNTS)
    facts = {
        "total": f"{card.TOTAL_ITEMS} items in seven categories of {card.ITEMS_PER_CATEGORY}",
        "point weights": f"from {min(weights):.2f} (an easy language\ncompletion item) to {max(weights):.2f}",
        "positions": f"{', '.join(first)} and {last} items",
        "chance": f"chance is {100 / card.N_CHOICES:.0f}%",
        "prior_rating": f"`prior_rating = {card.PRIOR_RATING:g}`",
        "prior_weight": f"`prior_weight = {card.PRIOR_WEIGHT:g}`",
        "elo_scale": f"`elo_scale = {card.ELO_SCALE:g}`",
        "expected": f"`expected(R, e) = 1 / (1 + 10^((e − R) / {card.ELO_SCALE:g}))`",
        "prior": f"a prior of {'four' if card.PRIOR_WEIGHT == 4 else card.PRIOR_WEIGHT} games at {card.PRIOR_RATING:g}",
        "sha": f"`{card.OFFICIAL_SHA256}`",
        "card": f"<https://huggingface.co/datasets/{card.HUB_DATASET}>",
        "tokenize": "`add_special_tokens=False`",
        **{f"file {f}": f"`{f}`" for f in RUN_FILES},
    }
    flat = " ".join(text.split())
    problems += [f"{name}: {words!r} not found" for name, words in facts.items() if " ".join(words.split()) not in flat]
    if sum(card.DIFFICULTY_COUNTS.values()) != card.TOTAL_ITEMS:
        problems.append("card.py's difficulty counts do not add up to its total")
    return problems


def test_the_card_facts_on_the_data_page_are_card_py():
    assert card_problems(section(DOCS / "data.md", "The card")) == []


@pytest.mark.parametrize(
    "old, new",
    [
        ("| logical_reasoning | 50 | 1.35 |", "| logical_reasoning | 50 | 1.30 |"),
        ("| hard | 116 | 2.25 |", "| hard | 116 | 2.5 |"),
        ("88, 88, 87 and 87", "88, 87, 88 and 87"),
        ("`prior_weight = 4`", "`prior_weight = 2`"),
        ("2f563bb46df778ca", "2f563bb46df778cb"),
        ("`run_config.json`", "`run_config.yaml`"),
    ],
)
def test_a_card_fact_that_drifts_is_caught(old, new):
    text = section(DOCS / "data.md", "The card")
    assert old in text
    assert card_problems(text.replace(old, new))


def test_the_record_format_is_the_schema():
    from base_bench.items.dataset import FIELDS

    page = DOCS / "data.md"
    example = next(b for b in code_blocks(page) if b.lang == "json")
    assert list(json.loads(example.code)) == list(FIELDS)
    table = md_tables(section(page, "The record format"))[0]
    listed = {name.strip("`") for row in table[1:] for name in row[0].split(", ")}
    assert listed == set(FIELDS)


# ---------------------------------------------------------------- pages quote what the bench scripts wrote

EXAMPLES = DOCS / "examples"


def blocks_of(page: Path) -> list[str]:
    return [b.code for b in code_blocks(page) if b.lang in TEXT_LANGS]


def test_the_readme_output_is_what_command_1_printed():
    printed = (EXAMPLES / "smollm2-fp32.txt").read_text(encoding="utf-8")
    assert printed in blocks_of(README), "README's output of command 1 is not docs/examples/smollm2-fp32.txt"
    # the Elo page quotes its summary lines, up to the legend
    summary = printed[: printed.index("(± = ")] + printed[printed.index("(± = ") :].split("\n", 1)[0] + "\n"
    assert summary in blocks_of(DOCS / "elo.md")
    runs = json.loads((ROOT / "bench" / "readme_runs.json").read_text())
    assert runs["runs"][0]["printed"] == printed and runs["runs"][0]["name"] == "smollm2-fp32"
    assert "wrote runs/smollm2-fp32/report.json" in printed and runs["limit"] is None


def test_the_gemma_example_is_what_its_run_printed():
    printed = (EXAMPLES / "gemma3-270m.txt").read_text(encoding="utf-8")
    assert printed in blocks_of(DOCS / "usage.md")
    runs = {r["name"]: r for r in json.loads((ROOT / "bench" / "readme_runs.json").read_text())["runs"]}
    assert runs["gemma3-270m"]["printed"] == printed
    assert printed.split(";")[0] in README.read_text(encoding="utf-8"), "README quotes another Gemma result"
    (bos_note,) = [n for n in runs["gemma3-270m"]["notes"] if "BOS" in n]
    assert any(bos_note in b for b in blocks_of(DOCS / "usage.md")), "usage.md does not quote Gemma's BOS note"


def test_results_holds_the_table_readme_runs_wrote():
    readme_runs = bench_script("readme_runs")
    data = json.loads((ROOT / "bench" / "readme_runs.json").read_text())
    assert readme_runs.render_table(data) in (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    names = [r["name"] for r in data["runs"]]
    assert names == ["smollm2-fp32", "smollm2-addbos", "gemma3-270m"] and not data["limit"]
    assert [r["cache"] for r in data["runs"]] == ["written", "hit", "written"]


def test_results_holds_the_tables_rescore_lm_eval_wrote():
    bench = bench_script("rescore_lm_eval")
    data = json.loads((ROOT / "bench" / "rescore_lm_eval.json").read_text())
    assert bench.render_tables(data) in (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    assert data["mean_reproduces_run"]["max_abs_diff"] == 0.0 and len(data["agreement"]) == 3
    assert data["cross_runs"] and len(data["cross_runs"]["runs"]) >= 2


def test_the_compare_example_is_what_the_command_makes_of_its_json():
    from base_bench.commands.compare import render_markdown, summary_lines
    from base_bench.items.dataset import BUNDLED_SHA256

    cmp = json.loads((EXAMPLES / "compare-smollm2-bos.json").read_text(encoding="utf-8"))
    printed = (EXAMPLES / "compare-smollm2-bos.txt").read_text(encoding="utf-8")
    # today's compare code renders the stored comparison exactly as the files hold it
    assert printed == "\n".join(summary_lines(cmp)) + "\nwrote cmp.json\nwrote cmp.md\n"
    assert (EXAMPLES / "compare-smollm2-bos.md").read_text(encoding="utf-8") == render_markdown(cmp)
    assert cmp["data_sha256"] == BUNDLED_SHA256 and cmp["n_items"] == 350
    assert [cmp["a"]["report"], cmp["b"]["report"]] == [
        "runs/smollm2-fp32/report.json",
        "runs/smollm2-addbos/report.json",
    ]
    page = DOCS / "comparing.md"
    assert printed in blocks_of(page), "docs/comparing.md does not quote docs/examples/compare-smollm2-bos.txt"
    text = page.read_text(encoding="utf-8")
    assert BUNDLED_SHA256[:12] in printed and "986fabb" not in text
    # the reading under the example quotes only numbers the example holds
    reading = text[text.index("Read it this way") :].split("\n\n")[0]
    numbers = set(re.findall(r"(?<![\w.])[−-]?\d+(?:\.\d+)?", reading))
    missing = [n for n in numbers if n not in printed]
    assert not missing, f"numbers in the reading that the compare output does not hold: {missing}"


def test_the_lm_eval_page_holds_what_lm_eval_side_measured():
    lm_eval_side = bench_script("lm_eval_side")
    data = json.loads((ROOT / "bench" / "lm_eval_side.json").read_text())
    text = (DOCS / "lm-eval.md").read_text(encoding="utf-8")
    assert lm_eval_side.render_table(data) in text
    assert data["limit"] is None and data["comparison"]["n_items"] == 350
    assert data["base_bench_report"] == "runs/smollm2-fp32/report.json"
    # the task file on the page is the one the script ran (with the checkout's data path)
    assert data["task_yaml"] in blocks_of(DOCS / "lm-eval.md")
    assert f"lm-eval {data['lm_eval_version']}" in text
    # the base-bench row is the README's run: the same accuracy as the report the README printed
    printed = (EXAMPLES / "smollm2-fp32.txt").read_text(encoding="utf-8")
    c = data["comparison"]
    bb = c["rules"]["base_bench"]
    assert f"{bb['correct']}/350 items" in printed
    assert data["lm_eval_command"] in blocks_of(DOCS / "lm-eval.md")[1]
    assert lm_eval_side.render_table(data) in (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    # the findings under the tables quote the JSON
    ll, tok = c["ll_vs_base_bench_sum"], c["tokenization"]
    said = [
        f"median of {ll['median_abs']:.1e} nats and at most {ll['max_abs']:.1e}",
        f"same continuation on {c['same_choice']['sum|lm_eval_acc']} of 350 items",
        f"`acc` picks the shortest on {c['rules']['lm_eval_acc']['picks_shortest']} items",
        f"the shortest on only {c['label_is_shortest']} ",
        f"another continuation on {350 - c['same_choice']['base_bench|lm_eval_acc_norm']} of 350 items",
        f"{tok['continuations_tokenized_differently']} of 1,400 continuations got other tokens",
    ]
    flat = " ".join(text.split())
    assert [x for x in said if x not in flat] == []
    assert not tok["tokenizer_adds_bos"] and "SmolLM2's does not" in flat


# ---------------------------------------------------------------- figures, out-dirs and words of the user pages

USER_PAGES = [README, *sorted(DOCS.glob("*.md"))]
RESULTS = ROOT / "bench" / "RESULTS.md"

# A figure is a number followed by a unit of time, size, rate, ratio, share or log-probability.
UNITS = r"TFLOP/s|TFLOP|tokens/s|items/s|MB/s|GB|MB|GiB|MiB|KB|kB|TB|ms|s|seconds?|minutes?|hours?|×|%|nats?"
NUMBER = r"\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?"
FIGURE = re.compile(rf"(?<![\w.#/+−-])({NUMBER})(?:[  -]?)({UNITS})(?![\w/])")
# Figures that are not measurements, each with why it may stand without a row in bench/RESULTS.md.
FIGURE_ALLOWED = {
    "95%": "the confidence level of every interval, not a measurement",
}


def canonical(number: str) -> str:
    """A number as written, without thousands separators; 8.2e-5 and 8.2e-05 are the same number."""
    number = number.replace(",", "")
    return repr(float(number)) if "e" in number.lower() else number


def results_numbers(text: str) -> set[str]:
    return {canonical(m.group(0)) for m in re.finditer(rf"(?<![\w.]){NUMBER}", text)}


def figures(text: str) -> list[tuple[int, str, bool]]:
    """(line, figure, said to be approximate) for every figure in the prose and tables of a page's text: code blocks, inline
    code, link targets and HTML comments are left out."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out, in_code = [], False
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        line = re.sub(r"`[^`]*`", "", line)  # inline code: flags and identifiers, not quoted figures
        line = re.sub(r"\]\([^)]*\)", "]", line)  # link targets
        out += [
            (
                n,
                m.group(0),
                re.search(r"(?:\babout|\baround|\broughly|\bnearly|\balmost|~)\s*$", line[: m.start()]) is not None,
            )
            for m in FIGURE.finditer(line)
        ]
    return out


def unsourced_figures(text: str, results: str) -> list[tuple[int, str]]:
    """The figures of `text` that bench/RESULTS.md (`results`) does not hold.

    The rule: a figure is a number directly followed by one of UNITS (`918.8 s`, `3.42 GB`, `1.9×`,
    `54.3%`, `8.2e-05 nats`), in the prose or a table of README.md or docs/*.md (code blocks, inline
    code, link targets and HTML comments are not read). It must be in bench/RESULTS.md written the
    same way, either with the same unit (`3.42 GB`) or as a table cell of its own (`| 918.8 |` in a
    column of seconds); `1,400` is `1400` and `8.2e-5` is `8.2e-05`, but `0.12` is not `0.124`:
    quote the table's number, not a rounding of it. A whole number below 10 (`5×`) counts only with
    its unit, never as a bare cell. A setting or limit of the software is not a measurement: write
    it as code (`64 MiB`, `--request-timeout 300`), which this check does not read. A figure said to be approximate (`about 3 minutes`, `~5×`) is
    refused whatever RESULTS.md holds: a page quotes one number, the table's. FIGURE_ALLOWED lists
    the few figures that are not measurements."""
    flat = " ".join(results.split())
    cells = {
        canonical(c.strip().strip("*"))
        for line in results.splitlines()
        if line.startswith("|")
        for c in line.strip().strip("|").split("|")
        if re.fullmatch(NUMBER, c.strip().strip("*"))
    }
    with_unit = {
        (canonical(m.group(1)), m.group(2))
        for m in re.finditer(rf"(?<![\w.]){FIGURE.pattern[FIGURE.pattern.index('(') :]}", flat)
    }
    bad = []
    for n, fig, approximate in figures(text):
        number, unit = FIGURE.fullmatch(fig).groups()
        if fig in FIGURE_ALLOWED:
            continue
        short = re.fullmatch(r"\d", number) is not None
        held = (canonical(number), unit) in with_unit or (not short and canonical(number) in cells)
        if approximate or not held:
            bad.append((n, fig))
    return bad


@pytest.mark.parametrize(
    "text, bad",
    [
        ("took 918.8 s and 1.26 GB", []),
        ("about 3 minutes on 2 cores", [(1, "3 minutes")]),
        ("about 918.8 s", [(1, "918.8 s")]),
        ("3 min, then ~1.9×", [(1, "1.9×")]),
        ("a 918.8 MB file, 5× faster", [(1, "5×")]),
        ("within 4.3e-5 nats per choice", [(1, "4.3e-5 nats")]),
        ("within 8.2e-5 nats per choice", []),
        ("a median 0.12 nats", [(1, "0.12 nats")]),
        ("peak within the model's size + 1.5 GB", [(1, "1.5 GB")]),
        ("a 0.54 GB model", []),
        ("1.9× faster | 54.3% |", []),
        ("`--request-timeout 300 s` and [x](#a-5-s-run)", []),
        ("```bash\nsleep 77 s\n```\n<!-- 12.5 s -->\n95% CI", []),
        ("1,400 choices, 22,430 tokens/s", []),
    ],
)
def test_unsourced_figures_are_found(text, bad):
    results = "| 918.8 | 1.26 GB | 3 min | 0.54 | 22430 |\n8.2e-05 nats and 0.124 nats, 1.9×, 54.3%, 1400 items\n"
    assert unsourced_figures(text, results) == bad


@pytest.mark.parametrize("page", [rel(p) for p in USER_PAGES])
def test_every_quoted_figure_is_in_results(page):
    bad = unsourced_figures((ROOT / page).read_text(encoding="utf-8"), RESULTS.read_text(encoding="utf-8"))
    assert not bad, "figures not in bench/RESULTS.md:\n" + "\n".join(f"{page}:{n}: {f}" for n, f in bad)


# Where examples write and read runs: every example writes a folder no other example writes (a
# user who follows two of them would otherwise be stopped by "already holds a run"), and a folder
# an example reads is one an example writes.
EXAMPLE_PAGES = [*USER_PAGES, ROOT / "data" / "README.md"]
READERS = ("compare", "leaderboard", "explore", "trajectory", "rescore")


def placeholder(path: str) -> bool:
    """DIR, OUT, RUN_A, $OUT, path/to/x, ...: a name the reader fills in, not a folder an example makes."""
    return bool(re.search(r"[A-Z]{2,}|\$|\.\.\.|path/to|<|\{", path)) or path in (".", "")


def shell_commands(code: str) -> list[list[str]]:
    """The commands of a shell block as word lists: continuation lines joined, comments dropped, split
    at `&&`, `;` and `|`."""
    code = code.replace("\\\n", " ")
    out = []
    for line in code.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        cmd = []
        for w in [*words, "&&"]:
            if w in ("&&", ";", "|", "||"):
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(w)
    return out


def run_dirs(blocks: list[tuple[str, str, str]]) -> tuple[list[tuple[str, str, bool]], list[tuple[str, str]]]:
    """(writes, reads) of the examples `blocks` (where, lang, code): writes as (where, folder,
    continues a run with --resume), reads as (where, folder)."""
    writes, reads = [], []
    for where, lang, code in blocks:
        if lang == "python":
            writes += [(where, m.group(1), False) for m in re.finditer(r"out_dir\s*=\s*[\"']([^\"']+)[\"']", code)]
            reads += [(where, m.group(1)) for m in re.finditer(r"[\"']([\w./-]+)/report\.json[\"']", code)]
            continue
        for cmd in shell_commands(code):
            resume = "--resume" in cmd
            sub = next((w for w in cmd if w in READERS), None)
            i = 0
            while i < len(cmd):
                w = cmd[i]
                flag, _, value = w.partition("=")
                if flag in ("--out-dir", "--out") and (value or i + 1 < len(cmd)):
                    writes.append((where, value or cmd[i + 1], resume))
                    i += 1 if value else 2
                    continue
                if flag == "--store":  # a results store: written by many runs at once, read by the views
                    i += 1 if value else 2
                    continue
                if flag == "--report" and (value or i + 1 < len(cmd)):
                    reads.append((where, str(Path(value or cmd[i + 1]).parent)))
                    i += 1 if value else 2
                    continue
                if sub and not w.startswith("-") and w.startswith("runs/"):
                    reads.append((where, w.rstrip("/")))
                i += 1
    writes = [(w, d.rstrip("/"), r) for w, d, r in writes if not placeholder(d)]
    reads = [(w, d) for w, d in reads if not placeholder(d)]
    return writes, reads


def out_dir_problems(blocks: list[tuple[str, str, str]]) -> list[str]:
    """Two examples that write one folder (a `--resume` of it continues the run and is no second
    writer), and a folder read that no example writes (nor a folder above it)."""
    writes, reads = run_dirs(blocks)
    first: dict[str, str] = {}
    problems = []
    for where, folder, resume in writes:
        if folder in first and not resume:
            problems.append(f"{where}: writes {folder}, which {first[folder]} writes too")
        first.setdefault(folder, where)
    for where, folder in reads:
        if not any(folder == w or folder.startswith(w + "/") for w in first):
            problems.append(f"{where}: reads {folder}, which no example writes")
    return problems


@pytest.mark.parametrize(
    "blocks, problems",
    [
        (
            [
                (
                    "a:1",
                    "bash",
                    "base-bench --model M --out-dir runs/x\nbase-bench --model M --out-dir runs/x --resume\n",
                )
            ],
            [],
        ),
        (
            [
                ("a:1", "bash", "base-bench --model M --out-dir runs/smoke"),
                ("b:5", "bash", "base-bench --out-dir=runs/smoke"),
            ],
            ["b:5: writes runs/smoke, which a:1 writes too"],
        ),
        (
            [("a:1", "bash", "x && base-bench --model \"$(python -c 'print(1)')\" \\\n    --out-dir runs/a # c")]
            + [("b:1", "python", 'evaluate(m, t, out_dir="runs/a")')],
            ["b:1: writes runs/a, which a:1 writes too"],
        ),
        (
            [("a:1", "bash", "base-bench compare runs/a runs/b --out-dir cmp")],
            ["a:1: reads runs/a, which no example writes", "a:1: reads runs/b, which no example writes"],
        ),
        (
            [("a:1", "bash", "python tools/q.py --report runs/r/report.json")],
            ["a:1: reads runs/r, which no example writes"],
        ),
        (
            [
                (
                    "a:1",
                    "bash",
                    "base-bench --out-dir runs/t\nbase-bench trajectory runs/t/bench --out-dir DIR --out $OUT",
                )
            ],
            [],
        ),
        ([("a:1", "python", 'json.load(open("runs/e/report.json"))')], ["a:1: reads runs/e, which no example writes"]),
    ],
)
def test_colliding_and_missing_run_dirs_are_found(blocks, problems):
    assert out_dir_problems(blocks) == problems


def test_every_example_writes_its_own_out_dir():
    blocks = [
        (f"{rel(p)}:{b.line}", b.lang, b.code) for p in EXAMPLE_PAGES for b in code_blocks(p) if b.lang in RUN_LANGS
    ]
    assert out_dir_problems(blocks) == []


# Words that speak of the people and machines that made base-bench, not of the software: a place
# ("measured here"), a project's machine, targets met or missed, commit hashes, history outside the
# changelog's entries. A user page says what the software does and what was measured, on what.
BANNED = [
    (
        r"\b(?:measured|tested|untested|run|found|seen|used|won|here)\s+here\b|\bno cluster here\b",
        "'here' for a machine",
    ),
    (r"\bthis (?:project|repository)'s\b[^.]{0,30}\bmachine|\bour machine\b", "the project's machine"),
    (
        r"\b(?:targets?|goals?)\b[^.|]{0,80}\b(?:met|missed)\b|\b(?:met|missed)\b[^.|]{0,40}\b(?:targets?|goals?)\b",
        "a target met or missed",
    ),
    (r"\bmet\?|\| \*\*no\*\*|\bthe (?:speed |project's |GPU )?targets\b", "a target met or missed"),
    (r"\bcommit [0-9a-f]{7,40}\b|\((?:main, )?[0-9a-f]{7,40}\)|\bmain, [0-9a-f]{7}", "a commit hash"),
    (r"<!--(?!\s*not run:)", "an HTML comment other than `not run`"),
]
# Notes on how base-bench was built and tested, which a user cannot act on: decisions taken, work
# still to come, how the tests are arranged (a browser driver, CI settings, test files, fault
# moments), what no cluster has run, another project's issue numbers. docs/contributing.md, the page
# for contributors, may speak of the tests and CI; every other user page says what the software does.
BUILD_NOTES = [
    (r"\bdecisions on\b|\bdecisions? (?:was|were) (?:taken|made)\b|\bwe decided\b", "a decision taken"),
    (
        r"\bwill (?:measure|be measured|be added|be tested|be fixed|be done)\b|\bthe script that will\b",
        "work still to come",
    ),
    (r"\bSelenium\b|\bchromium-driver\b", "how the tests drive a browser"),
    (
        r"\bno (?:Slurm |Ray |GPU )?(?:cluster|machine|GPU) (?:has|have|had) (?:run|tested|measured)\b",
        "what no machine has run",
    ),
    (r"\bkill moments\b|\bSIGKILL at \d+ moments\b", "how the fault tests are arranged"),
    (
        r"(?<![\w&/])#\d{3,}\b|\b(?:vLLM|llama\.cpp|PyTorch|torch|transformers|lm-eval|datatrove|GitHub)\s+"
        r"(?:issue|PR|pull request)\b",
        "another project's issue or PR",
    ),
    (
        r"\b(?:the |our )?tests (?:arrange|start|run|hold|check|cover|skip|fill|kill|mount|take)s?\b"
        r"|\btest(?:s|ed)? in a real browser\b|\btested by (?:killing|forcing|planting)\b",
        "how the tests are arranged",
    ),
]
# The same notes where they hide in code spans, which `banned_words` otherwise leaves alone: a CI
# setting and a test file (a `not run` comment may still name the test that runs its block).
BUILD_NOTES_IN_CODE = [
    (r"\bCI=1\b", "a CI setting"),
    (r"\btests/[\w/]+\.py\b", "a test file"),
]
RESULTS_BANNED = [
    b for b in BANNED if b[1] in ("a target met or missed", "a commit hash", "an HTML comment other than `not run`")
]
# bench/RESULTS.md may name the machine a table was measured on, but states no targets at all
RESULTS_BANNED += [
    (r"\btargets?\b(?!'s logit)|\bgoals?\b|\bmet\b|\bmissed\b|\bwithin budget\b", "a target met or missed")
]


def banned_words(text: str, rules=BANNED, in_code=()) -> list[tuple[int, str, str]]:
    """(line, what, the matched words) for every rule that matches a line of `text`: `rules` on the
    line without its code spans, `in_code` on the whole line but its `not run` comment."""
    found = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"`[^`]*`", "``", raw)  # code (`pip install --target DIR`) says what to type
        for pattern, what in rules:
            found += [(n, what, m.group(0)) for m in re.finditer(pattern, line, flags=re.I)]
        raw = re.sub(r"<!--\s*not run:.*?-->", "", raw)
        for pattern, what in in_code:
            found += [(n, what, m.group(0)) for m in re.finditer(pattern, raw, flags=re.I)]
    return found


def user_page_words(text: str, contributing: bool = False) -> list[tuple[int, str, str]]:
    """`banned_words` as a user page is held to: BANNED, and the build notes unless the page is
    docs/contributing.md, which is written for contributors."""
    if contributing:
        return banned_words(text)
    return banned_words(text, BANNED + BUILD_NOTES, BUILD_NOTES_IN_CODE)


@pytest.mark.parametrize(
    "text, whats",
    [
        ("On this project's 2-core machine it took 101 s.", ["the project's machine"]),
        ("vLLM, tested here on a CPU (there is no cluster here).", ["'here' for a machine", "'here' for a machine"]),
        ("Target met on the direct measure.", ["a target met or missed"]),
        ("| peak ≤ 1.5 GB | 1.24 GB | **no** |", ["a target met or missed"]),
        ("| target | measured | met? |", ["a target met or missed"]),
        ("Why some targets were missed", ["a target met or missed"]),
        ("the layout change (commit 38b9934); before (main, e527a10)", ["a commit hash", "a commit hash"]),
        (
            "<!-- the tests start this server, worked out by hand -->",
            ["an HTML comment other than `not run`", "how the tests are arranged"],
        ),
        ("<!-- not run: needs a GPU -->\nHere is the picture; target modules; `target_delimiter`", []),
        ("Decisions on four further questions:", ["a decision taken"]),
        ("The decision on the BOS token is yours: pass `--add-bos` to measure it.", []),
        ("`bench/gpu_check.py` is the script that will measure it.", ["work still to come"]),
        ("Not measured on a GPU; `bench/gpu_check.py` measures it. A killed run will resume.", []),
        (
            "the pages, driven by Selenium (`apt-get install chromium chromium-driver`)",
            ["how the tests drive a browser"],
        ),
        ("The page opens from disk in Chromium, Firefox or any other browser.", []),
        (
            "Slurm only as far as the executors being built (no Slurm cluster has run them).",
            ["what no machine has run"],
        ),
        ("On Slurm the scan is submitted as jobs; no cluster is needed for the local executor.", []),
        ("SIGKILL at 14 moments of one run; the 14 kill moments", ["how the fault tests are arranged"] * 2),
        ("A run killed at any moment keeps every item it saved.", []),
        ("stale values: vLLM issue 42019, fixed in #41234", ["another project's issue or PR"] * 2),
        ("Item #12 of the list; see [the BOS note](#the-bos-note); `#1234` in code", []),
        ("the tests run on local disks only; Tests run all of this on the CPU", ["how the tests are arranged"] * 2),
        ("the tests start a real vLLM server; Tested in a real browser", ["how the tests are arranged"] * 2),
        ("The unit tests you write run under pytest; a copy test, then an alignment test.", []),
        ("under `CI=1` that is a failure", ["a CI setting"]),
        ("`tests/test_hub_http.py` runs all of this over real HTTP", ["a test file"]),
        ("<!-- not run: needs GPUs; tests/test_distributed.py runs torchrun on the CPU -->", []),
        ("`CI` and `--tests-dir` are flags; `bench/speed.py` measures it", []),
    ],
)
def test_banned_words_are_found(text, whats):
    assert [what for _, what, _ in user_page_words(text)] == whats


def test_contributing_may_speak_of_the_tests():
    text = "`tests/test_browser.py` drives Chromium through Selenium; under `CI=1` a skip is a failure."
    assert user_page_words(text, contributing=True) == []
    assert {w for _, w, _ in user_page_words(text)} == {"how the tests drive a browser", "a CI setting", "a test file"}


@pytest.mark.parametrize("page", [rel(p) for p in [*EXAMPLE_PAGES, ROOT / "CHANGELOG.md"]])
def test_user_pages_speak_of_the_software(page):
    found = user_page_words((ROOT / page).read_text(encoding="utf-8"), contributing=page == "docs/contributing.md")
    assert not found, "\n".join(f"{page}:{n}: {what}: {w!r}" for n, what, w in found)


def test_results_page_states_no_targets_planted():
    text = "Target met on the direct measure.\n| peak | budget | met? |\nthe target's logit in float64\n"
    assert {n for n, _, _ in banned_words(text, RESULTS_BANNED)} == {1, 2}


def test_results_page_names_no_targets():
    found = banned_words(RESULTS.read_text(encoding="utf-8"), RESULTS_BANNED)
    assert not found, "\n".join(f"bench/RESULTS.md:{n}: {what}: {w!r}" for n, what, w in found)
