"""A stage is one declared unit; one generic runner runs any pipeline of them.

A pipeline is data: a tuple of :class:`Stage` entries. Each declares its runner (a function
``run_<stage>(ctx, **params) -> dict`` in ``tasks/stages/``, wrapped once as a module-level
Prefect task), what it **reads** and **writes** (corpus tables ``table:<name>``, the sources
``sources``, files staged under the build key ``staged:<file>``, the published snapshot
``snapshot``), which **config** keys shape it, the run inputs it takes (**params**) and when it
is **enabled** (a predicate over the config). From that alone:

- :func:`stage_key` derives the cache key: the stage name, the corpus, the content fingerprints
  of the tables it reads (a table it also writes is checked by its proof instead), the stats of
  the sources, the declared config values, its params and its declared ``code_version``;
- :func:`stage_done` decides whether a cached (or, without Prefect, a resumable) stage's outputs
  still hold: staged files exist, the snapshot is sealed, or a written table's fingerprint is
  still the one the stage reported (``proof`` overrides how it is computed);
- :func:`run_pipeline` runs the stages in order — a stage whose params are missing from the run
  is not part of it, a stage that is off runs only to empty the tables it wrote while on — and
  :func:`snapshot_files` names what ``publish`` seals (the ``snapshot`` files of the stages before it).

Lower level, kept for the evaluation stages: :func:`run_stage` runs one stage — as a Prefect task
cached on a key, or directly (``use_prefect=False``) — and trusts a cache hit only while
``done(summary)`` holds; :func:`record_run` appends the run to the ``runs`` table;
:func:`finish_run` is the common end of the build and update flows.

Code versions: a stage declares ``code_version``, the version of what its code produces (like
Dagster's ``code_version``). :func:`code_versions` hashes the declared versions of a pipeline;
the stage keys and the build key hold it, not the source text, so a comment, a docstring, a
refactor or an upgrade that leaves the output alone keeps the caches and the published tree, and
a change to a stage's output is made by bumping its version (docs/ARCHITECTURE.md, "Code
versions"). :func:`normalized_code` is the development check beside it: per module of a stage's
closure, a hash of its code without comments, docstrings and formatting.
:func:`pipeline_fingerprint` hashes the source of the runner modules and every module of ours
they import (at any depth, lazy imports included); it keys what declares no version (the
evaluation's retrieval).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from arborag.config import ArboragConfig
from arborag.flows.common import cache_key_from_stats, task_options, was_cached
from arborag.hashing import hash_json
from arborag.tasks.build.key import snapshot_id_for
from arborag.tasks.stage_context import StageContext, StageSummary, table_fingerprint

__all__ = [
    "SOURCES", "SNAPSHOT", "Stage", "code_versions", "declared_config", "describe_pipeline", "finish_run", "module_closure", "must_wait",
    "normalized_code", "normalized_source", "pipeline_fingerprint", "record_run", "run_pipeline", "run_stage", "snapshot_files", "stage_done", "stage_key", "staged", "table",
]

Done = Callable[[dict[str, Any] | None], bool]

#: What a stage may read or write (strings, so a pipeline prints as it is declared).
SOURCES = "sources"  # the discovered source files (keyed by their size and mtime)
SNAPSHOT = "snapshot"  # the published snapshot (written by publish; read by tree-update)


def table(name: str) -> str:
    """A working table of the corpus (``tables/<name>.parquet``)."""
    return f"table:{name}"


def staged(name: str) -> str:
    """A file or folder staged under the build key (``staging/<key>/<name>``)."""
    return f"staged:{name}"


def _always(_config: ArboragConfig) -> bool:
    return True


@dataclass(frozen=True)
class Stage:
    """One declared stage: ``task`` is a module-level Prefect task around the stage runner.

    ``reads``/``writes``: ``table:<name>``, ``sources``, ``staged:<file>``, ``snapshot``.
    ``config``: dotted config keys whose values key the stage (``"ingest"``, ``"context.llm"``).
    ``params``: the run inputs passed to the runner by name (``files``, ``strategy``, ``key``, ...);
    a stage whose params the run does not have is not part of that run. ``needs``: run inputs it
    needs without taking them. ``enabled``: when the config turns it on (off: it runs only to empty
    the tables it wrote while on). ``snapshot``: staged files of it that ``publish`` seals.
    ``proof(ctx, **params)``: the fingerprint of what it wrote, if not the written table's bytes.
    ``cached=False``: never reused across runs. ``on_cached``: a cache hit's summary from the cached one.
    ``beside=True``: without Prefect, the stage runs on a thread beside the stages after it, until
    one of them touches what it reads or writes (:func:`run_pipeline`); for stages whose work is
    mostly outside this process's GIL (a helper process, Rust, polars).
    ``code_version``: the version of what the stage's code produces; its cache key and the build
    key hold it instead of the source. Bump it when a change (to the runner or anything it calls)
    changes the stage's output. Empty: undeclared, the source of ``modules`` keys it instead.
    """

    name: str
    task: Any  # prefect Task; ``task.fn`` is ``run_<stage>(ctx, **params) -> dict``
    retries: int = 0
    outputs: tuple[str, ...] = ()  # legacy: staged files that prove it done (derived from ``writes`` when declared)
    resume: bool = False  # legacy: without Prefect, skip when the outputs exist (derived: every write is staged)
    code: tuple[str, ...] | None = None  # modules of the stage's code (default: the runner's module)
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    enabled: Callable[[ArboragConfig], bool] = _always
    snapshot: tuple[str, ...] = ()
    proof: Callable[..., str] | None = None
    cached: bool = True
    on_cached: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    describe: str = ""
    beside: bool = False
    code_version: str = ""

    @property
    def runner(self) -> Callable[..., dict[str, Any]]:
        return self.task.fn  # type: ignore[no-any-return]

    @property
    def modules(self) -> tuple[str, ...]:
        return self.code if self.code is not None else (str(self.runner.__module__),)

    @property
    def staged_outputs(self) -> tuple[str, ...]:
        """The staged files that prove the stage done (``writes`` of kind ``staged:``, else ``outputs``)."""
        declared = tuple(w.split(":", 1)[1] for w in self.writes if w.startswith("staged:"))
        return declared or self.outputs

    @property
    def resumable(self) -> bool:
        """Without Prefect, skip the stage when its outputs exist: every write is staged (or ``resume``)."""
        if self.writes:
            return all(w.startswith("staged:") for w in self.writes)
        return self.resume

    @property
    def tables_written(self) -> tuple[str, ...]:
        return tuple(w.split(":", 1)[1] for w in self.writes if w.startswith("table:"))

    @property
    def tables_read(self) -> tuple[str, ...]:
        return tuple(r.split(":", 1)[1] for r in self.reads if r.startswith("table:"))

    @property
    def keyed_by_build(self) -> bool:
        """Stages inside a content-addressed build take its ``key``: that key already holds their inputs."""
        return "key" in self.params


# ---------------------------------------------------------------------------------------------
# The generic runner: keys, proofs and skips derived from the declarations
# ---------------------------------------------------------------------------------------------
def declared_config(config: ArboragConfig, keys: Iterable[str]) -> dict[str, Any]:
    """The values of dotted config ``keys`` (``"context"`` -> the section, ``"context.llm"`` -> one field)."""
    out: dict[str, Any] = {}
    for key in keys:
        value: Any = config
        for part in key.split("."):
            value = getattr(value, part)
        out[key] = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    return out


def stage_key(ctx: StageContext, stage: Stage, inputs: dict[str, Any]) -> str:
    """The cache key of ``stage`` for this run's ``inputs``, from its declaration alone."""
    if not stage.cached:
        return hash_json([stage.name, ctx.run_id])
    if stage.keyed_by_build:
        # the build (or update) key already holds the leaves, the tree config and the code; the
        # Prefect record is then ``<stage>-<build key>``, which retention keeps while a kept
        # snapshot has that key (storage/snapshots._sweep_prefect)
        return str(inputs["key"])
    reads: list[Any] = []
    for name in stage.tables_read:
        if name not in stage.tables_written:  # a table it rewrites is checked by its proof instead
            reads.append([name, table_fingerprint(ctx.corpus.table_path(name))])
    if SOURCES in stage.reads:
        reads.append([SOURCES, cache_key_from_stats(inputs.get("files") or [])])
    params = {p: inputs.get(p) for p in stage.params if p != "files"}
    return hash_json([
        stage.name, str(ctx.corpus.root), reads, declared_config(ctx.config, stage.config), stage.enabled(ctx.config),
        params, code_versions((stage,)),
    ])


