"""The one cached-stage wrapper, the one run recorder, and code fingerprints derived from a pipeline.

A pipeline is data: a tuple of :class:`Stage` entries, each naming its module-level Prefect task
(whose ``.fn`` is the stage runner in ``tasks/``), its retries and the outputs that prove it done.

- :func:`run_stage` runs one stage — as a Prefect task cached on a content-hash key, or directly
  (``use_prefect=False``) — and trusts a cache hit only while the stage's outputs still exist
  (``done(summary)``); otherwise it runs the stage again and refreshes the record. Only I/O
  errors (:data:`arborag.flows.common.RETRY_ON`) are retried.
- :func:`record_run` appends the run to the ``runs`` table; :func:`finish_run` is the common
  end of the build and update flows (counters into the result, then :func:`record_run`).
- :func:`pipeline_fingerprint` hashes the source of the pipeline's runner modules and every
  module of ours they import (at any depth, lazy imports included), so a cache dies with the
  code it ran and no module list is kept by hand.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from arborag.hashing import hash_json
from arborag.flows.common import task_options, was_cached
from arborag.tasks.stage_context import StageContext

__all__ = ["Stage", "finish_run", "module_closure", "pipeline_fingerprint", "record_run", "run_stage"]

Done = Callable[[dict[str, Any] | None], bool]


@dataclass(frozen=True)
class Stage:
    """One entry of a pipeline: ``task`` is a module-level Prefect task around the stage runner."""

    name: str
    task: Any  # prefect Task; ``task.fn`` is ``run_<stage>(ctx, **params) -> dict``
    retries: int = 0
    outputs: tuple[str, ...] = ()  # staged files/folders (under the build's staging dir) that prove it done
    resume: bool = False  # without Prefect: skip the stage when its outputs already exist
    code: tuple[str, ...] | None = None  # modules whose source keys the stage (default: the runner's module)

    @property
    def runner(self) -> Callable[..., dict[str, Any]]:
        return self.task.fn  # type: ignore[no-any-return]

    @property
    def modules(self) -> tuple[str, ...]:
        return self.code if self.code is not None else (str(self.runner.__module__),)


def run_stage(
    ctx: StageContext,
    stage: Stage,
    *,
    use_prefect: bool,
    cache_key: str,
    done: Done | None = None,
    **params: Any,
) -> tuple[dict[str, Any], bool]:
    """Run ``stage`` with ``params``; return ``(summary, cached)``.

    Under Prefect the task is cached on ``cache_key`` (results as JSON under the corpus's
    ``prefect/results``); a hit counts only while ``done(summary)`` holds, otherwise the stage
    runs again with ``refresh_cache``. Without Prefect a ``resume`` stage whose ``done(None)``
    holds is skipped (a retry after a failure resumes there); any other stage runs.
    """
    t0 = time.perf_counter()
    try:
        if not use_prefect:
            if stage.resume and done is not None and done(None):
                return {"stage": stage.name}, True
            return stage.runner(ctx, **params), False
        summary, cached = _prefect_call(ctx, stage, cache_key, False, params)
        if cached and done is not None and not done(summary):
            summary, cached = _prefect_call(ctx, stage, cache_key, True, params)
        return summary, cached
    finally:
        ctx.counters.seconds[stage.name] = round(ctx.counters.seconds.get(stage.name, 0.0) + time.perf_counter() - t0, 3)


def _prefect_call(ctx: StageContext, stage: Stage, key: str, refresh: bool, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    opts = task_options(ctx.corpus, retries=stage.retries, cache_key=f"{stage.name}-{key}", refresh_cache=refresh)
    state = stage.task.with_options(name=stage.name, **opts)(ctx, **params, return_state=True)
    return dict(state.result()), was_cached(state)


def record_run(
    ctx: StageContext,
    flow: str,
    *,
    started: datetime,
    finished: datetime,
    status: str,
    message: str | None,
    counts: dict[str, Any],
) -> None:
    """Append this run to the corpus's ``runs`` table (counts as JSON, tokens from the counters)."""
    ctx.corpus.ensure().append_run(
        {
            "run_id": ctx.run_id,
            "flow": flow,
            "config_hash": ctx.config.config_hash(),
            "started_at": started,
            "finished_at": finished,
            "status": status,
            "counts": json.dumps(counts, sort_keys=True, default=str),
            "tokens_in": ctx.counters.tokens_in,
            "tokens_out": ctx.counters.tokens_out,
            "message": message or None,
        }
    )


def finish_run(
    ctx: StageContext,
    flow: str,
    out: dict[str, Any],
    *,
    started: datetime,
    status: str,
    message: str | None,
    record: bool = True,
    counts: dict[str, Any] | None = None,
) -> None:
    """The common end of a tree flow (build, update): stamp ``out`` with the counters
    (``calls``, ``status``, ``stage_seconds``) and, unless ``record`` is off (a dry run),
    append the run — stage counts, ``counts`` and the counters — to the ``runs`` table."""
    out["calls"] = ctx.counters.as_dict()
    out["status"] = status
    out["stage_seconds"] = dict(ctx.counters.seconds)
    if record:
        merged = {**ctx.counters.stages, **(counts or {}), "calls": out["calls"], "cached": out.get("cached", []),
                  "seconds": out["stage_seconds"]}
        record_run(ctx, flow, started=started, finished=datetime.now(timezone.utc), status=status, message=message, counts=merged)


# ---------------------------------------------------------------------------------------------
# Code fingerprints
# ---------------------------------------------------------------------------------------------
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


@lru_cache(maxsize=1024)
def _imports(module: str, path: Path, mtime_ns: int, size: int) -> tuple[str, ...]:
    """Modules of ours imported anywhere in ``path`` (module level or inside functions, relative too)."""
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
    return dict(sorted(seen.items()))


def pipeline_fingerprint(*pipelines: Iterable[Stage]) -> str:
    """Hash of the source of every stage runner module of ``pipelines`` and of what they import of ours."""
    closure = module_closure(m for pipeline in pipelines for stage in pipeline for m in stage.modules)
    return hash_json([[name, path.read_text(encoding="utf-8")] for name, path in closure.items()])
