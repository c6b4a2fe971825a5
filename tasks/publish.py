"""Stage ``publish``: seal the staged outputs of a build as a snapshot and switch the manifest.

Copies ``nodes``, ``edges``, ``vectors.lance`` and ``sparse`` into a fresh snapshot folder,
publishes the sparse index (an Elasticsearch alias switch; nothing for the embedded engine),
writes ``info.json`` (build key, config hash, the embedder and sparse backend that built it,
the run, per-level counts) and switches ``manifest.json`` atomically. The staging folder goes.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from arborag.tasks.context import StageContext
from arborag.tasks.leaves import snapshot_id_for
from arborag.tasks.nodes import level_counts

__all__ = ["SNAPSHOT_FILES", "run_publish", "tree_counts"]

SNAPSHOT_FILES = ("nodes.parquet", "edges.parquet", "vectors.lance", "sparse")


def tree_counts(nodes_path: Path) -> dict[str, Any]:
    """``{"nodes": n, "levels": {"0": n0, "1": n1, ...}}`` of a nodes file."""
    levels = level_counts(pq.read_table(nodes_path, columns=["level"]))
    return {"nodes": sum(levels.values()), "levels": {str(k): v for k, v in sorted(levels.items(), key=lambda kv: str(kv[0]))}}


def run_publish(ctx: StageContext, key: str) -> dict[str, Any]:
    """Publish the staged build ``key`` as snapshot ``snap-<key>``."""
    from arborag.storage.sparse import publish_sparse_index  # looked up per call (tests stand in for it)

    stage_dir = ctx.staging_dir(key)
    snap_id = snapshot_id_for(key)
    partial = ctx.corpus.partial_dir(snap_id)
    for name in SNAPSHOT_FILES:
        src, dst = stage_dir / name, partial / name
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)
    publish_sparse_index(partial / "sparse", ctx.config.sparse, snapshot_id=snap_id, corpus_name=ctx.corpus.root.name)
    info = {
        "build_key": key,
        "strategy": ctx.config.segment.strategy,
        "config_hash": ctx.config.config_hash(),
        "embed": ctx.config.embed.model_dump(mode="json"),
        "sparse_backend": ctx.config.sparse.backend,
        "corpus_name": ctx.corpus.root.name,
        "run_id": ctx.run_id,
        "counts": tree_counts(partial / "nodes.parquet"),
    }
    ctx.corpus.publish(partial, snap_id, info)
    shutil.rmtree(stage_dir, ignore_errors=True)
    return {"snapshot": snap_id}
