"""The package layout: no import circle between modules, and each subpackage imports only the
ones below it. Every import counts, also one made inside a function (a lazy import is still a
dependency)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "base_bench"

# top to bottom: a module may import its own layer and the layers below it, never one above
LAYERS = [
    {"commands", "__main__"},
    {"contamination", "integrations"},
    {"evaluation"},
    {"backends"},
    {"engine"},
    {"results"},
    {"items"},
    {"errors", "version", "data", "untrusted", "redact"},
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


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


def layer(mod: str) -> int | None:
    parts = mod.split(".")
    if len(parts) == 1:
        return None  # the package itself: the public facade, imported by nothing inside
    return next(i for i, names in enumerate(LAYERS) if parts[1] in names)


def test_no_import_circle():
    g = graph()
    assert "base_bench.backends.transformers" in g and "base_bench.backends.gguf_cache" in g
    assert cycles(g) == []


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
    commands = {m for m in modules() if m.startswith("base_bench.commands.") and m.rsplit(".", 1)[1] != "cliargs"}
    for mod, deps in graph().items():
        if mod in commands and not mod.endswith(".cli"):
            assert not deps & commands, (mod, deps & commands)