def _proof(ctx: StageContext, stage: Stage, inputs: dict[str, Any]) -> str | None:
    if stage.proof is not None:
        return stage.proof(ctx, **{p: inputs.get(p) for p in stage.params})
    written = stage.tables_written
    return table_fingerprint(ctx.corpus.table_path(written[0])) if written else None


def stage_done(ctx: StageContext, stage: Stage, inputs: dict[str, Any], summary: dict[str, Any] | None) -> bool:
    """Do the outputs ``stage`` declares still hold? (``summary``: a cached run's; None: resuming without Prefect)."""
    if SNAPSHOT in stage.writes:
        return (ctx.corpus.snapshots_dir / snapshot_id_for(inputs["key"])).is_dir()
    if stage.staged_outputs:
        return all((ctx.staging_dir(inputs["key"]) / name).exists() for name in stage.staged_outputs)
    if stage.tables_written or stage.proof is not None:
        return summary is not None and summary.get("fingerprint") == _proof(ctx, stage, inputs)
    return False


def snapshot_files(pipeline: Sequence[Stage]) -> list[str]:
    """The staged files a snapshot of ``pipeline`` holds: the ``snapshot`` declarations of its stages, in order."""
    return [name for stage in pipeline for name in stage.snapshot]


def _wanted(ctx: StageContext, stage: Stage, inputs: dict[str, Any]) -> bool:
    """Is ``stage`` part of this run? Its params and needs are given, and it is on — or off but
    the tables it wrote while on are still there (it runs to empty them)."""
    if any(inputs.get(p) is None for p in (*stage.params, *stage.needs)):
        return False
    return stage.enabled(ctx.config) or any(ctx.corpus.table_path(t).exists() for t in stage.tables_written)


