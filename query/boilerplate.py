"""Candidates down-weighted by their boilerplate share before the best-first fill.

The ``links`` stage writes ``boilerplate.parquet`` (``node_id``, ``share``; ``tasks/boilerplate.py``)
into the snapshot. :func:`downweight` maps each candidate row to its leaf's share and lowers its
score by ``weight · share · |score|`` (so ``score · (1 − weight · share)`` for a positive score,
and the same order-preserving penalty for a negative fused score). Rows with no share (summaries,
leaves of a snapshot written before the file existed) keep their score; a snapshot without the
file answers exactly as before. The shares are read once per snapshot, lazily, on the first fill.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["WEIGHT", "downweight", "row_shares"]

#: How much a fully repeated leaf loses: its score × (1 − WEIGHT).
WEIGHT = 0.5

_CACHE: dict[tuple[Path, int], np.ndarray | None] = {}


def row_shares(index: Any) -> np.ndarray | None:
    """The boilerplate share of every vector row of ``index`` (0 for a row without one), or
    ``None`` when the snapshot has no ``boilerplate.parquet``."""
    snap = getattr(index, "snapshot_dir", None)
    if snap is None:  # an index not opened from a snapshot folder has no shares
        return None
    node_ids = index.vectors.node_ids
    key = (Path(snap), len(node_ids))
    if key not in _CACHE:
        path = Path(snap) / "boilerplate.parquet"
        if not path.exists():
            _CACHE[key] = None
        else:
            import pyarrow.parquet as pq

            t = pq.read_table(path, columns=["node_id", "share"])
            share_of = dict(zip(t.column("node_id").to_pylist(), t.column("share").to_pylist(), strict=True))
            _CACHE[key] = np.fromiter((share_of.get(n, 0.0) for n in node_ids), dtype=np.float64, count=len(node_ids))
    return _CACHE[key]


def downweight(index: Any, rows: np.ndarray, scores: np.ndarray, *, weight: float = WEIGHT) -> np.ndarray:
    """``scores`` (aligned with vector ``rows``) lowered by the rows' boilerplate share."""
    shares = row_shares(index)
    if shares is None or weight == 0.0:
        return scores
    s = np.clip(shares[np.asarray(rows, dtype=np.int64)], 0.0, 1.0)
    finite = np.isfinite(scores)
    return np.where(finite, scores - weight * s * np.abs(np.where(finite, scores, 0.0)), scores)
