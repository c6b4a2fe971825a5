"""Code fingerprints: what the stage keys and the build key hold of the code.

A stage declares ``code_version``, the version of what its code produces (like Dagster's
``code_version``). :func:`code_versions` hashes the declared versions of a pipeline; the stage
keys and the build key hold it, not the source text, so a comment, a docstring, a refactor or an
upgrade that leaves the output alone keeps the caches and the published tree, and a change to a
stage's output is made by bumping its version (docs/ARCHITECTURE.md, "Code versions").
:func:`normalized_code` is the development check beside it: per module of a stage's closure, a
hash of its code without comments, docstrings and formatting. :func:`pipeline_fingerprint`
hashes the source of the runner modules and every module of ours they import (at any depth,
lazy imports included); it keys what declares no version (the evaluation's retrieval).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import threading
import time
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arborag.hashing import hash_json

if TYPE_CHECKING:
    from arborag.flows.stage import Stage

__all__ = ["code_versions", "module_closure", "normalized_code", "normalized_source", "pipeline_fingerprint"]


def _resolve(name: str) -> tuple[str, Path] | None:
    """The module of ours that ``name`` denotes and its source file (``a.b.func`` -> ``a.b``).

    Walks the dotted name from the left and stops at the first plain module, so only package
    ``__init__`` files are ever imported to find a child (``find_spec`` needs the parent).
    """
    parts = name.split(".")
    found: tuple[str, Path] | None = None
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        try:
            spec = importlib.util.find_spec(prefix)
        except (ImportError, ValueError):
            break
        if spec is None:
            break
        if spec.origin and spec.origin.endswith(".py"):
            found = (prefix, Path(spec.origin))
        if spec.submodule_search_locations is None:
            break
    return found


_AST_LOCK = threading.Lock()


def _parse(path: Path) -> ast.Module:
    """``ast.parse`` of a file, serialized and retried: CPython 3.11's AST builder keeps its
    recursion counter per interpreter, so a parse racing another thread's (Prefect parses too)
    can fail with a spurious ``SystemError: AST constructor recursion depth mismatch``."""
    source = path.read_text(encoding="utf-8")
    for attempt in range(5):
        try:
            with _AST_LOCK:
                return ast.parse(source, filename=str(path))
        except SystemError:
            if attempt == 4:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


#: The import lists of our modules, kept across processes by file (path, mtime, size): an update's
#: code fingerprint otherwise parses ~80 modules with ``ast`` in every new process (0.6-2 s of a
#: small update). ``ARBORAG_CODE_CACHE=0`` switches it off.
_DISK_NAME = "code_imports.json"
_disk: dict[str, list[str]] | None = None
_disk_dirty = False


def _disk_path() -> Path | None:
    from arborag.env import user_cache_path

    return user_cache_path(_DISK_NAME, "ARBORAG_CODE_CACHE")


def _disk_cache() -> dict[str, list[str]]:
    global _disk
    if _disk is None:
        _disk = {}
        path = _disk_path()
        if path is not None:
            try:
                found = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(found, dict):
                    _disk = {k: v for k, v in found.items() if isinstance(v, list)}
            except (OSError, ValueError):
                pass
    return _disk


def _save_disk_cache() -> None:
    """Write the import lists learnt in this process (never fails: it only saves the next process time)."""
    global _disk_dirty
    path = _disk_path()
    if not _disk_dirty or path is None or _disk is None:
        return
    try:
        from arborag.storage.tables import atomic_write_json

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {k: v for k, v in sorted(_disk.items()) if _current(k)})
        _disk_dirty = False
    except Exception:  # noqa: BLE001 - a cache
        pass


def _current(key: str) -> bool:
    """Whether a disk entry ``module|path|mtime_ns|size`` still describes its file (older versions
    of an edited file, and files gone, are dropped when the cache is written)."""
    _, path, mtime_ns, size = key.rsplit("|", 3)
    try:
        st = Path(path).stat()
    except OSError:
        return False
    return str(st.st_mtime_ns) == mtime_ns and str(st.st_size) == size


@lru_cache(maxsize=1024)
def _imports(module: str, path: Path, mtime_ns: int, size: int) -> tuple[str, ...]:
    """Modules of ours imported anywhere in ``path`` (module level or inside functions, relative too);
    from the on-disk cache when this file (same path, mtime and size) was parsed before."""
    global _disk_dirty
    disk = _disk_cache()
    key = f"{module}|{path}|{mtime_ns}|{size}"
    if key in disk:
        return tuple(disk[key])
    found = _parse_imports(module, path)
    disk[key] = list(found)
    _disk_dirty = True
    return found


def _parse_imports(module: str, path: Path) -> tuple[str, ...]:
    tree = _parse(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            target = ".".join(p for p in (base, node.module or "") if p)
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
    return tuple(sorted(m for m in found if m == "arborag" or m.startswith("arborag.")))


def module_closure(modules: Iterable[str]) -> dict[str, Path]:
    """``modules`` and every module of ours they import, transitively, with their source files."""
    seen: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        found = _resolve(todo.pop())
        if found is None or found[0] in seen:
            continue
        name, path = found
        seen[name] = path
        st = path.stat()
        todo.extend(_imports(name, path, st.st_mtime_ns, st.st_size))
    _save_disk_cache()
    return dict(sorted(seen.items()))


def pipeline_fingerprint(*pipelines: Iterable[Stage]) -> str:
    """Hash of the source of every stage runner module of ``pipelines`` and of what they import of ours."""
    closure = module_closure(m for pipeline in pipelines for stage in pipeline for m in stage.modules)
    return hash_json([[name, path.read_text(encoding="utf-8")] for name, path in closure.items()])


def code_versions(*pipelines: Iterable[Stage]) -> str:
    """Hash of the declared ``code_version`` of every stage of ``pipelines`` (with its name); a stage
    that declares none counts with :func:`pipeline_fingerprint` of its own modules instead."""
    return hash_json([[stage.name, stage.code_version or f"source:{pipeline_fingerprint((stage,))}"]
                      for pipeline in pipelines for stage in pipeline])


class _StripDocstrings(ast.NodeTransformer):
    """Drops the docstring of every module, class and function (a lone string expression first in a body)."""

    def _strip(self, node: Any) -> Any:
        self.generic_visit(node)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        return node

    visit_Module = visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _strip


def normalized_source(source: str) -> str:
    """``source`` without comments, docstrings and formatting: the code that runs, as
    :func:`ast.unparse` writes it (the same for the same code whatever its layout)."""
    with _AST_LOCK:
        tree = ast.parse(source)
    return ast.unparse(_StripDocstrings().visit(tree))


def normalized_code(*pipelines: Iterable[Stage]) -> dict[str, str]:
    """Per module of the stages' closure, a hash of its :func:`normalized_source`: what changes
    when the code changes, and only then (comments, docstrings and layout do not count)."""
    closure = module_closure(m for pipeline in pipelines for stage in pipeline for m in stage.modules)
    return {name: hash_json(normalized_source(path.read_text(encoding="utf-8"))) for name, path in closure.items()}