def run_pipeline(ctx: StageContext, pipeline: Sequence[Stage], *, use_prefect: bool, out: dict[str, Any], **inputs: Any) -> None:
    """Run the stages of ``pipeline`` that are part of this run, in order, into ``out``.

    ``inputs`` are the run's inputs (``files``, ``strategy``, ``key``, ``prune``, ``dry_run``, ...);
    ``snapshot_files`` is added from the declarations. A cached stage's summary is its cached
    one (``written: False``, or ``on_cached``), which also stands for its counts in the run record
    (a stage that ran: its summary's ``counts()``).

    Without Prefect a ``beside`` stage runs on a thread while the stages after it run here; it is
    joined before the first later stage that reads what it writes, writes what it reads or writes,
    or touches the snapshot (``publish``), and at the end. The outputs are the ones the stages
    write in order: no stage reads a file before the stage writing it is joined. An error of a
    stage beside is raised at its join (after the stages that ran meanwhile); an error here waits
    for the threads, then is raised.
    """
    inputs = {**inputs, "snapshot_files": snapshot_files(pipeline)}
    pending: list[_Beside] = []
    try:
        for stage in pipeline:
            if not _wanted(ctx, stage, inputs):
                continue
            for waiting in [p for p in pending if must_wait(p.stage, stage)]:
                pending.remove(waiting)
                _record(ctx, waiting.stage, *waiting.join(), out)
            call = functools.partial(
                run_stage, ctx, stage, use_prefect=use_prefect, cache_key=stage_key(ctx, stage, inputs),
                done=functools.partial(stage_done, ctx, stage, inputs), **{p: inputs[p] for p in stage.params},
            )
            if stage.beside and not use_prefect:
                pending.append(_Beside(stage, call))
                continue
            _record(ctx, stage, *call(), out)
        while pending:
            waiting = pending.pop(0)
            _record(ctx, waiting.stage, *waiting.join(), out)
    finally:
        for waiting in pending:  # an error here: the threads finish before it is raised
            waiting.wait()
            if waiting.error is not None:
                logging.getLogger(__name__).warning("stage %s (run beside) failed too: %r", waiting.stage.name, waiting.error)


