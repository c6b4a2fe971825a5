"""Label precision of a built tree: do a cluster's keywords describe its own leaves
better than its siblings' keywords do?

For every summary node ``c`` with at least one sibling (another child of one of its parents; the
nodes of the top level, which have no parent, are each other's siblings):

- ``own(c)``: the share of ``c``'s leaves that contain at least one of ``c``'s keywords;
- ``siblings(c)``: the same share for each sibling's keywords (still over ``c``'s leaves),
  averaged over the siblings;
- ``margin(c) = own(c) - siblings(c)``.

Leaves are tokenised exactly as the labels were computed (:func:`arborag.tasks.summarize.labels.leaf_terms`
and :func:`~arborag.tasks.summarize.labels.fold_plurals`), so "contains a keyword" means the same word. The
result averages over clusters (overall and per level). Keywords are those stored in ``nodes``:
a snapshot without labels has no label precision (``clusters = 0``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from arborag.storage.corpus import Corpus
from arborag.storage.tables import read_table
from arborag.storage.tree_tables import leaves_under
from arborag.tasks.summarize.labels import fold_plurals, leaf_terms

__all__ = ["label_precision", "label_precision_of", "sibling_pairs"]


def sibling_pairs(nodes: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """``(node_id, sibling_id)`` over summary nodes: children of a common parent, plus the
    parentless summary nodes of each level among themselves."""
    summaries = nodes.filter(pl.col("level") > 0).select("node_id", "level")
    kids = edges.select("parent_id", "child_id").join(summaries.select(pl.col("node_id").alias("child_id")), on="child_id", how="semi")
    pairs = kids.join(kids, on="parent_id", suffix="_s").select(pl.col("child_id").alias("node_id"), pl.col("child_id_s").alias("sibling_id"))
    roots = summaries.join(edges.select(pl.col("child_id").alias("node_id")), on="node_id", how="anti")
    root_pairs = roots.join(roots, on="level", suffix="_s").select("node_id", pl.col("node_id_s").alias("sibling_id"))
    return pl.concat([pairs, root_pairs]).filter(pl.col("node_id") != pl.col("sibling_id")).unique()


def label_precision(nodes: pl.DataFrame, edges: pl.DataFrame) -> dict[str, Any]:
    """``{"clusters", "own", "siblings", "margin", "wins", "by_level": {level: {...}}}`` (means over
    clusters; ``wins`` = share of clusters whose own keywords beat their siblings'). ``nodes``
    needs ``node_id, level, text, keywords``."""
    kw = (nodes.filter((pl.col("level") > 0) & pl.col("keywords").is_not_null())
          .select("node_id", pl.col("keywords").alias("term")).explode("term").drop_nulls("term"))
    labelled = kw.select("node_id").unique()
    pairs = sibling_pairs(nodes, edges).join(labelled, on="node_id", how="semi").join(labelled.rename({"node_id": "sibling_id"}), on="sibling_id", how="semi")
    empty: dict[str, Any] = {"clusters": 0, "own": None, "siblings": None, "margin": None, "wins": None, "by_level": {}}
    if not pairs.height:
        return empty
    under = leaves_under(nodes, edges).join(pairs.select("node_id").unique(), on="node_id", how="semi")
    leaves = nodes.filter(pl.col("level") == 0).select("node_id", "text").join(under.select(pl.col("leaf_id").alias("node_id")).unique(), on="node_id", how="semi")
    terms = fold_plurals(leaf_terms(leaves), kw["term"].unique().to_list()).select("leaf_id", "term")
    n_leaves = under.group_by("node_id").agg(pl.len().alias("n"))
    hits = under.join(terms, on="leaf_id")  # (node_id, level, leaf_id, term)
    own = (hits.join(kw, on=["node_id", "term"], how="semi").select("node_id", "leaf_id").unique()
           .group_by("node_id").len().rename({"len": "own_hits"}))
    sib = (hits.join(pairs, on="node_id").join(kw.rename({"node_id": "sibling_id"}), on=["sibling_id", "term"], how="semi")
           .select("node_id", "sibling_id", "leaf_id").unique().group_by("node_id", "sibling_id").len().rename({"len": "sib_hits"}))
    per_pair = pairs.join(sib, on=["node_id", "sibling_id"], how="left").with_columns(pl.col("sib_hits").fill_null(0))
    per_node = (per_pair.join(n_leaves, on="node_id").group_by("node_id")
                .agg((pl.col("sib_hits") / pl.col("n")).mean().alias("siblings"), pl.col("n").first())
                .join(own, on="node_id", how="left")
                .with_columns((pl.col("own_hits").fill_null(0) / pl.col("n")).alias("own"))
                .join(nodes.select("node_id", "level"), on="node_id")
                .with_columns((pl.col("own") - pl.col("siblings")).alias("margin")))

    def summary(df: pl.DataFrame) -> dict[str, Any]:
        row = df.select(pl.len().alias("clusters"), pl.col("own").mean(), pl.col("siblings").mean(), pl.col("margin").mean(),
                        (pl.col("margin") > 0).mean().alias("wins")).row(0, named=True)
        return {k: (int(v) if k == "clusters" else round(float(v), 4)) for k, v in row.items()}

    out = summary(per_node)
    out["by_level"] = {int(lv): summary(part) for (lv,), part in sorted(per_node.group_by("level"), key=lambda kv: kv[0][0])}
    return out


def label_precision_of(corpus_dir: str | Path, snapshot_dir: Path | None = None) -> dict[str, Any]:
    """:func:`label_precision` of a corpus's published snapshot (or ``snapshot_dir``)."""
    corpus = Corpus(corpus_dir)
    snap = snapshot_dir or corpus.published_dir()
    nodes = pl.from_arrow(read_table("nodes", snap / "nodes.parquet", missing_ok=False).select(["node_id", "level", "text", "keywords"]))
    edges = pl.from_arrow(read_table("edges", snap / "edges.parquet", missing_ok=False))
    assert isinstance(nodes, pl.DataFrame) and isinstance(edges, pl.DataFrame)
    return label_precision(nodes, edges)
