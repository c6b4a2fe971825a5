"""Stage ``tree-update``: the published tree brought up to date locally, not rebuilt (SPEC §5 "Incremental update").

(First version: the interface; the local update lands next.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from arborag.tasks.context import StageContext

__all__ = ["CLUSTERS_DIR", "OUTPUTS", "drift_after", "leaf_delta", "run_tree_update", "same_leaves"]

CLUSTERS_DIR = "clusters"
OUTPUTS = ("nodes.parquet", "edges.parquet", "node_vectors.parquet", CLUSTERS_DIR, "tree_info.json")


def _snapshot_leaves(snap: Path) -> pl.DataFrame:
    df = pl.from_arrow(pq.read_table(snap / "chunks.parquet", columns=["chunk_id", "header"]))
    assert isinstance(df, pl.DataFrame)
    return df


def leaf_delta(snap: Path, leaves: pa.Table) -> tuple[int, int]:
    """``(added, removed)`` leaves of ``leaves`` against the snapshot's (a changed header counts as both)."""
    old = _snapshot_leaves(snap).select(pl.col("chunk_id"), pl.col("header").fill_null(""))
    new = pl.from_arrow(leaves.select(["chunk_id", "header"]))
    assert isinstance(new, pl.DataFrame)
    new = new.select(pl.col("chunk_id"), pl.col("header").fill_null(""))
    added = new.join(old, on=["chunk_id", "header"], how="anti").height
    removed = old.join(new, on=["chunk_id", "header"], how="anti").height
    return added, removed


def same_leaves(snap: Path, leaves: pa.Table) -> bool:
    """True when the snapshot holds exactly ``leaves`` (ids and headers)."""
    if not (snap / "chunks.parquet").exists():
        return False
    return leaf_delta(snap, leaves) == (0, 0)


def drift_after(snap: Path, info: dict[str, Any], leaves: pa.Table) -> dict[str, Any]:
    """Leaves changed incrementally since the last full fit if this update runs: ``{fitted, changed, share}``."""
    drift = info.get("drift") or {}
    fitted = int(drift.get("fitted") or (info.get("counts") or {}).get("levels", {}).get("0", 0) or leaves.num_rows or 1)
    added, removed = leaf_delta(snap, leaves)
    changed = int(drift.get("changed") or 0) + added + removed
    return {"fitted": fitted, "changed": changed, "share": changed / max(fitted, 1)}


def run_tree_update(ctx: StageContext, key: str) -> dict[str, Any]:
    """Update the published tree for the run's leaves and stage it under ``key``."""
    raise NotImplementedError("the local tree update lands next")


_ = json
