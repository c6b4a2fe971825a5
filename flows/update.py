"""The update flow: bring a built corpus in line with its sources without rebuilding the tree.

Orchestration only. Inside the corpus writer lock:

1. ``plan`` (:func:`arborag.tasks.stages.plan.run_update_documents`): read the sources into the
   ``documents`` table (ingest machinery), diff by uri and content hash — added, changed,
   deleted, unchanged, failed — and prune deleted uris (``prune``; ``ingest`` stays additive).
   ``dry_run`` stops here with the plan and the estimated embedding and summary work. A pruning
   update that would delete more documents than ``max_delete`` allows (default: half of those held)
   stops here too, with :class:`~arborag.tasks.stages.plan.DeletesRefused`: nothing is written
   and no run is recorded.
2. ``sections``, ``context``, ``segment`` (the same stage objects as the ingest flow's, run by
   the same :func:`~arborag.flows.stage.run_pipeline`, in the same call as the plan): the
   chunks (and headers) of the documents now held.
3. The branch (:data:`~arborag.flows.pipelines.UPDATE_BRANCH`, declared beside the stages): its
   predicate :func:`arborag.tasks.stages.plan.decide` (reading the published ``info.json``) names
   the route: nothing changed → ``noop``; no published tree, a tree without fitted clusters, a
   changed tree config, or drift past ``update.max_drift`` → ``full``, a rebuild
   (:func:`arborag.flows.build.build_tree`, as a build), saying why; otherwise
4. ``incremental``: :data:`UPDATE_PIPELINE` = (links, embed, tree-update, vectors, sparse, publish), the build's
   stage objects but for tree-update (:mod:`arborag.flows.pipelines`): the leaves' links (they need
   no vectors: first, while a cold run's embedding worker is still loading), the leaves' vectors
   (the embedding cache holds every unchanged one), the local tree update
   (:func:`arborag.tasks.stages.tree_update.run_tree_update`: only clusters whose membership changed
   are re-summarized), then the same sparse, vector and publish stages as a build (the vector
   table last but one: a low-priority helper process imports lancedb meanwhile, :func:`_warm_vectors`)
   — the new snapshot is published by the same atomic manifest switch.

The update key is ``hash("update", previous snapshot, build key of the leaves)``: a rerun after a
crash resumes at the first stage whose staged outputs are missing.

Entry points: :func:`update` (module-level Prefect flow, JSON parameters; ``flows/update.py:update``)
and :func:`run_update` (Python: CLI, tests, benchmarks, the scheduler).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from arborag.config import ArboragConfig, load_config
from arborag import phases
from arborag.env import offline_env
from arborag.errors import IngestError
from arborag.flows.build import build_tree
from arborag.flows.common import config_overrides, current_flow_run_id, new_run_id, plain_json, warm_imports
from arborag.flows.ingest import count_skipped, discover
from arborag.flows.lazy import flow_getattr, lazy_flow
from arborag.flows.noop import quick_noop, remember
from arborag.flows.pipelines import PLAN, PUBLISH, TREE_UPDATE, UPDATE_BRANCH, UPDATE_PIPELINE
from arborag.flows.fingerprints import code_versions
from arborag.flows.runs import finish_run
from arborag.flows.stage import run_pipeline
from arborag.hashing import hash_json
from arborag.storage.corpus import Corpus
from arborag.storage.vectors import LANCEDB_IMPORT
from arborag.tasks.build.key import build_key
from arborag.tasks.build.leaves import leaves_for
from arborag.tasks.stage_context import StageContext
from arborag.tasks.stages.plan import DeleteLimit, DeletesRefused


offline_env()  # the offline settings (HF, numba's cache, Prefect's) before anything reads them

__all__ = ["FLOW_NAME", "UPDATE_BRANCH", "UPDATE_PIPELINE", "run_update", "update", "update_pipeline"]  # noqa: F822 - the flow objects come from the module __getattr__ (flows/lazy.py)

FLOW_NAME = "arborag-update"


@contextlib.contextmanager
def _writer_lock(ctx: StageContext, wait: bool) -> Iterator[None]:
    """The corpus writer lock (one writer at a time; re-entrant in this process; ``wait=False``:
    :class:`~arborag.errors.CorpusLockedError` at once when another writer holds it)."""
    from arborag.storage.lock import corpus_lock

    with corpus_lock(ctx.corpus.root, wait=wait, purpose="update"):
        yield


#: What the vectors stage imports (lancedb: 1-2 s of GIL-bound bytecode, half that through
#: :mod:`arborag.storage.lancedb_import`), loaded once the plan and the
#: segmenting are done: by a helper process in an incremental update (:func:`_warm_vectors`), on a
#: thread here for a full rebuild (:func:`~arborag.flows.common.warm_imports`), whose embed stage
#: leaves this process idle while it waits for the worker.
_VECTOR_IMPORTS = (LANCEDB_IMPORT,)  # lancedb, its REST client's API modules left out


def _warm_vectors() -> None:
    """An incremental update's vector imports: in a low-priority helper process when this process
    starts them (:func:`arborag.embed.worker.preimport`; the vectors stage then writes the table
    there: tasks/stages/vectors.py) — on a thread here they take the GIL from the stages (a cold
    +1% update's links stage 0.31 s beside the helper, 1.63 s beside the thread:
    benchmarks/results/update_start.md) — else on a thread here."""
    from arborag.embed import worker as embed_worker

    if embed_worker.preimport(*_VECTOR_IMPORTS) is None:
        warm_imports(*_VECTOR_IMPORTS)


def update_pipeline(
    ctx: StageContext, files: list[str], *, prune: bool, use_prefect: bool, dry_run: bool = False, lock_wait: bool = True,
    max_delete: str | int | None = None,
) -> dict[str, Any]:
    """Run the update over discovered ``files``; record the run (not for a dry run, nor for one
    the delete guard refused: ``max_delete``, see :class:`~arborag.tasks.stages.plan.DeleteLimit`)."""
    ctx.resources["delete_limit"] = DeleteLimit.parse(max_delete)
    refused = False
    started = datetime.now(timezone.utc)
    before, age = phases.snapshot(), phases.process_age()
    out: dict[str, Any] = {"corpus": str(ctx.corpus.root), "run_id": ctx.run_id, "cached": [], "dry_run": dry_run}
    status, message = "ok", ""
    lock = contextlib.nullcontext() if dry_run else _writer_lock(ctx, lock_wait)
    try:
        with lock:
            strategy = ctx.config.segment.strategy
            # the stages before the branch; a dry run has no strategy: the plan alone runs
            run_pipeline(ctx, UPDATE_BRANCH.before, use_prefect=use_prefect, out=out, files=files, prune=prune, dry_run=dry_run,
                         strategy=None if dry_run else strategy)
            plan = out[PLAN.name]
            if dry_run:
                return out
            leaves = ctx.shared("leaves", lambda: leaves_for(ctx.corpus.read("chunks"), strategy, scope=ctx.config.tree.scope))
            if leaves.num_rows == 0:
                raise IngestError(str(ctx.corpus.root), "no chunks left to build a tree from: the sources hold no readable, non-empty document")
            mode, why = UPDATE_BRANCH.choose(ctx, leaves)
            route = UPDATE_BRANCH.route(mode)
            out["mode"], out["reason"] = mode, why
            out["full_rebuild"] = mode == "full"
            out["noop"] = not route
            if not route:
                out["snapshot"] = (ctx.corpus.manifest() or {}).get("snapshot")
            elif mode == "full":  # the build's tree, under the build key (a settled snapshot of it is reused)
                warm_imports(*_VECTOR_IMPORTS)
                build_tree(ctx, leaves, use_prefect=use_prefect, out=out, pipeline=route)
            else:  # under the update key: the published snapshot and the leaves (tree-update reads that snapshot)
                prev = (ctx.corpus.manifest() or {})["snapshot"]
                key = out["update_key"] = hash_json(["update", prev, build_key(leaves, ctx.config, code_versions(route))])
                _warm_vectors()
                run_pipeline(ctx, route, use_prefect=use_prefect, out=out, key=key)
                out["snapshot"] = out[PUBLISH.name]["snapshot"]
            message = why
            failed = int(plan.get("failed", 0) or 0)
            # failures this run met that the documents table did not already record (same uri, same reason)
            out["new_failures"] = int(plan.get("new_failures", failed) or 0)
            if failed:
                status = "partial"
                message = f"{why}; {failed} source(s) could not be read (their earlier documents are kept)"
            else:  # the next update of these sources can tell "nothing changed" from file stats (flows/noop.py)
                remember(ctx.corpus, ctx.config, files, prune, out.get("snapshot"))
        return out
    except BaseException as exc:
        status, message = "failed", f"{type(exc).__name__}: {exc}"
        refused = isinstance(exc, DeletesRefused)
        raise
    finally:
        out["tokens"] = {"in": ctx.counters.tokens_in, "out": ctx.counters.tokens_out}
        plan_counts = {k: v for k, v in (out.get(PLAN.name) or {}).items() if k in ("added", "changed", "deleted", "unchanged", "failed", "new_docs", "gone_docs")}
        tree = ctx.counters.stages.get(TREE_UPDATE.name) or {}
        counts = {
            **plan_counts, "mode": out.get("mode"), "full_rebuild": bool(out.get("full_rebuild")),
            "reason": out.get("reason"), "clusters_touched": tree.get("clusters_touched", {}),
            "summaries_rewritten": ctx.counters.summaries, "tokens_in": ctx.counters.tokens_in, "tokens_out": ctx.counters.tokens_out,
            "phases": phases.since(before), "process_age_at_start": age,
        }
        finish_run(ctx, "update", out, started=started, status=status, message=message, record=not dry_run and not refused, counts=counts)


def _update(
    corpus_dir: str,
    sources: list[str],
    config_path: str | None = None,
    config_overrides: dict[str, dict[str, Any]] | None = None,
    prune: bool | None = None,
    dry_run: bool = False,
    progress: bool = False,
    lock_wait: bool = True,
    max_delete: str | None = None,
) -> dict[str, Any]:
    """Update ``corpus_dir`` to hold exactly what ``sources`` hold now (``prune=False``: only add and
    change; None: ``update.prune`` of the config, on by default). ``max_delete``: the delete
    guard's limit ("N", "N%", "all"; None: half of the documents held).

    The config is ``load_config(config_path, overrides=config_overrides)`` in the process running
    the flow. Returns the run summary (``plan``, ``mode`` = noop | incremental | full, ``reason``,
    ``snapshot``, per-stage summaries, ``calls``, ``status``).
    """
    config = load_config(config_path, overrides=config_overrides)
    run_id = current_flow_run_id() or new_run_id()
    if not dry_run:  # a scheduled run that finds nothing changed (file stats): no plan, no segmenting
        quick = quick_noop(sources, corpus_dir, config, prune=prune, run_id=run_id)
        if quick is not None:
            return quick
    ctx = StageContext(Corpus(corpus_dir).ensure(), config, run_id, progress=progress)
    files = discover(ctx, sources)
    return update_pipeline(ctx, files, prune=config.update.prune if prune is None else prune, use_prefect=True, dry_run=dry_run, lock_wait=lock_wait,
                           max_delete=max_delete)


_update_flow = lazy_flow(_update, attr="update", name=FLOW_NAME)
__getattr__ = flow_getattr(__name__, "update", _update_flow)


def _files(ctx: StageContext, sources: list[str]) -> list[str]:
    """The files of ``sources``: what the quick no-op check (:func:`~arborag.flows.noop.quick_noop`)
    found a moment ago in this process when it asked (one walk of the sources per update, not
    two), else a fresh :func:`~arborag.flows.ingest.discover`."""
    from arborag.flows.noop import discovered

    found = discovered(sources, ctx.corpus.root, ctx.config)
    if found is None:
        return discover(ctx, sources)
    files, skipped = found
    count_skipped(ctx, skipped)  # as discover() does
    return files


def run_update(
    sources: Sequence[str | Path],
    corpus_dir: str | Path,
    config: ArboragConfig,
    *,
    prune: bool | None = None,
    dry_run: bool = False,
    use_prefect: bool = False,
    progress: bool = False,
    lock_wait: bool = True,
    noop_checked: bool = False,
    max_delete: str | int | None = None,
) -> dict[str, Any]:
    """Update ``corpus_dir`` from ``sources``; returns the run summary (see :func:`update`).

    ``noop_checked``: the caller asked :func:`~arborag.flows.noop.quick_noop` already (the CLI
    does, before starting the model), so it is not asked again (a walk of every source file).

    ``use_prefect=False`` runs the same pipeline without an orchestrator; otherwise the
    :func:`update` flow runs in-process with ``config`` as JSON overrides. Sources are
    discovered here first (a missing one fails before anything is read or locked). The update
    waits for the corpus writer lock (``lock_wait=False``: :class:`~arborag.errors.CorpusLockedError`
    at once); a dry run takes no lock.

    ``max_delete`` bounds how many documents a pruning update may delete ("N", "N%" of the documents held,
    "all"; None: 50%); past it :class:`~arborag.tasks.stages.plan.DeletesRefused` is raised
    (its ``plan`` says what would have happened) and nothing is written.
    """
    t0 = time.perf_counter()
    if not sources:
        raise IngestError(str(corpus_dir), "give the sources the corpus should mirror: arborag update SOURCE... --corpus DIR")
    if not use_prefect and not dry_run and not noop_checked:  # nothing changed since the last run, told from file stats (flows/noop.py)
        quick = quick_noop([str(s) for s in sources], corpus_dir, config, prune=prune)
        if quick is not None:
            quick["seconds"] = round(time.perf_counter() - t0, 2)
            return quick
    ctx = StageContext(Corpus(corpus_dir).ensure(), config, new_run_id(), progress=progress)
    files = _files(ctx, [str(s) for s in sources]) if not use_prefect else discover(ctx, [str(s) for s in sources])
    prune = config.update.prune if prune is None else prune
    if not use_prefect:
        out = update_pipeline(ctx, files, prune=prune, use_prefect=False, dry_run=dry_run, lock_wait=lock_wait, max_delete=max_delete)
    else:
        out = plain_json(_update_flow()(
            corpus_dir=str(ctx.corpus.root), sources=[str(s) for s in sources], config_overrides=config_overrides(config),
            prune=prune, dry_run=dry_run, progress=progress, lock_wait=lock_wait,
            max_delete=None if max_delete is None else str(max_delete),
        ))
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out
