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
``done(summary)`` holds. Run records are :mod:`arborag.flows.runs`; the code versions and
fingerprints in the keys are :mod:`arborag.flows.fingerprints`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from arborag.config import ArboragConfig
from arborag.flows.common import cache_key_from_stats, task_options, was_cached
from arborag.flows.fingerprints import code_versions
from arborag.hashing import hash_json
from arborag.storage.snapshots.sweeps import build_record_key
from arborag.tasks.build.key import snapshot_id_for
from arborag.tasks.stage_context import StageContext, StageSummary, table_fingerprint

__all__ = [
    "SOURCES", "SNAPSHOT", "Branch", "Stage", "declared_config", "describe_branch", "describe_pipeline", "must_wait", "run_pipeline", "run_stage", "snapshot_files",
    "stage_done", "stage_key", "staged", "table",
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
    task: Any  # prefect Task; ``task.fn`` is ``run_<stage>(ctx, **params)``, returning its summary
    retries: int = 0
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
    def runner(self) -> Callable[..., Any]:
        return self.task.fn  # type: ignore[no-any-return]

    @property
    def modules(self) -> tuple[str, ...]:
        return self.code if self.code is not None else (str(self.runner.__module__),)

    @property
    def staged_outputs(self) -> tuple[str, ...]:
        """The staged files that prove the stage done (its ``writes`` of kind ``staged:``)."""
        return tuple(w.split(":", 1)[1] for w in self.writes if w.startswith("staged:"))

    @property
    def resumable(self) -> bool:
        """Without Prefect, skip the stage when its outputs exist: it writes, and every write is staged."""
        return bool(self.writes) and all(w.startswith("staged:") for w in self.writes)

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


@dataclass(frozen=True)
class Branch:
    """A pipeline that forks, declared as data: every run takes the stages ``before``; then the
    named predicate ``choose(ctx, leaves) -> (route, why)`` picks one of ``routes`` by name
    (``(name, stages)`` pairs, in the order they print); a name without a route runs nothing more
    (``noop``: nothing changed)."""

    name: str
    before: tuple[Stage, ...]
    choose: Callable[..., tuple[str, str]]
    routes: tuple[tuple[str, tuple[Stage, ...]], ...]
    describe: str = ""

    def route(self, name: str) -> tuple[Stage, ...]:
        """The stages of route ``name`` (none for a name without a route)."""
        return dict(self.routes).get(name, ())

    @property
    def stages(self) -> tuple[Stage, ...]:
        """Every stage the branch may run, each once, in order: ``before``, then the routes'."""
        seen: dict[str, Stage] = {}
        for stage in (*self.before, *(s for _, route in self.routes for s in route)):
            seen.setdefault(stage.name, stage)
        return tuple(seen.values())


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
        # Prefect record is then ``<stage>@<build key>`` (_record_key), which gc keeps while a
        # kept snapshot has that key
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
    runs again with ``refresh_cache``. Without Prefect a resumable stage whose ``done(None)``
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


def _record_key(stage: Stage, key: str) -> str:
    """The Prefect record name of ``stage`` cached on ``key``: ``<stage>@<build key>`` for a stage
    keyed by the build (gc keeps it while a kept snapshot has that key:
    :func:`arborag.storage.snapshots.build_record_key`), else ``<stage>-<key>``."""
    return build_record_key(stage.name, key) if stage.keyed_by_build else f"{stage.name}-{key}"


def _prefect_call(ctx: StageContext, stage: Stage, key: str, refresh: bool, params: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    opts = task_options(ctx.corpus, retries=stage.retries, cache_key=_record_key(stage, key), refresh_cache=refresh)
    state = stage.task.with_options(name=stage.name, **opts)(ctx, **params, return_state=True)
    return state.result(), was_cached(state)


def describe_branch(branch: Branch, config: ArboragConfig) -> list[dict[str, Any]]:
    """The rows of :func:`describe_pipeline` for ``branch``: its stages ``before`` (``route``
    empty), then each route's stages with ``route`` naming it; the chooser in ``does`` of none."""
    rows = [{**row, "route": ""} for row in describe_pipeline(branch.before, config)]
    for name, stages in branch.routes:
        rows += [{**row, "route": name} for row in describe_pipeline(stages, config)]
    return rows


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
