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
import os
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
from arborag.hashing import hash_json
from arborag.progress import progress_bar
from storage.corpus import Corpus
from storage.tables import read_table, write_table

__all__ = ["PIPELINE", "BuildContext", "build_key", "estimate_cost", "run_build", "build_flow"]

# The pipeline order is data: the flow runs these stages in this order.
PIPELINE: tuple[str, ...] = ("ingest", "segment", "embed", "tree", "vectors", "sparse", "publish")

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
    return hash_json({"leaves": hash_json(ids), "headers": headers, "tree": _tree_config(config), "sparse": sparse, "v": 1})


# ---------------------------------------------------------------------------------------
# Stages (plain functions; the Prefect tasks below wrap them)
# ---------------------------------------------------------------------------------------
def stage_ingest(ctx: BuildContext) -> dict[str, Any]:
    from tasks.documents import build_documents

    if not ctx.sources:
        docs = ctx.corpus.read("documents")
        return {"documents": docs.num_rows, "added": 0, "failed": 0}
    existing = ctx.corpus.read("documents")
    with progress_bar("ingest", None, enabled=False):
        table, report = build_documents(ctx.sources, ctx.config.ingest, existing=existing)
    ctx.corpus.write("documents", table)
    summary = report.as_dict() if hasattr(report, "as_dict") else dict(vars(report))
    ctx.counts["ingest"] = summary
    return summary


def stage_segment(ctx: BuildContext) -> dict[str, Any]:
    from tasks.chunks import build_chunks

    strategy = ctx.config.segment.strategy
    docs = ctx.corpus.read("documents")
    ok = docs.filter(pc.equal(docs.column("status"), "ok"))
    chunks = ctx.corpus.read("chunks")
    other = chunks.filter(pc.not_equal(chunks.column("strategy"), strategy))
    with progress_bar(f"segment ({strategy})", ok.num_rows, enabled=ctx.progress) as advance:
        new = build_chunks(ok, ctx.config.segment, strategy=strategy, progress=advance)
    ctx.corpus.write("chunks", pa.concat_tables([other, new]))
    ctx.counts["segment"] = {"strategy": strategy, "chunks": new.num_rows, "documents": ok.num_rows}
    return ctx.counts["segment"]


def _embedder(ctx: BuildContext):
    from tasks.embeddings import Embedder, EmbeddingCache

    if not hasattr(ctx, "_embedder"):
        ctx._embedder = Embedder(ctx.config.embed)  # type: ignore[attr-defined]
        ctx._cache = EmbeddingCache(ctx.corpus.cache_dir / "embeddings")  # type: ignore[attr-defined]
    return ctx._embedder, ctx._cache  # type: ignore[attr-defined]


def _embed_texts(ctx: BuildContext, texts: list[str], label: str) -> np.ndarray:
    from tasks.embeddings import embed_cached

    embedder, cache = _embedder(ctx)
    with progress_bar(f"embed {label}", len(texts), enabled=ctx.progress) as advance:
        vectors, n_new = embed_cached(texts, embedder, cache, progress=advance)
    ctx.calls["embedded_texts"] += n_new
    return vectors


def leaf_texts(leaves: pa.Table) -> list[str]:
    """What is embedded for a leaf: its context header (when present) and its text."""
    out = []
    for header, text in zip(leaves.column("header").to_pylist(), leaves.column("text").to_pylist()):
        out.append(f"{header}\n\n{text}" if header else text)
    return out


def stage_embed(ctx: BuildContext, leaves: pa.Table, key: str) -> dict[str, Any]:
    stage_dir = ctx.staging / key
    stage_dir.mkdir(parents=True, exist_ok=True)
    vectors = _embed_texts(ctx, leaf_texts(leaves), "leaves")
    _write_vectors_file(stage_dir / "leaf_vectors.parquet", leaves.column("chunk_id"), vectors)
    ctx.counts["embed"] = {"leaves": leaves.num_rows, "computed": ctx.calls["embedded_texts"]}
    return {"path": str(stage_dir / "leaf_vectors.parquet"), "rows": leaves.num_rows}


def _write_vectors_file(path: Path, ids: pa.ChunkedArray | pa.Array, vectors: np.ndarray) -> None:
    dim = int(vectors.shape[1]) if vectors.ndim == 2 and vectors.shape[0] else 0
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel(), type=pa.float32())
    vec = pa.FixedSizeListArray.from_arrays(flat, dim) if dim else pa.array([], pa.list_(pa.float32(), 1))
    tmp = path.with_suffix(".tmp")
    pq.write_table(pa.table({"node_id": ids, "vector": vec}), tmp)
    os.replace(tmp, path)


def _read_vectors_file(path: Path) -> tuple[list[str], np.ndarray]:
    t = pq.read_table(path)
    vec = t.column("vector").combine_chunks()
    dim = vec.type.list_size
    return t.column("node_id").to_pylist(), vec.values.to_numpy(zero_copy_only=False).reshape(-1, dim)


def stage_tree(ctx: BuildContext, leaves: pa.Table, key: str) -> dict[str, Any]:
    from tasks.summarize import make_summarizer
    from tasks.tree import build_tree

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
    from storage.vectors import write_vectors

    stage_dir = ctx.staging / key
    nodes = read_table("nodes", stage_dir / "nodes.parquet", missing_ok=False)
    ids, vectors = _read_vectors_file(stage_dir / "node_vectors.parquet")
    if ids != nodes.column("node_id").to_pylist():
        raise RuntimeError("staged vectors do not align with staged nodes; delete the staging folder and rebuild")
    out = stage_dir / "vectors.lance"
    if out.exists():
        shutil.rmtree(out)
    stats = write_vectors(out, nodes, vectors)
    ctx.counts["vectors"] = stats
    return stats


