"""Stage ``sparse``: the snapshot's sparse (BM25) index, staged as ``staging/<key>/sparse``.

Built under ``sparse.partial`` and renamed on success, so its existence means "done": a build
that failed here (say, Elasticsearch was down) resumes at this stage.
"""

from __future__ import annotations

import shutil
from typing import Any

from arborag.storage.tables import read_table
from arborag.tasks.context import StageContext
from arborag.tasks.leaves import snapshot_id_for

__all__ = ["OUTPUTS", "run_sparse"]

OUTPUTS = ("sparse",)


def run_sparse(ctx: StageContext, key: str) -> dict[str, Any]:
    """Index the staged nodes of build ``key`` with the configured sparse backend."""
    from arborag.storage.sparse import build_sparse_index  # looked up per call (tests stand in for it)

    stage_dir = ctx.staging_dir(key)
    nodes = read_table("nodes", stage_dir / "nodes.parquet", missing_ok=False)
    out, tmp = stage_dir / OUTPUTS[0], stage_dir / "sparse.partial"
    for d in (out, tmp):
        if d.exists():
            shutil.rmtree(d)
    tmp.mkdir(parents=True)
    stats = build_sparse_index(nodes, tmp, ctx.config.sparse, snapshot_id=snapshot_id_for(key))
    tmp.rename(out)
    ctx.counters.stages["sparse"] = stats
    return dict(stats)
