"""Walking a published tree's ``nodes`` and ``edges`` tables in polars (shared by the label stage,
the tree views and the label metric).

:func:`leaves_under` follows the edges down from every summary node to its leaf chunks (soft
membership: a leaf may be under several clusters of a level); :func:`tree_sizes` counts them and
the documents they come from.
"""

from __future__ import annotations

import polars as pl

__all__ = ["leaves_under", "tree_sizes"]


def leaves_under(nodes: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """``(node_id, level, leaf_id)``: every leaf under every summary node (down the edges, unique).
    ``nodes`` needs ``node_id, level``; ``edges`` needs ``parent_id, child_id``."""
    e = edges.select("parent_id", "child_id")
    leaf_ids = nodes.filter(pl.col("level") == 0).select(pl.col("node_id").alias("child_id"))
    current = e.join(leaf_ids, on="child_id", how="semi").select(pl.col("parent_id").alias("node_id"), pl.col("child_id").alias("leaf_id"))
    parts = [current]
    top = int(nodes.select(pl.col("level").max()).item() or 0) if nodes.height else 0
    for _ in range(2, top + 1):  # a summary of level L+1 has the leaves of its level-L children
        current = (e.join(current, left_on="child_id", right_on="node_id")
                   .select(pl.col("parent_id").alias("node_id"), "leaf_id").unique())
        if not current.height:
            break
        parts.append(current)
    out = pl.concat(parts).unique()
    return out.join(nodes.select("node_id", "level"), on="node_id").select("node_id", "level", "leaf_id")


def tree_sizes(nodes: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """``(node_id, n_leaves, n_children, n_docs)`` of every node (a leaf: 1 leaf, 0 children, its
    documents). ``nodes`` needs ``node_id, level, doc_ids``."""
    under = leaves_under(nodes, edges)
    leaves = under.group_by("node_id").agg(pl.len().alias("n_leaves").cast(pl.Int64))
    kids = edges.group_by(pl.col("parent_id").alias("node_id")).agg(pl.len().alias("n_children").cast(pl.Int64))
    return (nodes.select("node_id", "level", pl.col("doc_ids").list.len().alias("n_docs").cast(pl.Int64))
            .join(leaves, on="node_id", how="left").join(kids, on="node_id", how="left")
            .select("node_id",
                    pl.when(pl.col("level") == 0).then(1).otherwise(pl.col("n_leaves").fill_null(0)).alias("n_leaves"),
                    pl.col("n_children").fill_null(0), "n_docs"))