def _record(ctx: StageContext, stage: Stage, summary: Mapping[str, Any], cached: bool, out: dict[str, Any]) -> None:
    """``out[stage]`` (and ``out["cached"]``) from a stage's result, and its counts in the run record:
    a :class:`StageSummary`'s ``counts()`` (none when empty); a cached plain summary's items."""
    if cached and stage.tables_written:
        summary = stage.on_cached(summary) if stage.on_cached else _not_written(summary)
    out[stage.name] = summary.report() if isinstance(summary, StageSummary) else summary
    if isinstance(summary, StageSummary):
        if (not cached or stage.tables_written) and summary.counts():
            ctx.counters.stages[stage.name] = summary.counts()
    elif cached and stage.tables_written:
        ctx.counters.stages[stage.name] = {k: v for k, v in summary.items() if k not in ("failures", "warning_list")}
    if cached:
        out["cached"].append(stage.name)


def _not_written(summary: Mapping[str, Any]) -> Mapping[str, Any]:
    """A cache hit's summary: it wrote nothing this run."""
    if isinstance(summary, StageSummary) and hasattr(summary, "written"):
        return dataclasses.replace(summary, written=False)  # type: ignore[type-var]
    return {**summary, "written": False}


def must_wait(earlier: Stage, later: Stage) -> bool:
    """Must ``later`` wait for ``earlier`` to finish, when ``earlier`` runs beside it? It reads what
    ``earlier`` writes, writes what ``earlier`` reads or writes, or touches the snapshot."""
    mine, reads, theirs = set(earlier.writes), set(earlier.reads), set(later.writes)
    return bool(mine & set(later.reads) or theirs & (mine | reads) or SNAPSHOT in theirs | set(later.reads))


class _Beside:
    """A ``beside`` stage running on its own thread (:func:`run_pipeline`)."""

    def __init__(self, stage: Stage, call: Callable[[], tuple[dict[str, Any], bool]]) -> None:
        self.stage = stage
        self._result: tuple[dict[str, Any], bool] | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,), name=f"arborag-stage-{stage.name}", daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], tuple[dict[str, Any], bool]]) -> None:
        try:
            self._result = call()
        except BaseException as exc:  # noqa: BLE001 - raised in the pipeline's thread at the join
            self.error = exc

    def wait(self) -> None:
        self._thread.join()

    def join(self) -> tuple[dict[str, Any], bool]:
        """The stage's ``(summary, cached)``, or its error raised here."""
        self._thread.join()
        if self.error is not None:
            raise self.error
        assert self._result is not None
        return self._result


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
            if stage.resumable and done is not None and done(None):
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
    return state.result(), was_cached(state)


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


def describe_pipeline(pipeline: Sequence[Stage], config: ArboragConfig) -> list[dict[str, Any]]:
    """One JSON row per stage of ``pipeline``, from its declaration: name, what it does, reads,
    writes, config keys (``build key`` for stages keyed by the build), run inputs, whether
    ``config`` turns it on, the snapshot files it contributes, its retries, whether it runs
    beside the stages after it, and its runner."""
    rows = []
    for stage in pipeline:
        rows.append({
            "stage": stage.name,
            "does": stage.describe,
            "reads": list(stage.reads),
            "writes": list(stage.writes),
            "config": ["(build key)"] if stage.keyed_by_build else list(stage.config),
            "inputs": list(stage.params) + [f"({n})" for n in stage.needs],
            "enabled": bool(stage.enabled(config)),
            "snapshot": list(stage.snapshot),
            "retries": stage.retries,
            "cached": stage.cached,
            "beside": stage.beside,
            "code_version": stage.code_version,
            "runner": f"{stage.runner.__module__}.{stage.runner.__name__}",
        })
    return rows
