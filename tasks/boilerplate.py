"""Boilerplate share of every leaf, learned from the corpus's own statistics (no phrase lists).

A leaf's text is cut into word shingles (``n`` consecutive words, lower case, digits read as
``0`` so dates and page numbers do not make a repeated line unique). A shingle is *boilerplate*
when it is

- **shared across documents**: it occurs in at least ``k`` distinct documents, with
  ``k = max(min_docs, ceil(doc_share · N_docs))`` — legal notices, certifications,
  safe-harbour statements, website disclaimers repeat verbatim across filings; or
- **page furniture**: it occurs in at least ``max(min_units, ceil(unit_share · U_d))`` of the
  ``U_d`` sections (pages; a leaf stands for its own unit when it has no section) of one
  document ``d`` with ``U_d >= min_units`` — running headers, footers, table-of-contents lines.

A leaf's share is the fraction of its distinct shingles that are boilerplate, in [0, 1]; a leaf
shorter than ``n`` words scores 0. One pure function, :func:`boilerplate_shares` (polars over
Arrow), writes the ``boilerplate`` table (``storage.schemas.BOILERPLATE``); the ``links`` stage
(``tasks/stages/links.py``) runs it over the build's leaves, and ``query/boilerplate.py``
down-weights candidates by it before the best-first fill.
"""

from __future__ import annotations

import math

import polars as pl
import pyarrow as pa

from arborag.storage.schemas import BOILERPLATE

__all__ = ["boilerplate_shares"]


def boilerplate_shares(leaves: pa.Table, *, n: int = 8, min_docs: int = 3, doc_share: float = 0.05,
                       min_units: int = 3, unit_share: float = 0.5) -> pa.Table:
    """The ``boilerplate`` table (``node_id``, ``share``) of ``leaves`` (a CHUNKS table:
    ``chunk_id``, ``doc_id``, ``section_id``, ``text``): one row per leaf, in the leaves' order."""
    if n < 1:
        raise ValueError(f"boilerplate: shingle length n must be >= 1, not {n}")
    cols = ["chunk_id", "doc_id", "text"] + (["section_id"] if "section_id" in leaves.column_names else [])
    lv = pl.from_arrow(leaves.select(cols))
    assert isinstance(lv, pl.DataFrame)
    if lv.height == 0:
        return BOILERPLATE.empty_table()
    if "section_id" not in lv.columns:
        lv = lv.with_columns(pl.lit(None, dtype=pl.String).alias("section_id"))
    lv = lv.rename({"chunk_id": "node_id"}).with_columns(
        pl.coalesce(pl.col("section_id"), pl.col("node_id")).alias("unit"))
    words = (
        lv.select("node_id", "doc_id", "unit",
                  pl.col("text").str.to_lowercase().str.replace_all(r"\d", "0").str.extract_all(r"[\p{L}\p{N}]+").alias("w"))
        .explode("w").drop_nulls("w")
    )
    shingle = pl.concat_str([pl.col("w").shift(-i).over("node_id") for i in range(n)], separator=" ")
    sh = (words.with_columns(shingle.alias("s")).drop_nulls("s")
          .select("node_id", "doc_id", "unit", pl.col("s").hash().alias("h"))
          .unique(["node_id", "h"]))
    n_docs = lv.get_column("doc_id").n_unique()
    k = max(min_docs, math.ceil(doc_share * n_docs))
    across = sh.group_by("h").agg(pl.col("doc_id").n_unique().alias("df")).filter(pl.col("df") >= k).select("h")
    units = lv.group_by("doc_id").agg(pl.col("unit").n_unique().alias("U"))
    furniture = (
        sh.group_by("doc_id", "h").agg(pl.col("unit").n_unique().alias("u"))
        .join(units, on="doc_id")
        .filter((pl.col("U") >= min_units)
                & (pl.col("u") >= pl.max_horizontal(pl.lit(min_units), (pl.col("U") * unit_share).ceil().cast(pl.Int64))))
        .select("doc_id", "h")
    )
    flagged = pl.concat([
        sh.join(across, on="h", how="semi").select("node_id", "h"),
        sh.join(furniture, on=["doc_id", "h"], how="semi").select("node_id", "h"),
    ]).unique()
    per_leaf = (
        sh.group_by("node_id").agg(pl.len().alias("total"))
        .join(flagged.group_by("node_id").agg(pl.len().alias("bad")), on="node_id", how="left")
        .select("node_id", (pl.col("bad").fill_null(0) / pl.col("total")).alias("share"))
    )
    out = lv.select("node_id").join(per_leaf, on="node_id", how="left", maintain_order="left").with_columns(
        pl.col("share").fill_null(0.0).cast(pl.Float64))
    return out.to_arrow().cast(BOILERPLATE)
