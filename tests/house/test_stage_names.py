"""A stage's name is written once: in its declaration (flows/pipelines.py). Everywhere else the
code names a stage through its declared object (``PUBLISH.name``, ``out[PLAN.name]``).

Scanned with ``ast``: the source modules under arborag/, flows/, tasks/, storage/ and query/,
except flows/pipelines.py. Many stage names are also other things — "links" and "sections" are
tables, "tree" and "sparse" are config sections and query modes, "vectors" is a snapshot file —
so a string equal to a declared stage name counts only where it is used as a stage name:

- the key of a stage's summary or counts: ``<x>.stages[...]``, ``out[...]`` (the flows' run
  summary), and ``.get``/``.pop``/``.setdefault`` of the same;
- a membership test against the cached stages (``"ingest" in out["cached"]``: the right-hand
  side mentions ``cached``);
- a comparison with a stage's name (``stage.name == "publish"``, ``stage == "..."``);
- a Prefect task name: ``LazyTask("...")``, ``_task("...")``, ``name="..."`` of ``task`` or
  ``with_options``;
- a tuple, list or set literal of strings that holds two or more stage names (a list of stages);
- a dict literal whose keys are all stage names (two or more: a table keyed by stage).

Docstrings, comments and every other string are left alone.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("arborag", "flows", "tasks", "storage", "query")
DECLARATIONS = ROOT / "flows" / "pipelines.py"
_SUMMARY_METHODS = ("get", "pop", "setdefault")
_TASK_CALLS = ("LazyTask", "_task")
_NAMED_CALLS = ("task", "with_options")
#: Stage runners (the modules under this folder) may still record their own counts in
#: ``ctx.counters.stages[<stage>]``; run_pipeline records a summary with ``counts()`` itself, and a
#: runner that returns one writes no counters.
RUNNER_FOLDER = "tasks/stages/"


def declared_stage_names() -> set[str]:
    from arborag.flows.pipelines import BRANCHES, PIPELINES

    stages = [s for p in PIPELINES.values() for s in p] + [s for b in BRANCHES.values() for s in b.stages]
    return {s.name for s in stages}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _stage_str(node: ast.AST | None, names: set[str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
        return node.value
    return None


def _summary_of(node: ast.AST) -> bool:
    """Is ``node`` a stage-keyed mapping: ``<x>.stages`` or the run summary ``out``?"""
    return (isinstance(node, ast.Attribute) and node.attr == "stages") or (isinstance(node, ast.Name) and node.id == "out")


def stage_name_uses(source: str, names: set[str], *, counts_allowed: bool = False) -> list[tuple[int, str, str]]:
    """``(line, name, what)`` for every stage-name use of a string literal in ``source`` (module doc)."""
    found: list[tuple[int, str, str]] = []

    def hit(node: ast.AST, name: str, what: str) -> None:
        found.append((getattr(node, "lineno", 0), name, what))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and _summary_of(node.value):
            name = _stage_str(node.slice, names)
            if name and not (counts_allowed and isinstance(node.value, ast.Attribute)):
                hit(node, name, "a summary or counts key")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _SUMMARY_METHODS and _summary_of(func.value) and node.args:
                name = _stage_str(node.args[0], names)
                if name and not (counts_allowed and isinstance(func.value, ast.Attribute)):
                    hit(node, name, "a summary or counts key")
            called = _name(func)
            if called in _TASK_CALLS and node.args and (name := _stage_str(node.args[0], names)):
                hit(node, name, "a Prefect task name")
            if called in (*_TASK_CALLS, *_NAMED_CALLS):
                for kw in node.keywords:
                    if kw.arg == "name" and (name := _stage_str(kw.value, names)):
                        hit(node, name, "a Prefect task name")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for i, op in enumerate(node.ops):
                left, right = sides[i], sides[i + 1]
                if isinstance(op, (ast.In, ast.NotIn)) and (name := _stage_str(left, names)) and "cached" in ast.unparse(right):
                    hit(node, name, "a test against the cached stages")
                if isinstance(op, (ast.Eq, ast.NotEq)):
                    for a, b in ((left, right), (right, left)):
                        name = _stage_str(a, names)
                        if name and (_name(b) == "stage" or (isinstance(b, ast.Attribute) and b.attr == "name")):
                            hit(node, name, "a comparison with a stage's name")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            strings = [e for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            stage_names = [e.value for e in strings if e.value in names]
            if len(strings) == len(node.elts) and len(stage_names) >= 2:
                hit(node, ", ".join(stage_names), "a list of stage names")
        elif isinstance(node, ast.Dict):
            keys = [_stage_str(k, names) for k in node.keys]
            if len(keys) >= 2 and all(keys):
                hit(node, ", ".join(k for k in keys if k), "a dict keyed by stage names")
    return sorted(found)


def source_files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py") if p != DECLARATIONS)


def test_stage_names_are_written_only_in_their_declarations() -> None:
    names = declared_stage_names()
    assert {"embed", "tree-update", "links", "publish"} <= names
    problems = []
    for path in source_files():
        rel = path.relative_to(ROOT).as_posix()
        for line, name, what in stage_name_uses(path.read_text(encoding="utf-8"), names, counts_allowed=rel.startswith(RUNNER_FOLDER)):
            problems.append(f"{rel}:{line}: {name!r} as {what}")
    assert not problems, "name these stages through their declarations in flows/pipelines.py (e.g. PUBLISH.name):\n" + "\n".join(problems)


def test_the_check_finds_a_planted_stage_name(tmp_path: Path) -> None:
    """The checker, run on a module written here, finds each kind of use, and leaves table names,
    config sections and docstrings alone."""
    names = declared_stage_names()
    planted = tmp_path / "planted.py"
    planted.write_text(
        '"""The links stage and the tree-update stage, in a docstring: fine."""\n'
        "from arborag.flows.lazy import LazyTask\n"
        "def f(ctx, out, stage, corpus, config):\n"
        "    corpus.read('links')\n"  # a table: fine
        "    config.tree.scope\n"
        "    modes = ('tree', 'leaves')\n"  # one stage-like name among others: fine
        "    a = out['publish']\n"
        "    b = ctx.counters.stages.get('tree-update')\n"
        "    c = 'embed' in out['cached']\n"
        "    d = stage.name == 'links'\n"
        "    e = LazyTask('sparse', f)\n"
        "    g = ('embed', 'tree', 'vectors')\n"
        "    h = {'ingest': 1, 'segment': 2}\n"
        "    return a, b, c, d, e, g, h, modes\n",
        encoding="utf-8",
    )
    uses = stage_name_uses(planted.read_text(encoding="utf-8"), names)
    assert [(line, what) for line, _, what in uses] == [
        (7, "a summary or counts key"), (8, "a summary or counts key"), (9, "a test against the cached stages"),
        (10, "a comparison with a stage's name"), (11, "a Prefect task name"), (12, "a list of stage names"),
        (13, "a dict keyed by stage names"),
    ]
    assert stage_name_uses(planted.read_text(encoding="utf-8").replace("'publish'", "PUBLISH.name"), names)[0][0] == 8
