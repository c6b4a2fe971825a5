"""Stage ``tree``: the ``nodes`` and ``edges`` tables and every node's vector, staged under the build key.

The runner beside :func:`arborag.tasks.tree.build_tree`: it reads the staged leaf vectors, makes
the configured summarizer and the run's embed function (foundation embedder + storage cache),
builds the tree and stages ``nodes.parquet``, ``edges.parquet`` and ``node_vectors.parquet``.
Summaries are counted from the tree's per-level stats (one per cluster), tokens from the
summarizer's counters.
"""

from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from arborag.storage.tables import write_table
from arborag.tasks.context import StageContext
from arborag.tasks.leaf_vectors import embed_function, embedder_of, read_vectors_file, write_vectors_file
from arborag.tasks.leaves import load_leaves
from arborag.tasks.summarize import make_summarizer
from arborag.tasks.tree import build_tree

__all__ = ["OUTPUTS", "level_counts", "run_tree"]

OUTPUTS = ("nodes.parquet", "edges.parquet", "node_vectors.parquet")
_MAX_CACHE_SHARDS = 32  # one embedding-cache shard per embed call: fold them up now and then


def level_counts(nodes: pa.Table) -> dict[int, int]:
    """Nodes per level, ascending (the per-level statistics of ``runs`` and ``info.json``)."""
    counts = pl.from_arrow(nodes.select(["level"])).group_by("level").len().sort("level")  # type: ignore[union-attr]
    return dict(zip(counts["level"].to_list(), counts["len"].to_list()))


def run_tree(ctx: StageContext, key: str) -> dict[str, Any]:
    """Cluster, summarize and embed level by level over the staged leaves of build ``key``."""
    stage_dir = ctx.staging_dir(key)
    _, leaf_vectors = read_vectors_file(stage_dir / "leaf_vectors.parquet")
    embedder, cache = embedder_of(ctx)
    summarizer = make_summarizer(ctx.config.summarize, cache_dir=ctx.corpus.cache_dir / "llm", embedder=embedder)
    result = build_tree(
        load_leaves(ctx),
        leaf_vectors,
        embed=embed_function(ctx, "summaries"),
        summarizer=summarizer,
        cfg=ctx.config.cluster,
        tree_cfg=ctx.config.tree,
        run_id=ctx.run_id,
    )
    summaries = sum(int(st.get("n_clusters", 0)) for st in result.stats)
    ctx.counters.summaries += summaries
    ctx.counters.tokens_in += int(getattr(summarizer, "tokens_in", 0) or 0)
    ctx.counters.tokens_out += int(getattr(summarizer, "tokens_out", 0) or 0)
    if len(list(cache.directory.glob("*.parquet"))) > _MAX_CACHE_SHARDS:
        cache.compact()
    write_table("nodes", result.nodes, stage_dir / "nodes.parquet")
    write_table("edges", result.edges, stage_dir / "edges.parquet")
    write_vectors_file(stage_dir / "node_vectors.parquet", result.nodes.column("node_id"), result.vectors)
    ctx.counters.stages["tree"] = {
        "nodes": result.nodes.num_rows,
        "edges": result.edges.num_rows,
        "levels": level_counts(result.nodes),
        "summaries": summaries,
        "stats": result.stats,
    }
    return {"nodes": result.nodes.num_rows, "edges": result.edges.num_rows}
