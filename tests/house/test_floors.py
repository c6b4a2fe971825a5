"""The import floors of the house (docs/ARCHITECTURE.md), checked on the source with ast.

    cli, serve, mcpserver <- anything, but only lazily (inside functions) above the foundation
    (and launch, the        (except the light mode registry, arborag.query.modes)
    console script)
    flows               <- tasks, query, storage, foundation   (orchestration only)
    query               <- storage, foundation                 (never tasks or flows)
    tasks               <- storage, foundation
    storage             <- foundation
    foundation          <- nothing of ours (arborag/*.py and arborag's own helper packages)

Every import counts, at module level and inside functions (a lazy import is still a
dependency), except in the top floor, where only module-level imports are checked. A module
that a registry imports by name (the retrieval modes of ``arborag.query.modes``) is an import
of the registry's module too.

Import cycles between modules are refused on every floor, inside a package as much as across
packages: a submodule that imports its own package's ``__init__`` (which imports it back) is a
cycle; only a package ``__init__`` re-exporting its submodules is not. ``cli`` and ``serve``
do not import each other at module level (``serve`` never imports ``cli`` at all).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# folder on disk -> package name inside the one ``arborag`` namespace
FOLDERS = {"flows": "arborag.flows", "tasks": "arborag.tasks", "storage": "arborag.storage", "query": "arborag.query"}
# arborag.launch: the console script's entry (starts the embedding worker, then arborag.cli)
TOP = ("arborag.cli", "arborag.serve", "arborag.mcpserver", "arborag.launch")
# Read by the top floor at module level (the server's request model, --mode choices): a registry
# that imports no index, mode, numpy or torch (tests/query/test_modes.py checks that it stays so);
# the snapshot's table names (the sql and snapshots commands' help), whose module imports no
# duckdb at module level (test_light_modules_import_nothing_heavy below).
LIGHT = {"arborag.query.modes", "arborag.storage.catalog"}
ALLOWED = {
    "foundation": {"foundation"},
    "storage": {"foundation", "storage"},
    "tasks": {"foundation", "storage", "tasks"},
    "query": {"foundation", "storage", "query"},
    "flows": {"foundation", "storage", "tasks", "query", "flows"},
}


def floor_of(module: str) -> str | None:
    if module != "arborag" and not module.startswith("arborag."):
        return None
    for top in TOP:
        if module == top or module.startswith(top + "."):
            return "top"
    for name in ("flows", "tasks", "storage", "query"):
        pkg = f"arborag.{name}"
        if module == pkg or module.startswith(pkg + "."):
            return name
    return "foundation"


def source_modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for path in (ROOT / "arborag").rglob("*.py"):
        rel = path.relative_to(ROOT / "arborag").with_suffix("")
        parts = ["arborag", *rel.parts]
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for folder, pkg in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [*pkg.split("."), *rel.parts]
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def imports_of(module: str, path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import of ours in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = top_level and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, top_level) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".") if is_pkg else module.split(".")[:-1]
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                found.append((target, child.lineno, top_level))
                # ``from arborag.tasks import chunks`` imports arborag.tasks.chunks
                found.extend((f"{target}.{a.name}", child.lineno, top_level) for a in child.names)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                continue  # typing-only imports are not dependencies at run time
            visit(child, nested)

    visit(tree, True)
    return [(m, line, top) for m, line, top in found if floor_of(m) is not None]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


MODULES = source_modules()


def registry_imports() -> dict[str, set[str]]:
    """Modules imported by name through a registry: module -> the modules it loads."""
    from arborag.query import modes

    return {"arborag.query.modes": set(modes.mode_modules())}


def import_graph(modules: dict[str, Path], by_name: dict[str, set[str]] | None = None, *, skip_top: bool = True) -> dict[str, set[str]]:
    """module -> the modules of ours it imports (resolved to modules that exist)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        if skip_top and floor_of(module) == "top":
            continue
        found = imports_of(module, path)
        deps = set()
        for target, line, _ in found:
            # ``from pkg import sub`` names the submodule: an edge to ``pkg`` (its __init__) only
            # when a name of the __init__ itself is imported (``from pkg import Thing``)
            if target in modules and modules[target].name == "__init__.py" and any(
                    t.startswith(target + ".") and t in modules for t, ln, _ in found if ln == line):
                if not any(t.startswith(target + ".") and t not in modules for t, ln, _ in found if ln == line):
                    continue
            deps.add(resolve(target))
        deps |= {resolve(t) for t in (by_name or {}).get(module, ())}
        graph[module] = {d for d in deps if d and d != module}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every import cycle a depth-first walk meets, as ``a -> b -> a``."""
    cycles: list[str] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                dfs(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node)
    return cycles


def _module_of(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def test_every_import_respects_the_floors() -> None:
    bad = []
    for module, path in sorted(MODULES.items()):
        floor = floor_of(module)
        for target, line, top_level in imports_of(module, path):
            tfloor = floor_of(target)
            if floor == "top":
                if top_level and tfloor not in ("top", "foundation") and _module_of(target) not in LIGHT:
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {target} at module level (the CLI imports lazily)")
                continue
            if tfloor == "top" or tfloor not in ALLOWED[floor]:
                bad.append(f"{path.relative_to(ROOT)}:{line} ({floor}) imports {target} ({tfloor})")
    assert not bad, "imports against the floors:\n" + "\n".join(bad)


def test_no_import_cycles_between_modules() -> None:
    cycles = find_cycles(import_graph(MODULES, registry_imports()))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_import_cycle_inside_query() -> None:
    """The import circle index -> auto -> index and any other inside ``query/``,
    modes loaded by name included."""
    graph = import_graph(MODULES, registry_imports())
    inside = {m: {d for d in deps if floor_of(d) == "query"} for m, deps in graph.items() if floor_of(m) == "query"}
    assert "arborag.query.raptor" in inside["arborag.query.modes"], "the registry's by-name imports are not in the graph"
    assert not find_cycles(inside)


def test_cli_and_serve_do_not_import_each_other() -> None:
    bad = []
    for module, path in sorted(MODULES.items()):
        for target, line, top_level in imports_of(module, path):
            if module.startswith("arborag.serve") and target.startswith("arborag.cli"):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target} (serve never imports cli)")
            elif module.startswith("arborag.cli") and target.startswith("arborag.serve") and top_level:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target} at module level (cli imports serve lazily)")
    assert not bad, "\n".join(bad)


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    mods = {}
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        parts = ["arborag", *Path(rel).with_suffix("").parts]
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def test_the_cycle_checker_on_a_synthetic_tree(tmp_path: Path) -> None:
    """The checker itself: a lazy circle inside one package, a submodule importing its own
    package's __init__, and a circle closed by a registry's by-name import are all found;
    TYPE_CHECKING imports and an __init__ re-exporting its submodules are not circles."""
    clean = _tree(tmp_path / "clean", {
        "query/__init__.py": "from arborag.query.index import Index\n",
        "query/hits.py": "X = 1\n",
        "query/index.py": "from arborag.query.hits import X\ndef search():\n    from arborag.query import modes\n",
        "query/modes.py": "TARGETS = ['arborag.query.auto']\n",
        "query/auto.py": "from typing import TYPE_CHECKING\nfrom arborag.query.hits import X\nif TYPE_CHECKING:\n    from arborag.query.index import Index\n",
    })
    assert find_cycles(import_graph(clean, {"arborag.query.modes": {"arborag.query.auto"}})) == []

    lazy = dict(clean, **_tree(tmp_path / "lazy", {"query/auto.py": "def f():\n    from arborag.query.index import fill\n"}))
    assert find_cycles(import_graph(lazy, {"arborag.query.modes": {"arborag.query.auto"}})) == [
        "arborag.query.index -> arborag.query.modes -> arborag.query.auto -> arborag.query.index"]
    assert find_cycles(import_graph(lazy)) == []  # without the registry's edge the circle is invisible

    own_init = dict(clean, **_tree(tmp_path / "own", {"query/hits.py": "from arborag.query import Index\n"}))
    assert find_cycles(import_graph(own_init)) == [
        "arborag.query -> arborag.query.index -> arborag.query.hits -> arborag.query"]


@pytest.mark.parametrize("floor,example", [("storage", "arborag.storage.tables"), ("query", "arborag.query.index"), ("foundation", "arborag.config"), ("top", "arborag.cli.query")])
def test_floor_of_names_the_packages(floor: str, example: str) -> None:
    assert floor_of(example) == floor
    assert example in MODULES


def test_light_modules_import_nothing_heavy() -> None:
    """A module the CLI may import at module level loads none of the heavy libraries."""
    import subprocess
    import sys

    heavy = ("numpy", "torch", "duckdb", "pyarrow", "polars", "lancedb", "prefect")
    for module in sorted(LIGHT):
        code = f"import sys, {module}; print(','.join(m for m in {heavy!r} if m in sys.modules))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        assert out == "", f"{module} loads {out} on import"