def stage_sparse(ctx: BuildContext, key: str) -> dict[str, Any]:
    from storage.sparse import build_sparse_index

    stage_dir = ctx.staging / key
    nodes = read_table("nodes", stage_dir / "nodes.parquet", missing_ok=False)
    out = stage_dir / "sparse"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    stats = build_sparse_index(nodes, out, ctx.config.sparse, snapshot_id=snapshot_id_for(key))
    ctx.counts["sparse"] = stats
    return dict(stats)


def _tree_counts(nodes_path: Path) -> dict[str, Any]:
    levels = pq.read_table(nodes_path, columns=["level"]).column("level")
    per_level = {str(d["values"]): int(d["counts"]) for d in pc.value_counts(levels).to_pylist()}
    return {"nodes": len(levels), "levels": dict(sorted(per_level.items()))}


def stage_publish(ctx: BuildContext, key: str) -> dict[str, Any]:
    from storage.sparse import publish_sparse_index

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
def _run_stages(ctx: BuildContext, runner: Callable[..., Any], *, dry_run: bool = False) -> dict[str, Any]:
    started = datetime.now(timezone.utc)
    summary: dict[str, Any] = {"corpus": str(ctx.corpus.root), "run_id": ctx.run_id}
    status = "ok"
    message = ""
    try:
        summary["ingest"] = runner("ingest", stage_ingest, ctx)
        summary["segment"] = runner("segment", stage_segment, ctx)
        leaves = leaves_for(ctx.corpus.read("chunks"), ctx.config.segment.strategy)
        key = build_key(leaves, ctx.config)
        summary["build_key"] = key
        if dry_run:
            summary["estimate"] = estimate_cost(leaves, ctx.config)
            summary["leaves"] = leaves.num_rows
            return summary
        if leaves.num_rows == 0:
            raise RuntimeError("no chunks to build a tree from: ingest at least one readable, non-empty document")
        man = ctx.corpus.manifest()
        if man is not None and man.get("build_key") == key and (ctx.corpus.snapshots_dir / man["snapshot"]).is_dir():
            summary["noop"] = True
            summary["snapshot"] = man["snapshot"]
            message = "unchanged: the published snapshot already matches the inputs and config"
        else:
            summary["noop"] = False
            for name, fn in (("embed", stage_embed), ("tree", stage_tree)):
                summary[name] = runner(name, fn, ctx, leaves, key, cache_key=f"{name}-{key}")
            summary["vectors"] = runner("vectors", stage_vectors, ctx, key, cache_key=f"vectors-{key}")
            summary["sparse"] = runner("sparse", stage_sparse, ctx, key, cache_key=f"sparse-{key}")
            summary["publish"] = runner("publish", stage_publish, ctx, key)
            summary["snapshot"] = summary["publish"]["snapshot"]
        ingest = summary.get("ingest") or {}
        if int(ingest.get("failed", 0) or 0):
            status = "partial"
            message = f"{ingest['failed']} document(s) could not be read; see `arborag sql \"select uri, error from documents where status = 'error'\"`"
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
                    "counts": json.dumps({**ctx.counts, "calls": ctx.calls}, default=str),
                    "tokens_in": ctx.tokens_in,
                    "tokens_out": ctx.tokens_out,
                    "message": message,
                }
            )


def _plain_runner(name: str, fn: Callable[..., Any], ctx: BuildContext, *args: Any, cache_key: str | None = None) -> Any:
    return fn(ctx, *args)


def _staged_outputs_exist(ctx: BuildContext, name: str, key: str) -> bool:
    stage_dir = ctx.staging / key
    need = {
        "embed": ["leaf_vectors.parquet"],
        "tree": ["nodes.parquet", "edges.parquet", "node_vectors.parquet"],
        "vectors": ["vectors.lance"],
        "sparse": ["sparse"],
    }.get(name, [])
    return all((stage_dir / n).exists() for n in need)


def _prefect_runner(ctx: BuildContext) -> Callable[..., Any]:
    from prefect import task

    retry = {"ingest": 2, "embed": 2, "tree": 3, "sparse": 3}
    storage = ctx.corpus.prefect_dir
    storage.mkdir(parents=True, exist_ok=True)

    def run(name: str, fn: Callable[..., Any], ctx_: BuildContext, *args: Any, cache_key: str | None = None) -> Any:
        # The cache key is the stage name + the build key (content hashes of the leaves and
        # the config the stage depends on). It is offered only while the stage's staged
        # outputs exist, so a cache hit never points at files that are gone.
        key = args[-1] if args and isinstance(args[-1], str) else None
        usable = bool(cache_key and key and _staged_outputs_exist(ctx_, name, key))
        t = task(
            name=name,
            cache_key_fn=(lambda _c, _p: cache_key) if usable else None,
            persist_result=True,
            result_storage=storage,
            retries=retry.get(name, 0),
            retry_delay_seconds=[2, 5, 15],
        )(lambda: fn(ctx_, *args))
        return t()

    return run


def build_flow(config_hash: str, corpus_dir: str, sources: list[str], dry_run: bool = False, progress: bool = True) -> dict[str, Any]:
    """Prefect flow body (wrapped lazily by :func:`_prefect_flow`)."""
    config = _CONFIGS[config_hash]
    ctx = BuildContext(Corpus(corpus_dir).ensure(), config, sources, progress=progress)
    return _run_stages(ctx, _prefect_runner(ctx), dry_run=dry_run)


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
        return _run_stages(ctx, _plain_runner, dry_run=dry_run)
    h = config.config_hash()
    _CONFIGS[h] = config
    t0 = time.perf_counter()
    out = _prefect_flow()(h, str(corpus.root), srcs, dry_run, progress)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out
