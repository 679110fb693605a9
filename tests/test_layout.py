"""The layout: no import circle anywhere in the tree (the package, bench/ with bench/gpu/, tests/,
tools/, benchmark.py), and each subpackage of the package imports only the ones below it. Every
import counts, also one made inside a function (a lazy import is still a dependency) and one under
`if TYPE_CHECKING:` (a circle of types is still a circle: bench/gpu/common.py imported
gpu.context for a type while gpu.context imported gpu.common)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "base_bench"

# top to bottom: a module may import its own layer and the layers below it, never one above
LAYERS = [
    {"commands", "__main__"},
    {"sweep"},
    {"contamination", "integrations", "loading"},
    {"evaluation"},
    {"backends"},
    {"engine"},
    {"store"},
    {"results"},
    {"items"},
    {"errors", "version", "data", "untrusted", "redact"},
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


def tree_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every Python module of the tree under the name it is imported by: the package and
    benchmark.py from the root; bench/ (bench/gpu/ is the package `gpu`), tests/ and tools/ from
    their own folders, which their scripts and tests/conftest.py put on sys.path. Two files that
    would be imported under the same name (one shadowing the other) are refused."""
    found: dict[str, Path] = {}
    sources = [(root, root / "base_bench")] + [(root / d, root / d) for d in ("bench", "tests", "tools")]
    files = [(base, p) for base, folder in sources if folder.is_dir() for p in sorted(folder.rglob("*.py"))]
    files += [(root, root / "benchmark.py")] if (root / "benchmark.py").is_file() else []
    for base, path in files:
        parts = list(path.relative_to(base).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name in found:
            raise AssertionError(f"{rel(found[name], root)} and {rel(path, root)} are both imported as {name!r}")
        found[name] = path
    return found


def rel(path: Path, root: Path) -> str:
    return str(path.relative_to(root))


def tree_graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = tree_modules(root)
    return {m: imports(m, p, set(mods)) for m, p in mods.items()}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The base_bench modules that `name` imports."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(m, p, set(mods)) for m, p in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def a_cycle(g: dict[str, set[str]], component: list[str]) -> list[str]:
    """One circle through a strongly connected component, as the import path that closes it:
    [a, b, ..., a], from the component's first module along its smallest next names."""
    inside, start = set(component), component[0]
    path, seen = [start], {start}

    def walk(v) -> bool:
        for w in sorted(g[v] & inside):
            if w == start:
                path.append(w)
                return True
            if w not in seen:
                seen.add(w)
                path.append(w)
                if walk(w):
                    return True
                path.pop()
        return False

    walk(start)
    return path


def circles(g: dict[str, set[str]]) -> list[str]:
    """Each import circle of `g`, named: `a -> b -> a`."""
    return [" -> ".join(a_cycle(g, c)) for c in cycles(g)]


def layer(mod: str) -> int | None:
    parts = mod.split(".")
    if len(parts) == 1:
        return None  # the package itself: the public facade, imported by nothing inside
    return next(i for i, names in enumerate(LAYERS) if parts[1] in names)


def test_no_import_circle():
    g = graph()
    assert "base_bench.backends.transformers" in g and "base_bench.backends.gguf_cache" in g
    assert cycles(g) == []


def test_no_import_circle_anywhere_in_the_tree():
    g = tree_graph()
    # the graph holds every part of the tree, and their imports of each other
    assert {"base_bench.backends.transformers", "benchmark", "gpu.common", "gpu.context", "benchlib"} <= set(g)
    assert {"tiny", "docpages", "build_dataset", "test_layout"} <= set(g)
    assert "benchlib" in g["speed"] and "gpu.common" in g["gpu.context"] and "docpages" in g["test_bench_scripts"]
    assert {"tiny", "base_bench", "benchlib"} <= g["peft_merge"]
    assert circles(g) == []


CIRCLES = [  # (graph, the circles named)
    ({}, []),
    ({"a": set()}, []),
    ({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}, []),  # a diamond is no circle
    ({"a": {"b"}, "b": {"a"}}, ["a -> b -> a"]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, ["a -> b -> c -> a"]),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}, "e": {"a", "c"}}, ["a -> b -> a", "c -> d -> c"]),
    # one component, two circles through it: one is named, from its first module
    ({"a": {"b", "c"}, "b": {"a"}, "c": {"a"}}, ["a -> b -> a"]),
    # the path follows the component only: a -> x leaves it
    ({"a": {"x", "z"}, "x": set(), "z": {"y"}, "y": {"a"}}, ["a -> z -> y -> a"]),
]


@pytest.mark.parametrize("g, named", CIRCLES)
def test_the_circle_finder_names_each_circle(g, named):
    found = circles(g)
    assert sorted(found) == sorted(named)


def test_the_old_bench_gpu_circle_is_found(tmp_path):
    """bench/gpu as it was: common.py imported gpu.context under TYPE_CHECKING, for the Check
    record's type, and context.py imported gpu.common and gpu.models, which imported gpu.common."""
    gpu = tmp_path / "bench" / "gpu"
    gpu.mkdir(parents=True)
    (gpu / "__init__.py").write_text('"""The GPU check."""\n')
    (gpu / "common.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from gpu.context import Ctx\n\nROOT = 1\n"
    )
    (gpu / "models.py").write_text("from gpu.common import ROOT\n")
    (gpu / "context.py").write_text("from gpu.common import ROOT\nfrom gpu.models import BIG\n")
    (gpu / "run.py").write_text("def main():\n    from gpu import context\n")
    g = tree_graph(tmp_path)
    assert g["gpu.run"] == {"gpu.context"} and g["gpu.models"] == {"gpu.common"}
    assert circles(g) == ["gpu.common -> gpu.context -> gpu.common"]
    # and the fix: the record moved beside Ctx, common imports nothing of the package
    (gpu / "common.py").write_text("ROOT = 1\n")
    assert circles(tree_graph(tmp_path)) == []


def test_two_files_imported_under_one_name_are_refused(tmp_path):
    for folder in ("bench", "tests"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "tiny.py").write_text("")
    with pytest.raises(AssertionError, match="bench/tiny.py and tests/tiny.py are both imported as 'tiny'"):
        tree_modules(tmp_path)


def test_cycle_finder_finds_a_planted_circle():
    g = graph()
    g["base_bench.backends.identity"] = g["base_bench.backends.identity"] | {"base_bench.backends.gguf_cache"}
    assert ["base_bench.backends.gguf_cache", "base_bench.backends.identity"] in cycles(g)


def test_each_subpackage_imports_only_those_below_it():
    bad = []
    for mod, deps in graph().items():
        for d in deps:
            if layer(mod) is not None and (layer(d) is None or layer(d) < layer(mod)):
                bad.append(f"{mod} -> {d}")
    assert bad == []


def test_every_module_belongs_to_a_layer():
    for mod in modules():
        if mod != "base_bench":
            assert layer(mod) is not None, mod


def test_commands_do_not_import_each_other():
    shared = ("cliargs", "runflags")  # shared argparse code (helpers; the run's flags), not commands
    commands = {m for m in modules() if m.startswith("base_bench.commands.") and m.rsplit(".", 1)[1] not in shared}
    for mod, deps in graph().items():
        if mod in commands and not mod.endswith(".cli"):
            assert not deps & commands, (mod, deps & commands)
