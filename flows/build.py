"""The build flow: ingest → segment → embed → tree (cluster → summarize → embed per level)
→ vectors → sparse → publish.

Orchestration only: which stage, in what order, with what cache key. The order is data —
:data:`BUILD_PIPELINE` = :data:`INGEST_PIPELINE` + :data:`TREE_PIPELINE`, declared in
:mod:`arborag.flows.pipelines` and run by the generic :func:`arborag.flows.stage.run_pipeline` —
and each entry's module-level task calls a stage runner in ``tasks/stages/`` (``embed``,
``tree``, ``vectors``, ``sparse``, ``publish``), which reads its inputs from the corpus, writes
its outputs there and returns a small summary.

The build is content-addressed: ``build_key = hash(leaf chunk ids + headers, embed, cluster,
summarize, tree and sparse config, the declared code versions of TREE_PIPELINE's stages)``
(:func:`arborag.tasks.build.key.build_key`, :func:`arborag.flows.fingerprints.code_versions`): editing a
comment or upgrading arborag keeps the tree unless a stage's version was bumped. A build whose
key equals the published snapshot's is a no-op — no embedding, no summarizing — unless that snapshot holds LLM summaries
that fell back to extractive text: then it is not final, and the build runs again under
``hash(key, that snapshot)`` so the LLM is asked again for those clusters (:func:`_settle`). Under Prefect every tree stage is a task
cached on a key derived from its declaration and the build key, and trusted only while its staged outputs exist; without
Prefect a stage whose staged outputs exist is skipped — so a build that failed at ``sparse``
(say, an unreachable Elasticsearch) resumes at ``sparse`` either way. A build that runs and
finds its result content-identical to the published snapshot publishes nothing (the publish
stage, :func:`arborag.tasks.stages.publish.run_publish`): the published snapshot stays, recorded
as the result of this key, and the run reports a no-op.

The incremental update's ``UPDATE_PIPELINE`` is another tuple of the same
:class:`~arborag.flows.stage.Stage` objects; when it falls back to a full rebuild it calls
:func:`build_tree` as a build does.

Entry points: :func:`build` (the module-level Prefect flow; JSON parameters only; a worker in
another process can run it: ``flows/build.py:build``) and :func:`run_build` (Python: CLI, tests,
benchmarks; ``use_prefect=False`` runs the same pipeline directly).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from arborag.config import ArboragConfig, load_config
from arborag import phases
from arborag.env import offline_env
from arborag.errors import ConfigError, IngestError
from arborag.hashing import hash_json
from arborag.flows.common import RUNNERS, config_overrides, current_flow_run_id, dask_task_runner, install_fanout, new_run_id, plain_json, warm_imports
from arborag.flows.ingest import discover
from arborag.flows.lazy import flow_getattr, lazy_flow
from arborag.flows.noop import remember
from arborag.flows.pipelines import BUILD_PIPELINE, INGEST, INGEST_PIPELINE, PUBLISH, TREE_PIPELINE
from arborag.flows.fingerprints import code_versions
from arborag.flows.runs import finish_run
from arborag.flows.stage import Stage, run_pipeline
from arborag.storage.corpus import Corpus
from arborag.storage.lock import corpus_lock
from arborag.storage.vectors import LANCEDB_IMPORT
from arborag.tasks.build.cost import estimate_cost
from arborag.tasks.build.key import build_key, snapshot_id_for
from arborag.tasks.build.leaves import leaves_for
from arborag.tasks.stage_context import StageContext


offline_env()  # the offline settings (HF, numba's cache, Prefect's) before anything reads them

__all__ = ["BUILD_PIPELINE", "FLOW_NAME", "TREE_PIPELINE", "build", "build_pipeline", "build_tree", "run_build"]  # noqa: F822 - the flow objects come from the module __getattr__ (flows/lazy.py)

FLOW_NAME = "arborag-build"


def _fallbacks_in(ctx: StageContext, snap: str, *, published: bool) -> int:
    """How many summaries of snapshot ``snap`` are the extractive fallback (its ``info.json``)."""
    folder = ctx.corpus.published_dir() if published else ctx.corpus.snapshots_dir / snap
    path = Path(folder) / "info.json"
    return int(json.loads(path.read_text()).get("fallbacks", 0) or 0) if path.is_file() else 0


def _settle(ctx: StageContext, key: str, out: dict[str, Any]) -> tuple[str, tuple[str, str] | None]:
    """The key to build under and, when nothing needs building, ``(snapshot, message)`` to reuse.

    A snapshot of ``key`` (published, or built before, e.g. the config was switched back) is
    reused — unless some of its summaries are the extractive fallback of a failed LLM call: such a
    snapshot is not final. The build then runs again under ``hash(key, that snapshot)``: the LLM
    cache answers every summary that succeeded, so only the clusters that fell back are asked
    again (``out["retry_of"]`` names the snapshot). A retry that succeeds is reused from then on;
    one that still falls back is retried by the next build in turn.
    """
    man = ctx.corpus.manifest()
    k = key
    for _ in range(1000):  # every step names a new key; a cycle would need a hash collision
        snap = snapshot_id_for(k)
        published = man is not None and man.get("build_key") == k and (ctx.corpus.remote or (ctx.corpus.snapshots_dir / man["snapshot"]).is_dir())
        if not published and not (ctx.corpus.snapshots_dir / snap).is_dir():
            return k, None
        current = man["snapshot"] if published and man is not None else snap
        fallbacks = _fallbacks_in(ctx, current, published=published)
        if not fallbacks:
            if published:
                return k, (current, "unchanged: the published snapshot already matches the inputs and config")
            info = json.loads((ctx.corpus.snapshots_dir / snap / "info.json").read_text())
            ctx.corpus.publish_existing(snap, info)
            from arborag.tasks.stages.publish import collect_after_publish

            collect_after_publish(ctx)  # a re-publish is a publish: retention runs as after any other
            return k, (snap, "re-published an earlier snapshot with the same inputs and config")
        out["retry_of"] = {"snapshot": current, "fallbacks": fallbacks}
        retry = hash_json(["retry-fallbacks", key, current])
        if retry == k:  # the retry of ``current`` gave ``current`` again (publish kept it): ask again
            return k, None
        k = retry
    raise RuntimeError(f"build key {key}: no settled snapshot after 1000 retries")


def _warm_clustering() -> None:
    """Load UMAP's compiled code and scikit-learn's mixture module (~4 s of a cold process)."""
    from arborag.tasks.cluster.umap_import import import_umap

    import_umap()
    import sklearn.mixture  # noqa: F401


def build_tree(ctx: StageContext, leaves: Any, *, use_prefect: bool, out: dict[str, Any],
               pipeline: tuple[Stage, ...] | None = None) -> None:
    """Build (or reuse) the tree of ``leaves``: ``pipeline`` (:data:`TREE_PIPELINE`) under the build
    key, unless a settled snapshot of that key exists (then ``out["snapshot"]`` names it and
    ``out["reused"]`` says why).

    The build flow and an update that falls back to a full rebuild (the update's ``full`` route) both end here.
    """
    pipeline = TREE_PIPELINE if pipeline is None else pipeline
    key = out["build_key"] = build_key(leaves, ctx.config, code_versions(pipeline))
    key, reused = _settle(ctx, key, out)
    if reused is not None:
        out["snapshot"], out["reused"] = reused
        return
    run_pipeline(ctx, pipeline, use_prefect=use_prefect, out=out, key=key)
    out["snapshot"] = out[PUBLISH.name]["snapshot"]
    if out[PUBLISH.name].get("unchanged"):
        out["reused"] = "unchanged: the build's tree is the published snapshot's content; nothing was published"


def build_pipeline(ctx: StageContext, files: list[str] | None, *, use_prefect: bool, dry_run: bool = False) -> dict[str, Any]:
    """Run :data:`BUILD_PIPELINE` over discovered ``files`` (None: no ingest); record the run."""
    started = datetime.now(timezone.utc)
    before, age = phases.snapshot(), phases.process_age()
    out: dict[str, Any] = {"corpus": ctx.corpus.location, "run_id": ctx.run_id, "cached": []}
    status, message = "ok", ""
    try:
        strategy = ctx.config.segment.strategy
        if dry_run:  # ingest into a scratch copy of the working tables: nothing a reader sees changes
            with ctx.corpus.scratch_copy() as scratch:
                dry = dataclasses.replace(ctx, corpus=scratch)
                run_pipeline(dry, INGEST_PIPELINE, use_prefect=use_prefect, out=out, files=files, strategy=strategy)
                leaves = leaves_for(scratch.read("chunks"), strategy, scope=ctx.config.tree.scope)
            out["build_key"] = build_key(leaves, ctx.config, code_versions(TREE_PIPELINE))
            out["estimate"] = estimate_cost(leaves, ctx.config)
            out["leaves"] = leaves.num_rows
            return out
        run_pipeline(ctx, INGEST_PIPELINE, use_prefect=use_prefect, out=out, files=files, strategy=strategy)
        leaves = ctx.shared("leaves", lambda: leaves_for(ctx.corpus.read("chunks"), strategy, scope=ctx.config.tree.scope))
        if leaves.num_rows == 0:
            raise IngestError(str(ctx.corpus.root), "no chunks to build a tree from: ingest at least one readable, non-empty document")
        # the tree stage's UMAP (numba's cached code) and the vectors stage's lancedb, imported while
        # the leaves embed — after ingest and segment, whose Python work an import thread slows
        warm_imports(_warm_clustering, LANCEDB_IMPORT)
        build_tree(ctx, leaves, use_prefect=use_prefect, out=out)
        out["noop"] = "reused" in out
        message = out.pop("reused", "")
        failed = int((out.get(INGEST.name) or {}).get("failed", 0) or 0)
        if failed:
            status = "partial"
            message = f"{failed} document(s) could not be read; see `arborag sql --working \"select uri, error from documents where status = 'error'\"`"
        elif files is not None:  # the next `arborag update` of these sources can tell "nothing changed" from file stats
            remember(ctx.corpus, ctx.config, files, ctx.config.update.prune, out.get("snapshot"))
        return out
    except BaseException as exc:
        status, message = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        finish_run(ctx, "build", out, started=started, status=status, message=message, record=not dry_run,
                   counts={"phases": phases.since(before), "process_age_at_start": age})


def _build(
    corpus_dir: str,
    sources: list[str] | None = None,
    config_path: str | None = None,
    config_overrides: dict[str, dict[str, Any]] | None = None,
    dry_run: bool = False,
    progress: bool = False,
    lock_wait: bool = True,
    runner: str = "local",
) -> dict[str, Any]:
    """Build (or update) the tree of ``corpus_dir``, ingesting ``sources`` first (None: none).

    The config is ``load_config(config_path, overrides=config_overrides)`` in the process
    running the flow; secrets come from that process's environment. Returns the run summary
    (``snapshot``, ``noop``, ``build_key``, per-stage summaries, ``calls``, ``cached``, ``status``).
    Runs under the corpus writer lock (``lock_wait=False``: fail at once if another writer holds it).
    """
    corpus = Corpus(corpus_dir)
    with corpus_lock(corpus.root, wait=lock_wait, purpose="build"):  # an s3:// corpus: its local mirror
        config = load_config(config_path, overrides=config_overrides)
        ctx = StageContext(corpus.ensure(), config, current_flow_run_id() or new_run_id(), progress=progress)
        if runner == "dask":  # the flow runs on a DaskTaskRunner (run_build sets it): fan out
            install_fanout(ctx)
        files = discover(ctx, sources) if sources else None
        return build_pipeline(ctx, files, use_prefect=True, dry_run=dry_run)


_build_flow = lazy_flow(_build, attr="build", name=FLOW_NAME)
__getattr__ = flow_getattr(__name__, "build", _build_flow)


def run_build(
    sources: Sequence[str | Path],
    corpus_dir: str | Path,
    config: ArboragConfig,
    *,
    use_prefect: bool = True,
    dry_run: bool = False,
    progress: bool = True,
    lock_wait: bool = True,
    runner: str = "local",
    workers: int | None = None,
    address: str | None = None,
) -> dict[str, Any]:
    """Run the build for ``sources`` into ``corpus_dir``; returns a small summary dict.

    ``runner="dask"`` runs the flow on a ``prefect_dask.DaskTaskRunner`` — a ``LocalCluster`` of
    ``workers`` processes on 127.0.0.1, or the scheduler at ``address`` — and fans the embedding
    groups, summarization chunks and per-cluster local clusterings out as Prefect tasks; the
    published snapshot is the same as the local runner's (same seed, same tree).

    ``use_prefect=False`` runs the same pipeline without an orchestrator (tests, notebooks);
    otherwise the :func:`build` flow runs in-process with ``config`` as JSON overrides.
    Sources are discovered here, once (a missing one fails before Prefect starts).
    One writer at a time: the build waits for the corpus lock (``lock_wait=False``: raise
    :class:`~arborag.errors.CorpusLockedError` at once instead).
    """
    t0 = time.perf_counter()
    if runner not in RUNNERS:
        raise ConfigError(f"unknown runner {runner!r}; use one of: {', '.join(RUNNERS)}")
    if runner == "dask" and not use_prefect:
        raise ConfigError("--runner dask runs through Prefect's DaskTaskRunner: drop --no-prefect")
    corpus = Corpus(corpus_dir)
    with corpus_lock(corpus.root, wait=lock_wait, purpose="build"):  # an s3:// corpus: its local mirror
        ctx = StageContext(corpus.ensure(), config, new_run_id(), progress=progress)
        files = discover(ctx, [str(s) for s in sources]) if sources else None
        if not use_prefect:
            out = build_pipeline(ctx, files, use_prefect=False, dry_run=dry_run)
        else:
            flow = _build_flow()
            flow_fn = flow if runner == "local" else flow.with_options(task_runner=dask_task_runner(workers=workers, address=address))
            out = plain_json(flow_fn(
                corpus_dir=ctx.corpus.location, sources=files, config_overrides=config_overrides(config),
                dry_run=dry_run, progress=progress, runner=runner,
            ))
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out
