"""The import floors of the house (docs/ARCHITECTURE.md), checked on the source with ast.

    cli, serve, mcpserver <- anything, but only lazily (inside functions) above the foundation
    flows               <- tasks, query, storage, foundation   (orchestration only)
    query               <- storage, foundation                 (never tasks or flows)
    tasks               <- storage, foundation
    storage             <- foundation
    foundation          <- nothing of ours (arborag/*.py and arborag's own helper packages)

Every import counts, at module level and inside functions (a lazy import is still a
dependency), except in the top floor, where only module-level imports are checked. Import
cycles between modules are refused on every floor.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# folder on disk -> package name inside the one ``arborag`` namespace
FOLDERS = {"flows": "arborag.flows", "tasks": "arborag.tasks", "storage": "arborag.storage", "query": "arborag.query"}
TOP = ("arborag.cli", "arborag.serve", "arborag.mcpserver")
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


def _resolve(name: str) -> str | None:
    """The module of ours that ``name`` denotes (an attribute import maps to its module)."""
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
                if top_level and tfloor not in ("top", "foundation"):
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {target} at module level (the CLI imports lazily)")
                continue
            if tfloor == "top" or tfloor not in ALLOWED[floor]:
                bad.append(f"{path.relative_to(ROOT)}:{line} ({floor}) imports {target} ({tfloor})")
    assert not bad, "imports against the floors:\n" + "\n".join(bad)


def test_no_import_cycles_between_modules() -> None:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        if floor_of(module) == "top":
            continue
        deps = {_resolve(t) for t, _, _ in imports_of(module, path)}
        # a package's __init__ re-exporting its own submodules is not a cycle of logic
        graph[module] = {d for d in deps if d and d != module and not module.startswith(d + ".") and not d.startswith(module + ".")}
    cycles = []
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
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("floor,example", [("storage", "arborag.storage.tables"), ("query", "arborag.query.index"), ("foundation", "arborag.config"), ("top", "arborag.cli.query")])
def test_floor_of_names_the_packages(floor: str, example: str) -> None:
    assert floor_of(example) == floor
    assert example in MODULES
