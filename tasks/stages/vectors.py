"""Stage ``vectors``: the snapshot's LanceDB vector table, staged as ``staging/<key>/vectors.lance``.

Written under ``vectors.partial`` and renamed on success, so its existence means "done" (a
build that failed later resumes after it).
"""

from __future__ import annotations

import shutil
from typing import Any

from arborag.errors import SchemaError
from arborag.storage.tables import read_table
from arborag.tasks.stage_context import StageContext
from arborag.tasks.staged_vectors import read_vectors_file

__all__ = ["OUTPUTS", "run_vectors"]

OUTPUTS = ("vectors.lance",)


def run_vectors(ctx: StageContext, key: str) -> dict[str, Any]:
    """Write the staged nodes and their vectors of build ``key`` as a LanceDB table."""
    from arborag.storage.vectors import write_vectors

    stage_dir = ctx.staging_dir(key)
    nodes = read_table("nodes", stage_dir / "nodes.parquet", missing_ok=False)
    ids, vectors = read_vectors_file(stage_dir / "node_vectors.parquet")
    if not ids.equals(nodes.column("node_id")):
        raise SchemaError("node_vectors", "staged vectors do not align with staged nodes; delete the staging folder and rebuild")
    out, tmp = stage_dir / OUTPUTS[0], stage_dir / "vectors.partial"
    for d in (out, tmp):
        if d.exists():
            shutil.rmtree(d)
    stats = write_vectors(tmp, nodes, vectors)
    tmp.rename(out)
    ctx.counters.stages["vectors"] = stats
    return dict(stats)
