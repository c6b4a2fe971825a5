"""Stage ``sparse``: the snapshot's sparse (BM25) index, staged as ``staging/<key>/sparse``.

Built under ``sparse.partial`` and renamed on success, so its existence means "done": a build
that failed here (say, Elasticsearch was down) resumes at this stage.

A leaf is indexed with its AutoContext header in front of its text (docs/METHODS.md §4: the header is
indexed with the chunk); the node text returned by a search stays the chunk text.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from arborag.storage.tables import read_table
from arborag.tasks.build.key import snapshot_id_for
from arborag.tasks.build.leaves import load_leaves
from arborag.tasks.stage_context import StageContext, StageSummary

__all__ = ["OUTPUTS", "SparseSummary", "run_sparse", "with_leaf_headers"]

OUTPUTS = ("sparse",)


def with_leaf_headers(nodes: pa.Table, leaves: pa.Table) -> pa.Table:
    """``nodes`` plus a ``header`` column: the leaf's chunk header (by ``node_id = chunk_id``),
    null for summary nodes and leaves without one. Row order is kept."""
    import polars as pl

    from arborag.storage.frames import frame

    if "header" not in leaves.column_names or leaves.num_rows == 0:
        return nodes
    heads = frame(leaves.select(["chunk_id", "header"])).filter(pl.col("header").is_not_null() & (pl.col("header") != ""))
    if heads.height == 0:
        return nodes
    ids = frame(nodes.select(["node_id"])).with_row_index("_row")
    joined = ids.join(heads.unique("chunk_id", keep="first").rename({"chunk_id": "node_id"}), on="node_id", how="left").sort("_row")
    return nodes.append_column("header", joined["header"].to_arrow().cast(pa.string()))


@dataclass(frozen=True)
class SparseSummary(StageSummary):
    """The staged sparse index as its backend reports it (``runs.counts`` key ``sparse``): the
    embedded index and Elasticsearch report different keys
    (:func:`arborag.storage.sparse.build_sparse_index`)."""

    index: dict[str, Any]

    def counts(self) -> dict[str, Any]:
        return dict(self.index)


def run_sparse(ctx: StageContext, key: str) -> SparseSummary:
    """Index the staged nodes of build ``key`` with the configured sparse backend."""
    from arborag.storage.sparse import build_sparse_index  # looked up per call (tests stand in for it)

    stage_dir = ctx.staging_dir(key)
    nodes = with_leaf_headers(read_table("nodes", stage_dir / "nodes.parquet", missing_ok=False), load_leaves(ctx))
    out, tmp = stage_dir / OUTPUTS[0], stage_dir / "sparse.partial"
    for d in (out, tmp):
        if d.exists():
            shutil.rmtree(d)
    tmp.mkdir(parents=True)
    stats = build_sparse_index(nodes, tmp, ctx.config.sparse, snapshot_id=snapshot_id_for(key))
    tmp.rename(out)
    return SparseSummary(index=dict(stats))
