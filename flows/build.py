"""The build flow: ingest → segment → embed → tree (cluster → summarize → embed per level)
→ vectors → sparse → publish.

Each stage is a thin runner around a pure function from ``tasks/`` (or ``storage/``): it reads
its inputs from the corpus directory, writes its outputs there, and returns a small summary
(paths, counts). Under Prefect every stage is a task with a cache key made of content hashes
and the config parts it depends on, persisted under ``CORPUS/prefect``: a stage whose inputs
did not change is not run again, and a failed stage (say, an unreachable Elasticsearch) can be
retried without recomputing the stages before it.

The build itself is content-addressed: ``build_key = hash(leaf chunk ids + headers, embed,
cluster, summarize, tree and sparse config)``. A build whose key equals the published
snapshot's is a no-op — no embedding, no summarizing.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from arborag.config import ArboragConfig
from arborag.errors import IngestError
from arborag.hashing import hash_json
from arborag.progress import progress_bar
from arborag.flows.common import code_fingerprint
from arborag.storage.corpus import Corpus
from arborag.storage.tables import atomic_write_parquet, read_table, write_table

__all__ = ["PIPELINE", "BuildContext", "build_key", "estimate_cost", "run_build", "build_flow"]

# The modules whose code shapes a tree: a change to any of them makes a new build key, so a
# rebuild after a code change is never mistaken for a no-op (embeddings still come from cache).
TREE_CODE: tuple[str, ...] = (
    "arborag.tasks.embeddings", "arborag.tasks.clustering", "arborag.tasks.summarize", "arborag.tasks.summarize_llm", "arborag.tasks.tree",
    "arborag.storage.vectors", "arborag.storage.sparse", "arborag.storage.lucene",
)

# Configs handed to an in-process flow run, by config hash (secrets never become flow parameters).
_CONFIGS: dict[str, ArboragConfig] = {}


@dataclass
class BuildContext:
    """What the stages share: where things are and which config is in force."""

    corpus: Corpus
    config: ArboragConfig
    sources: list[str]
    progress: bool = True
    run_id: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6])
    counts: dict[str, Any] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=lambda: {"embedded_texts": 0, "summaries": 0})
    tokens_in: int = 0
    tokens_out: int = 0

    @property
    def staging(self) -> Path:
        return self.corpus.root / "staging"


# ---------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------
def _tree_config(config: ArboragConfig) -> dict[str, Any]:
    pub = config.public_dict()
    summ = {k: v for k, v in pub["summarize"].items() if k not in {"timeout_s", "concurrency", "retries", "price_in_per_1k", "price_out_per_1k", "api_key_env"}}
    embed = {k: v for k, v in pub["embed"].items() if k not in {"batch_size", "threads", "device"}}
    return {"embed": embed, "cluster": pub["cluster"], "summarize": summ, "tree": pub["tree"]}


def leaves_for(chunks: pa.Table, strategy: str) -> pa.Table:
    leaves = chunks.filter(pc.equal(chunks.column("strategy"), strategy))
    order = pc.sort_indices(leaves, sort_keys=[("doc_id", "ascending"), ("ordinal", "ascending")])
    return leaves.take(order)


def build_key(leaves: pa.Table, config: ArboragConfig) -> str:
    ids = leaves.column("chunk_id").to_pylist()
    headers = hash_json(leaves.column("header").to_pylist())
    sparse = {"backend": config.sparse.backend, "prefix": config.sparse.es_index_prefix}
    code = code_fingerprint(*TREE_CODE)
    return hash_json({"leaves": hash_json(ids), "headers": headers, "tree": _tree_config(config), "sparse": sparse, "code": code})


# ---------------------------------------------------------------------------------------
# Stages (plain functions; the Prefect tasks below wrap them)
# ---------------------------------------------------------------------------------------
def _embedder(ctx: BuildContext):
    from arborag.tasks.embeddings import Embedder, EmbeddingCache

    if not hasattr(ctx, "_embedder"):
        ctx._embedder = Embedder(ctx.config.embed)  # type: ignore[attr-defined]
        ctx._cache = EmbeddingCache(ctx.corpus.cache_dir / "embeddings")  # type: ignore[attr-defined]
    return ctx._embedder, ctx._cache  # type: ignore[attr-defined]


def _embed_texts(ctx: BuildContext, texts: list[str], label: str) -> np.ndarray:
    from arborag.tasks.embeddings import embed_cached

    embedder, cache = _embedder(ctx)
    with progress_bar(f"embed {label}", len(texts), enabled=ctx.progress) as advance:
        vectors, n_new = embed_cached(texts, embedder, cache, progress=advance)
    ctx.calls["embedded_texts"] += n_new
    return vectors


def stage_embed(ctx: BuildContext, leaves: pa.Table, key: str) -> dict[str, Any]:
    stage_dir = ctx.staging / key
    stage_dir.mkdir(parents=True, exist_ok=True)
    from arborag.tasks.tree import leaf_embed_texts

    vectors = _embed_texts(ctx, leaf_embed_texts(leaves), "leaves")
    _write_vectors_file(stage_dir / "leaf_vectors.parquet", leaves.column("chunk_id"), vectors)
    ctx.counts["embed"] = {"leaves": leaves.num_rows, "computed": ctx.calls["embedded_texts"]}
    return {"path": str(stage_dir / "leaf_vectors.parquet"), "rows": leaves.num_rows}


def _write_vectors_file(path: Path, ids: pa.ChunkedArray | pa.Array, vectors: np.ndarray) -> None:
    dim = int(vectors.shape[1]) if vectors.ndim == 2 and vectors.shape[0] else 0
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel(), type=pa.float32())
    vec = pa.FixedSizeListArray.from_arrays(flat, dim) if dim else pa.array([], pa.list_(pa.float32(), 1))
    atomic_write_parquet(pa.table({"node_id": ids, "vector": vec}), path)


def _read_vectors_file(path: Path) -> tuple[list[str], np.ndarray]:
    t = pq.read_table(path)
    vec = t.column("vector").combine_chunks()
    dim = vec.type.list_size
    return t.column("node_id").to_pylist(), vec.values.to_numpy(zero_copy_only=False).reshape(-1, dim)


def stage_tree(ctx: BuildContext, leaves: pa.Table, key: str) -> dict[str, Any]:
    from arborag.tasks.summarize import make_summarizer
    from arborag.tasks.tree import build_tree

    stage_dir = ctx.staging / key
    _, leaf_vectors = _read_vectors_file(stage_dir / "leaf_vectors.parquet")
    embedder, _ = _embedder(ctx)
    summarizer = make_summarizer(ctx.config.summarize, cache_dir=ctx.corpus.cache_dir / "llm", embedder=embedder)

    calls = {"n": 0}
    inner = summarizer.summarize_many

    def counting_summarize(clusters, **kw):
        calls["n"] += len(clusters)
        return inner(clusters, **kw)

    summarizer.summarize_many = counting_summarize  # type: ignore[method-assign]
    result = build_tree(
        leaves,
        leaf_vectors,
        embed=lambda texts: _embed_texts(ctx, list(texts), "summaries"),
        summarizer=summarizer,
        cfg=ctx.config.cluster,
        tree_cfg=ctx.config.tree,
        run_id=key,
    )
    ctx.calls["summaries"] += calls["n"]
    _, cache = _embedder(ctx)
    if len(list(cache.directory.glob("*.parquet"))) > 32:  # one shard per embed call: fold them up now and then
        cache.compact()
    for attr in ("tokens_in", "tokens_out"):
        setattr(ctx, attr, getattr(ctx, attr) + int(getattr(summarizer, attr, 0) or 0))
    write_table("nodes", result.nodes, stage_dir / "nodes.parquet")
    write_table("edges", result.edges, stage_dir / "edges.parquet")
    _write_vectors_file(stage_dir / "node_vectors.parquet", result.nodes.column("node_id"), result.vectors)
    levels = pc.value_counts(result.nodes.column("level")).to_pylist()
    ctx.counts["tree"] = {
        "nodes": result.nodes.num_rows,
        "edges": result.edges.num_rows,
        "levels": {int(d["values"]): int(d["counts"]) for d in levels},
        "summaries": calls["n"],
        "stats": result.stats,
    }
    return {"nodes": result.nodes.num_rows, "edges": result.edges.num_rows}


def snapshot_id_for(key: str) -> str:
    return f"snap-{key[:20]}"


def stage_vectors(ctx: BuildContext, key: str) -> dict[str, Any]:
    from arborag.storage.vectors import write_vectors

    stage_dir = ctx.staging / key
    nodes = read_table("nodes", stage_dir / "nodes.parquet", missing_ok=False)
    ids, vectors = _read_vectors_file(stage_dir / "node_vectors.parquet")
    if ids != nodes.column("node_id").to_pylist():
        raise RuntimeError("staged vectors do not align with staged nodes; delete the staging folder and rebuild")
    out = stage_dir / "vectors.lance"
    tmp = stage_dir / "vectors.partial"
    for d in (out, tmp):
        if d.exists():
            shutil.rmtree(d)
    stats = write_vectors(tmp, nodes, vectors)
    tmp.rename(out)
    ctx.counts["vectors"] = stats
    return stats


def stage_sparse(ctx: BuildContext, key: str) -> dict[str, Any]:
    from arborag.storage.sparse import build_sparse_index

    stage_dir = ctx.staging / key
    nodes = read_table("nodes", stage_dir / "nodes.parquet", missing_ok=False)
    out = stage_dir / "sparse"
    tmp = stage_dir / "sparse.partial"  # renamed to sparse/ only on success: its existence means "done"
    for d in (out, tmp):
        if d.exists():
            shutil.rmtree(d)
    tmp.mkdir(parents=True)
    stats = build_sparse_index(nodes, tmp, ctx.config.sparse, snapshot_id=snapshot_id_for(key))
    tmp.rename(out)
    ctx.counts["sparse"] = stats
    return dict(stats)


def _tree_counts(nodes_path: Path) -> dict[str, Any]:
    levels = pq.read_table(nodes_path, columns=["level"]).column("level")
    per_level = {str(d["values"]): int(d["counts"]) for d in pc.value_counts(levels).to_pylist()}
    return {"nodes": len(levels), "levels": dict(sorted(per_level.items()))}


def stage_publish(ctx: BuildContext, key: str) -> dict[str, Any]:
    from arborag.storage.sparse import publish_sparse_index

    stage_dir = ctx.staging / key
    snap_id = snapshot_id_for(key)
    partial = ctx.corpus.partial_dir(snap_id)
    for name in ("nodes.parquet", "edges.parquet", "vectors.lance", "sparse"):
        src = stage_dir / name
        dst = partial / name
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)
    publish_sparse_index(partial / "sparse", ctx.config.sparse, snapshot_id=snap_id, corpus_name=ctx.corpus.root.name)
    info = {
        "build_key": key,
        "strategy": ctx.config.segment.strategy,
        "config_hash": ctx.config.config_hash(),
        "embed": ctx.config.embed.model_dump(mode="json"),
        "sparse_backend": ctx.config.sparse.backend,
        "corpus_name": ctx.corpus.root.name,
        "run_id": ctx.run_id,
        "counts": _tree_counts(partial / "nodes.parquet"),
    }
    ctx.corpus.publish(partial, snap_id, info)
    shutil.rmtree(stage_dir, ignore_errors=True)
    return {"snapshot": snap_id}


# ---------------------------------------------------------------------------------------
# Dry run: what would this cost?
# ---------------------------------------------------------------------------------------
# Average number of children a summary covers. RAPTOR's GMM clusters hold a handful of
# nodes; 5 matches the trees we build (see README). Used only for estimates.
_EST_CLUSTER_SIZE = 5.0
_EST_MEMBERSHIP = 1.1  # soft membership puts some nodes in more than one cluster


def estimate_cost(leaves: pa.Table, config: ArboragConfig) -> list[dict[str, Any]]:
    """Per level: nodes in, summaries out, summarizer input/output tokens, price (openai)."""
    cfg = config.cluster
    out_tokens = config.summarize.max_tokens
    n = leaves.num_rows
    tokens_per_node = float(np.mean(leaves.column("n_tokens").to_numpy())) if n else 0.0
    rows = []
    level = 0
    while n > cfg.dims + 1 and level < cfg.max_levels:
        n_sum = max(1, int(np.ceil(n * _EST_MEMBERSHIP / _EST_CLUSTER_SIZE)))
        t_in = int(n * _EST_MEMBERSHIP * tokens_per_node)
        t_out = n_sum * out_tokens
        price = 0.0
        if config.summarize.backend == "openai":
            price = t_in / 1000 * config.summarize.price_in_per_1k + t_out / 1000 * config.summarize.price_out_per_1k
        rows.append({"level": level + 1, "nodes_in": n, "summaries": n_sum, "tokens_in": t_in, "tokens_out": t_out, "price": round(price, 4)})
        if n_sum >= n:
            break
        n, tokens_per_node, level = n_sum, float(out_tokens), level + 1
    return rows


# ---------------------------------------------------------------------------------------
# Orchestration
# ---------------------------------------------------------------------------------------
# The stages after segmentation, in order: (name, function, takes the leaves table).
TREE_STAGES: tuple[tuple[str, Callable[..., dict[str, Any]], bool], ...] = (
    ("embed", stage_embed, True),
    ("tree", stage_tree, True),
    ("vectors", stage_vectors, False),
    ("sparse", stage_sparse, False),
    ("publish", stage_publish, False),
)
# The pipeline order is data: ingest and segment (flows/ingest.py), then the stages above.
PIPELINE: tuple[str, ...] = ("ingest", "segment", *(name for name, _, _ in TREE_STAGES))


def _run_stages(ctx: BuildContext, *, use_prefect: bool, dry_run: bool = False) -> dict[str, Any]:
    from arborag.flows.ingest import cached_ingest_summary, ingest_call, run_stage_plain, run_stage_prefect, segment_call

    started = datetime.now(timezone.utc)
    summary: dict[str, Any] = {"corpus": str(ctx.corpus.root), "run_id": ctx.run_id, "cached": []}
    status = "ok"
    message = ""
    run_ingest_stage = run_stage_prefect if use_prefect else run_stage_plain
    run_tree_stage = _prefect_stage if use_prefect else _plain_stage
    try:
        if ctx.sources:
            out, cached = run_ingest_stage(ctx.corpus, ingest_call(ctx.corpus, ctx.config, ctx.sources, ctx.progress))
            summary["ingest"] = cached_ingest_summary(out) if cached else out
            if cached:
                summary["cached"].append("ingest")
        strategy = ctx.config.segment.strategy
        out, cached = run_ingest_stage(ctx.corpus, segment_call(ctx.corpus, ctx.config, strategy, ctx.progress))
        summary["segment"] = out
        if cached:
            summary["cached"].append("segment")
        ctx.counts["ingest"] = {k: v for k, v in (summary.get("ingest") or {}).items() if k not in ("failures", "warning_list")}
        ctx.counts["segment"] = summary["segment"]
        leaves = leaves_for(ctx.corpus.read("chunks"), strategy)
        key = build_key(leaves, ctx.config)
        summary["build_key"] = key
        if dry_run:
            summary["estimate"] = estimate_cost(leaves, ctx.config)
            summary["leaves"] = leaves.num_rows
            return summary
        if leaves.num_rows == 0:
            raise IngestError(str(ctx.corpus.root), "no chunks to build a tree from: ingest at least one readable, non-empty document")
        man = ctx.corpus.manifest()
        if man is not None and man.get("build_key") == key and (ctx.corpus.snapshots_dir / man["snapshot"]).is_dir():
            summary["noop"] = True
            summary["snapshot"] = man["snapshot"]
            message = "unchanged: the published snapshot already matches the inputs and config"
        elif (ctx.corpus.snapshots_dir / snapshot_id_for(key)).is_dir():
            # built before (e.g. the config was switched back): re-publish, compute nothing
            info = json.loads((ctx.corpus.snapshots_dir / snapshot_id_for(key) / "info.json").read_text())
            ctx.corpus.publish_existing(snapshot_id_for(key), info)
            summary["noop"] = True
            summary["snapshot"] = snapshot_id_for(key)
            message = "re-published an earlier snapshot with the same inputs and config"
        else:
            summary["noop"] = False
            for name, fn, takes_leaves in TREE_STAGES:
                summary[name] = run_tree_stage(name, fn, ctx, leaves if takes_leaves else None, key)
            summary["cached"] += [n for n in ("embed", "tree", "vectors", "sparse") if summary[n].get("_cached")]
            summary["snapshot"] = summary["publish"]["snapshot"]
        failed = int((summary.get("ingest") or {}).get("failed", 0) or 0)
        if failed:
            status = "partial"
            message = f"{failed} document(s) could not be read; see `arborag sql \"select uri, error from documents where status = 'error'\"`"
        return summary
    except BaseException as exc:
        status, message = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        summary["calls"] = dict(ctx.calls)
        summary["status"] = status
        if not dry_run:
            ctx.corpus.append_run(
                {
                    "run_id": ctx.run_id,
                    "flow": "build",
                    "config_hash": ctx.config.config_hash(),
                    "started_at": started,
                    "finished_at": datetime.now(timezone.utc),
                    "status": status,
                    "counts": json.dumps({**ctx.counts, "calls": ctx.calls, "cached": summary.get("cached", [])}, default=str),
                    "tokens_in": ctx.tokens_in,
                    "tokens_out": ctx.tokens_out,
                    "message": message or None,
                }
            )


def _call(fn: Callable[..., dict[str, Any]], ctx: BuildContext, leaves: pa.Table | None, key: str) -> dict[str, Any]:
    return fn(ctx, leaves, key) if leaves is not None else fn(ctx, key)


def _plain_stage(name: str, fn: Callable[..., dict[str, Any]], ctx: BuildContext, leaves: pa.Table | None, key: str) -> dict[str, Any]:
    """Run a stage directly; a stage whose outputs for this build key are already staged (an
    earlier build failed after it) is skipped, so a retry resumes where the failure was."""
    if _staged_outputs_exist(ctx, name, key):
        return {"_cached": True, "stage": name}
    return _call(fn, ctx, leaves, key)


def _staged_outputs_exist(ctx: BuildContext, name: str, key: str) -> bool:
    need = {
        "embed": ["leaf_vectors.parquet"],
        "tree": ["nodes.parquet", "edges.parquet", "node_vectors.parquet"],
        "vectors": ["vectors.lance"],
        "sparse": ["sparse"],
    }.get(name)
    return bool(need) and all((ctx.staging / key / n).exists() for n in need)


_RETRIES = {"embed": 2, "tree": 3, "sparse": 3}


def _prefect_stage(name: str, fn: Callable[..., dict[str, Any]], ctx: BuildContext, leaves: pa.Table | None, key: str) -> dict[str, Any]:
    """Run a stage as a Prefect task cached on ``<stage>-<build key>``.

    A cache hit is trusted only while the stage's staged outputs still exist (a published
    build removes its staging folder); otherwise the task runs and refreshes the record.
    So a build that failed at ``sparse`` (say, Elasticsearch was down) resumes at ``sparse``.
    """
    from prefect import task

    from arborag.flows.common import task_options, was_cached

    usable = _staged_outputs_exist(ctx, name, key)
    opts = task_options(ctx.corpus, retries=_RETRIES.get(name, 0), cache_key=f"{name}-{key}", refresh_cache=not usable)

    def body() -> dict[str, Any]:
        return _call(fn, ctx, leaves, key)

    body.__name__ = name
    state = task(name=name, log_prints=False)(body).with_options(**opts)(return_state=True)
    out = dict(state.result())
    if was_cached(state):
        out["_cached"] = True
    return out


def build_flow(config_hash: str, corpus_dir: str, sources: list[str], dry_run: bool = False, progress: bool = True) -> dict[str, Any]:
    """Prefect flow body (wrapped lazily by :func:`_prefect_flow`)."""
    config = _CONFIGS[config_hash]
    ctx = BuildContext(Corpus(corpus_dir).ensure(), config, sources, progress=progress)
    return _run_stages(ctx, use_prefect=True, dry_run=dry_run)


def _prefect_flow():
    from prefect import flow

    return flow(name="arborag-build", log_prints=False, validate_parameters=False)(build_flow)


def run_build(
    sources: Sequence[str | Path],
    corpus_dir: str | Path,
    config: ArboragConfig,
    *,
    use_prefect: bool = True,
    dry_run: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the build for ``sources`` into ``corpus_dir``; returns a small summary dict.

    ``use_prefect=False`` runs the same stages without an orchestrator (tests, notebooks).
    """
    corpus = Corpus(corpus_dir).ensure()
    srcs = [str(s) for s in sources]
    if not use_prefect:
        ctx = BuildContext(corpus, config, srcs, progress=progress)
        return _run_stages(ctx, use_prefect=False, dry_run=dry_run)
    from arborag.flows.common import prefect_env_defaults

    prefect_env_defaults()
    if srcs:  # a missing source fails before Prefect starts
        from arborag.tasks.documents import discover_sources

        discover_sources(srcs, config.ingest, skip=[corpus.root])
    h = config.config_hash()
    _CONFIGS[h] = config
    t0 = time.perf_counter()
    out = _prefect_flow()(h, str(corpus.root), srcs, dry_run, progress)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out
