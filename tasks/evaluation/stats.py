"""Facts about a built corpus for the report: nodes per level and the size of its leaves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from arborag.errors import ArboragError
from arborag.storage.corpus import Corpus
from arborag.tasks.evaluation.aggregate import percentile_expr

__all__ = ["chunk_stats", "leaf_stats", "nodes_per_level"]


def nodes_per_level(nodes: pa.Table) -> dict[int, int]:
    """``{level: node count}`` in level order (``nodes`` needs a ``level`` column)."""
    counts = pl.DataFrame(nodes.select(["level"])).group_by("level").len().sort("level")
    return {int(lv): int(n) for lv, n in counts.iter_rows()}


def leaf_stats(n_tokens: pa.Array | pa.ChunkedArray) -> dict[str, Any]:
    """Count, mean, p50, p95 and max of the leaves' token counts (the values
    ``metrics.mean``/``metrics.percentile`` give); empty when there are none."""
    df = pl.DataFrame({"n": pl.Series("n", n_tokens)}).drop_nulls()
    if df.is_empty():
        return {}
    n = pl.col("n")
    row = df.select(
        n.len().alias("leaves"),
        (n.sum() / n.len()).alias("mean_tokens"),
        percentile_expr(n, 50).alias("p50_tokens"),
        percentile_expr(n, 95).alias("p95_tokens"),
        n.max().alias("max_tokens"),
    ).row(0, named=True)
    return {k: (int(v) if k in ("leaves", "max_tokens") else float(v)) for k, v in row.items()}


def chunk_stats(corpus_dir: str | Path, strategy: str) -> dict[str, Any]:
    """Leaf count and size of a built corpus (from its published nodes, else its chunks of
    ``strategy``), with ``nodes_per_level`` and ``label_precision`` (tasks/evaluation/labels.py,
    without the per-level part) when the nodes are there."""
    corpus = Corpus(corpus_dir)
    stats: dict[str, Any] = {}
    try:
        nodes = pq.read_table(corpus.snapshot_table_path("nodes"), columns=["level", "n_tokens"])
        leaves = pl.DataFrame(nodes).filter(pl.col("level") == 0).get_column("n_tokens").to_arrow()
        stats["nodes_per_level"] = nodes_per_level(nodes)
    except (ArboragError, OSError, KeyError, pa.ArrowInvalid):
        chunks = pl.DataFrame(corpus.read("chunks").select(["n_tokens", "strategy"]))
        leaves = chunks.filter(pl.col("strategy") == strategy).get_column("n_tokens").to_arrow()
    stats.update(leaf_stats(leaves))
    if "nodes_per_level" in stats:  # a published tree: how well its labels describe its clusters
        from arborag.tasks.evaluation.labels import label_precision_of

        try:
            stats["label_precision"] = {k: v for k, v in label_precision_of(corpus_dir).items() if k != "by_level"}
        except (ArboragError, OSError, KeyError, pa.ArrowInvalid):  # a tree without edges (or labels): nothing to measure
            stats["label_precision"] = None
    return stats
