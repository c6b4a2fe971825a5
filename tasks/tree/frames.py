"""Node and edge assembly of the RAPTOR tree in polars (over Arrow), for :mod:`arborag.tasks.tree.build`.

A tree level is a polars frame with one row per node — ``node_id, text, n_tokens, doc_ids, pos``
(``pos``: document-order position: a leaf's rank, or the smallest position of a summary's
children) — plus a float32 matrix of the nodes' vectors, rows aligned. The functions here turn
the chunks table into level 0 (no Python lists of leaf columns), the clustering output into the
children of each cluster (a join + sort + group-by), and all levels into the ``nodes`` and
``edges`` tables, sorted deterministically and conformed to their schemas (same bytes on disk
as before).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np
import polars as pl
import pyarrow as pa

from arborag.errors import SchemaError
from arborag.storage.frames import to_table

__all__ = ["LEVEL_COLUMNS", "Level", "assemble_edges", "assemble_nodes", "cluster_members", "leaf_level", "split_by_document", "summary_doc_ids"]

LEVEL_COLUMNS = ("node_id", "text", "n_tokens", "doc_ids", "pos")


class Level:
    """One level of one tree: its nodes (a polars frame) and their vectors, rows aligned.

    Rows are always in document order, (pos, node_id): :func:`cluster_members` relies on it."""

    __slots__ = ("frame", "vectors")

    def __init__(self, frame: pl.DataFrame, vectors: np.ndarray) -> None:
        self.frame = frame
        self.vectors = vectors

    def __len__(self) -> int:
        return self.frame.height


def leaf_level(leaves: pa.Table, vectors: np.ndarray) -> Level:
    """Level 0 in document order (doc_id, ordinal, start_char, chunk_id); ``node_id = chunk_id``;
    ``doc_ids``: the leaves' ``doc_ids`` column (collapsed repeats: ``tasks/build/repeats.py``), else ``[doc_id]``.

    Raises :class:`SchemaError` when a chunk id occurs twice.
    """
    has_docs = "doc_ids" in leaves.column_names  # collapsed leaves: every document a repeated text occurs in
    df = pl.from_arrow(leaves.select(["chunk_id", "doc_id", "ordinal", "start_char", "text", "n_tokens", *(["doc_ids"] if has_docs else [])]))
    assert isinstance(df, pl.DataFrame)
    dup = df.filter(pl.col("chunk_id").is_duplicated()) if df["chunk_id"].n_unique() != df.height else df.clear()
    if dup.height:
        raise SchemaError("chunks", f"chunk_id {dup['chunk_id'][0]!r} occurs more than once; deduplicate the chunks before build_tree")
    order = _order(df, ["doc_id", "ordinal", "start_char", "chunk_id"])
    in_order = bool(np.array_equal(order, np.arange(len(order))))  # chunks often arrive in document order
    ordered = df if in_order else df[order]
    frame = ordered.select(
        pl.col("chunk_id").alias("node_id"),
        pl.col("text"),
        pl.col("n_tokens").cast(pl.Int32),
        (pl.col("doc_ids") if has_docs else pl.concat_list(pl.col("doc_id"))).alias("doc_ids"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("pos"),
        pl.col("doc_id"),
    )
    return Level(frame, vectors if in_order else vectors[order])


def _order(df: pl.DataFrame, keys: list[str]) -> np.ndarray:
    """The row permutation that sorts ``df`` by ``keys`` (unique together, so the order is total);
    sorting only the key columns, then gathering once, keeps wide text columns still."""
    return df.select(keys).with_row_index("row").sort(keys)["row"].to_numpy()


def split_by_document(level: Level) -> list[Level]:
    """One level per document (rows are in document order, so each document is one run of rows)."""
    bounds = level.frame.with_row_index("row").group_by("doc_id", maintain_order=True).agg(pl.col("row").min().alias("a"), pl.len().alias("n"))
    return [
        Level(level.frame.slice(int(a), int(n)), level.vectors[int(a) : int(a) + int(n)])
        for a, n in zip(bounds["a"].to_list(), bounds["n"].to_list())
    ]


def cluster_members(current: pl.DataFrame, clusters: Sequence[Sequence[tuple[int, float]]], first_job: int) -> pl.DataFrame:
    """The children of each cluster of ``current``, in document order (pos, node_id).

    Columns: ``job`` (``first_job`` + the cluster's index), ``row`` (the child's row in
    ``current``), ``p`` (soft membership probability) and the child's node columns.
    """
    sizes = np.fromiter((len(c) for c in clusters), dtype=np.int64, count=len(clusters))
    # One C-level pass over the (row, p) pairs: row, p, row, p, ... as float64 (rows < 2**53: exact).
    flat = np.fromiter(chain.from_iterable(chain.from_iterable(clusters)), dtype=np.float64, count=2 * int(sizes.sum()))
    rows = flat[0::2].astype(np.int64)
    probs = np.ascontiguousarray(flat[1::2])
    members = pl.DataFrame({"job": np.repeat(np.arange(first_job, first_job + len(clusters), dtype=np.int64), sizes), "row": rows, "p": probs})
    # A level's rows are in (pos, node_id) order (see Level), so sorting by the integer row
    # gives the document order without comparing strings; the children's columns are then one
    # gather by row (no join).
    members = members.sort(["job", "row"], maintain_order=True)
    return pl.concat([members, current.select(LEVEL_COLUMNS)[members["row"].to_numpy()]], how="horizontal")


def summary_inputs(members: pl.DataFrame) -> pl.DataFrame:
    """Per cluster (``job`` order): child ids and texts in document order, the union of their
    doc ids (sorted) and the smallest child position."""
    return members.group_by("job", maintain_order=True).agg(
        pl.col("node_id").alias("child_ids"),
        pl.col("text").alias("texts"),
        pl.col("doc_ids").list.explode(keep_nulls=False, empty_as_null=False).unique().sort().alias("doc_ids"),
        pl.col("pos").min().alias("pos"),
    )


def assemble_nodes(
    levels: Sequence[tuple[int, Level, pl.DataFrame]], dim: int, run_id: str
) -> tuple[pa.Table, np.ndarray]:
    """The NODES table and the vectors aligned with it, sorted by (level, pos, node_id).

    ``levels`` holds ``(level, Level, extra)`` pieces in build order; ``extra`` carries the
    per-node ``summary_of``, ``summarizer`` and ``summary_status`` columns.
    """
    if not levels:
        return to_table(_empty_nodes(), "nodes"), np.zeros((0, dim), np.float32)
    frames = [
        pl.concat([lv.frame.select(LEVEL_COLUMNS), extra], how="horizontal").with_columns(pl.lit(level, dtype=pl.Int32).alias("level"))
        for level, lv, extra in levels
    ]
    df = pl.concat(frames, how="vertical_relaxed")
    if df["node_id"].n_unique() != df.height:  # pragma: no cover - ids are content hashes
        raise SchemaError("nodes", "duplicate node ids in the tree (a chunk id equals a summary id?)")
    order = _order(df, ["level", "pos", "node_id"])
    n = len(order)
    where = np.empty(n, dtype=np.int64)  # where[i]: the sorted row of built row i
    where[order] = np.arange(n, dtype=np.int64)
    # Pieces arrive in build order, which is often already sorted (one corpus-wide tree): then
    # there is nothing to gather. Gathering in polars moves string views, not text; to_table
    # writes the text once (Arrow).
    ordered = df if np.array_equal(where, np.arange(n)) else df[order]
    table = to_table(ordered.with_columns(pl.lit(run_id, dtype=pl.String).alias("created_by_run")), "nodes")
    del df, ordered
    # Each level's vectors go straight to their sorted rows of one preallocated matrix (a block
    # copy when the piece's rows stay contiguous).
    vectors = np.empty((n, dim), dtype=np.float32)
    start = 0
    for _, lv, _ in levels:
        w = where[start : start + len(lv)]
        if len(w) and w[-1] - w[0] == len(w) - 1 and bool(np.all(np.diff(w) == 1)):
            vectors[w[0] : w[-1] + 1] = lv.vectors
        else:
            vectors[w] = lv.vectors
        start += len(lv)
    return table, vectors


def _empty_nodes() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"node_id": pl.String, "level": pl.Int32, "text": pl.String, "n_tokens": pl.Int32, "doc_ids": pl.List(pl.String),
                "summary_of": pl.String, "summarizer": pl.String, "summary_status": pl.String, "created_by_run": pl.String}
    )


def assemble_edges(pieces: Sequence[pl.DataFrame]) -> pa.Table:
    """The EDGES table from per-level ``(parent_id, child_id, probability, level)`` frames, sorted."""
    if not pieces:
        df = pl.DataFrame(schema={"parent_id": pl.String, "child_id": pl.String, "probability": pl.Float64, "level": pl.Int32})
    else:
        df = pl.concat(pieces, how="vertical_relaxed").sort(["level", "parent_id", "child_id"], maintain_order=True)
    return to_table(df.with_columns(pl.col("probability").cast(pl.Float32)), "edges")


def summary_doc_ids(nodes: pa.Table, edges: pa.Table) -> pa.Table:
    """``nodes`` with every summary's ``doc_ids`` recomputed, level by level, as the sorted union of its
    children's (through ``edges``), as a build makes them. An update that keeps a summary keeps its
    doc ids; when a kept leaf's ``doc_ids`` change (a repeated text now occurs in more or fewer
    documents) this carries the change up the tree. Rows and every other column stay as they are."""
    df = pl.from_arrow(nodes)
    assert isinstance(df, pl.DataFrame)
    ed = pl.from_arrow(edges.select(["parent_id", "child_id", "level"]))
    assert isinstance(ed, pl.DataFrame)
    docs = df.filter(pl.col("level") == 0).select("node_id", "doc_ids")
    top = int(df["level"].to_numpy().max()) if df.height else 0
    for level in range(1, top + 1):
        up = (ed.filter(pl.col("level") == level).join(docs.rename({"node_id": "child_id"}), on="child_id", how="inner")
              .group_by("parent_id").agg(pl.col("doc_ids").list.explode(keep_nulls=False, empty_as_null=False).unique().sort())
              .rename({"parent_id": "node_id"}))
        docs = pl.concat([docs, up.select("node_id", pl.col("doc_ids").cast(docs.schema["doc_ids"]))])
    fresh = df.select("node_id").join(docs.rename({"doc_ids": "_fresh"}), on="node_id", how="left", maintain_order="left")["_fresh"]
    out = df.with_columns(pl.when(fresh.is_not_null() & (pl.col("level") > 0)).then(fresh).otherwise(pl.col("doc_ids")).alias("doc_ids"))
    return to_table(out, "nodes")
