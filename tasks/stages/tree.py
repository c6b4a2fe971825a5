"""Stage ``tree``: the ``nodes`` and ``edges`` tables and every node's vector, staged under the build key.

The runner beside :func:`arborag.tasks.tree.build.build_tree`: it reads the staged leaf vectors, makes
the configured summarizer and the run's embed function (foundation embedder + storage cache),
builds the tree and stages ``nodes.parquet``, ``edges.parquet`` and ``node_vectors.parquet``.
Summaries are counted from the tree's per-level stats (one per cluster), tokens from the
summarizer's counters.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from arborag.progress import progress_bar
from arborag.storage.tables import write_table
from arborag.tasks.stage_context import StageContext, StageSummary
from arborag.tasks.embedding.embedder import embed_function, embedder_of
from arborag.tasks.embedding.vector_files import read_vectors_file, write_vectors_file
from arborag.tasks.build.leaves import load_leaves
from arborag.tasks.summarize import make_summarizer
from arborag.tasks.tree.build import build_tree
from arborag.tasks.tree.model import LevelModel, save_models
from arborag.tasks.tree.stats import LevelStats, fallback_summary

__all__ = ["CLUSTERS_DIR", "OUTPUTS", "TreeSummary", "fallback_nodes", "labelled", "level_counts", "run_tree", "write_tree_info"]

OUTPUTS = ("nodes.parquet", "edges.parquet", "node_vectors.parquet", "tree_info.json")
#: The fitted clustering per level (``tasks/tree/model.py``), beside the tables; published into the snapshot.
CLUSTERS_DIR = "clusters"
_MAX_CACHE_SHARDS = 32  # one embedding-cache shard per embed call: fold them up now and then


def level_counts(nodes: pa.Table) -> dict[int, int]:
    """Nodes per level, ascending (the per-level statistics of ``runs`` and ``info.json``)."""
    counts = pl.from_arrow(nodes.select(["level"])).group_by("level").len().sort("level")  # type: ignore[union-attr]
    return dict(zip(counts["level"].to_list(), counts["len"].to_list()))


def write_tree_info(stage_dir: Path, ctx: StageContext, models: list[LevelModel], *, fitted: int, changed: int, **extra: Any) -> None:
    """Stage the fitted clusters (``clusters/``) and ``tree_info.json``, which publish merges into
    the snapshot's ``info.json``: the tree config, the drift since the last full fit
    (``fitted`` leaves then, ``changed`` leaves added or removed incrementally since), and the
    numeric environment of this run (:func:`arborag.env.numeric_environment`)."""
    import shutil

    from arborag.storage.tables import atomic_write_json
    from arborag.tasks.build.key import tree_config

    clusters = stage_dir / CLUSTERS_DIR
    if clusters.exists():
        shutil.rmtree(clusters)
    save_models(clusters, models)
    from arborag.env import numeric_environment

    info = {"tree_config": tree_config(ctx.config), "drift": {"fitted": int(fitted), "changed": int(changed)},
            "clusters": {"levels": sorted(m.level for m in models)}, "environment": numeric_environment(), **extra}
    atomic_write_json(stage_dir / "tree_info.json", info)


@dataclass(frozen=True)
class TreeSummary(StageSummary):
    """The staged tree (``runs.counts`` key ``tree``): nodes and edges, nodes per level, summaries
    written, how many fell back to the extractive summarizer and why, and each level's statistics."""

    nodes: int
    edges: int
    levels: dict[int, int]
    summaries: int
    fallbacks: int
    fallback_reasons: dict[str, int]
    stats: list[LevelStats]

    def counts(self) -> dict[str, Any]:
        return {**self.fields(), "stats": [s.counts() for s in self.stats]}

    def report(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "edges": self.edges, "fallbacks": self.fallbacks, "fallback_reasons": self.fallback_reasons}


def run_tree(ctx: StageContext, key: str) -> TreeSummary:
    """Cluster, summarize and embed level by level over the staged leaves of build ``key``."""
    stage_dir = ctx.staging_dir(key)
    _, leaf_vectors = read_vectors_file(stage_dir / "leaf_vectors.parquet")
    embedder, cache = embedder_of(ctx)
    summarizer = make_summarizer(ctx.config.summarize, cache_dir=ctx.corpus.cache_dir / "llm", embedder=embedder)
    leaves = load_leaves(ctx)
    result = build_tree(
        leaves,
        leaf_vectors,
        embed=embed_function(ctx, "summaries"),
        summarizer=summarizer,
        cfg=ctx.config.cluster,
        tree_cfg=ctx.config.tree,
        run_id=ctx.run_id,
        map=ctx.resources.get("map"),  # a fan-out (Dask through Prefect) set by the flow, or None
        bar=functools.partial(progress_bar, enabled=ctx.progress),
    )
    summaries = sum(st.summaries for st in result.stats)
    ctx.counters.summaries += summaries
    ctx.counters.tokens_in += int(getattr(summarizer, "tokens_in", 0) or 0)
    ctx.counters.tokens_out += int(getattr(summarizer, "tokens_out", 0) or 0)
    if len(list(cache.directory.glob("*.parquet"))) > _MAX_CACHE_SHARDS:
        cache.compact()
    write_table("nodes", labelled(result.nodes, result.edges, summarizer, per_document=ctx.config.tree.scope == "document"),
                stage_dir / "nodes.parquet")
    write_table("edges", result.edges, stage_dir / "edges.parquet")
    write_vectors_file(stage_dir / "node_vectors.parquet", result.nodes.column("node_id"), result.vectors)
    fallbacks, reasons = fallback_summary(result.stats)
    write_tree_info(stage_dir, ctx, result.models, fitted=leaves.num_rows, changed=0, fallbacks=fallback_nodes(result.nodes))
    return TreeSummary(nodes=result.nodes.num_rows, edges=result.edges.num_rows, levels=level_counts(result.nodes), summaries=summaries,
                       fallbacks=fallbacks, fallback_reasons=reasons, stats=result.stats)


def labelled(nodes: pa.Table, edges: pa.Table, summarizer: object, previous: pa.Table | None = None, *, per_document: bool = False) -> pa.Table:
    """``nodes`` with a label (keywords, title) on every summary node — :func:`arborag.tasks.summarize.labels.label_nodes`,
    the one hook of the build's and the update's tree stages. ``previous`` (update): the published
    nodes, whose labels unchanged summaries keep. When the summarizer is an LLM, new clusters get a
    one-line title from it (a failed call keeps the keyword title)."""
    from arborag.tasks.summarize.labels import label_nodes, llm_titler

    client = getattr(summarizer, "client", None)
    titler = None
    if client is not None and hasattr(client, "complete_many"):
        def complete(prompts: list[str]) -> list[str | None]:
            replies = client.complete_many([[{"role": "user", "content": p}] for p in prompts], max_tokens=24, prompt_tag="node-title@v1")
            return [getattr(r, "text", None) for r in replies]
        titler = llm_titler(complete)
    return label_nodes(nodes, edges, previous=previous, titler=titler, per_document=per_document)


def fallback_nodes(nodes: pa.Table) -> int:
    """Summary nodes of ``nodes`` whose text is the extractive fallback (``summary_status`` ``fallback:…``);
    recorded in the snapshot's ``info.json`` so the next build knows the snapshot is not final."""
    import pyarrow.compute as pc

    return int(pc.sum(pc.starts_with(nodes.column("summary_status"), "fallback")).as_py() or 0)
