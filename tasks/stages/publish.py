"""Stage ``publish``: seal the staged outputs of a build as a snapshot and switch the manifest.

Links the staged files the pipeline declares for the snapshot (``snapshot_files``: the build's
``nodes``, ``edges``, ``vectors.lance`` and ``sparse``; see :func:`arborag.flows.stage.snapshot_files`)
into a fresh snapshot folder (hard links: the staging folder goes right after, and no stage
writes into a staged file in place; a copy where the file system has no hard links),
adds the provenance a reader needs without touching the live corpus tables — ``chunks.parquet``
(the leaf chunks: doc id, section, ordinal, character offsets, header) and ``documents.parquet``
(the documents those leaves come from, text included, for titles, citations and stitching) —
publishes the sparse index (an Elasticsearch alias switch; nothing for the embedded engine),
writes ``info.json`` (build key, config hash, the embedder and sparse backend that built it,
the run, per-level counts) and switches ``manifest.json`` atomically. The staging folder goes.

Then retention runs (``retention.auto``; :func:`arborag.storage.snapshots.collect_garbage`, inside
this writer's lock): old snapshots, unreferenced cache entries, abandoned staging folders and
Prefect records go. Its summary is recorded in the run's counts (``gc``); a gc error is reported
there and logged, and the publish stands.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from arborag.tasks.stage_context import StageContext
from arborag.tasks.leaves import snapshot_id_for
from arborag.tasks.stages.tree import level_counts

__all__ = ["PROVENANCE_FILES", "run_publish", "snapshot_provenance", "tree_counts"]

#: Provenance written into every snapshot by :func:`snapshot_provenance` (readers never need the
#: live working tables, which a later ingest or update may already have changed).
PROVENANCE_FILES = ("chunks.parquet", "documents.parquet")
#: Copied when the tree stage staged them: the fitted clustering per level (the incremental update
#: starts from it) and ``tree_info.json``, merged into ``info.json`` (tree config, drift since the last full fit).
OPTIONAL_FILES = ("clusters",)
TREE_INFO = "tree_info.json"


def snapshot_provenance(nodes: pa.Table, chunks: pa.Table, documents: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The leaf chunks of ``nodes`` (level 0; ``node_id`` = ``chunk_id``) and the documents they
    come from, both sorted (doc_id, ordinal) / (doc_id): semi-joins in polars over Arrow."""
    import polars as pl

    leaf_ids = pl.from_arrow(nodes.select(["node_id", "level"])).filter(pl.col("level") == 0).select(pl.col("node_id").alias("chunk_id"))
    ch = pl.from_arrow(chunks).join(leaf_ids, on="chunk_id", how="semi").unique("chunk_id", keep="first", maintain_order=True)
    ch = ch.sort(["doc_id", "ordinal", "start_char"])
    docs = pl.from_arrow(documents).join(ch.select("doc_id").unique(), on="doc_id", how="semi").unique("doc_id", keep="last", maintain_order=True)
    return ch.to_arrow().cast(chunks.schema), docs.sort("doc_id").to_arrow().cast(documents.schema)


def tree_counts(nodes_path: Path) -> dict[str, Any]:
    """``{"nodes": n, "levels": {"0": n0, "1": n1, ...}}`` of a nodes file."""
    levels = level_counts(pq.read_table(nodes_path, columns=["level"]))
    return {"nodes": sum(levels.values()), "levels": {str(k): v for k, v in sorted(levels.items(), key=lambda kv: str(kv[0]))}}


def run_publish(ctx: StageContext, key: str, snapshot_files: Sequence[str]) -> dict[str, Any]:
    """Publish the staged build ``key`` as snapshot ``snap-<key>``: its ``snapshot_files`` (what the
    stages before publish declare for the snapshot), the optional files and the provenance."""
    if not snapshot_files:
        raise ValueError("publish needs the staged files of the snapshot: the pipeline declares none before publish")
    from arborag.storage.sparse import publish_sparse_index  # looked up per call (tests stand in for it)

    stage_dir = ctx.staging_dir(key)
    snap_id = snapshot_id_for(key)
    partial = ctx.corpus.partial_dir(snap_id)
    for name in snapshot_files:
        _seal(stage_dir / name, partial / name)
    for name in OPTIONAL_FILES:
        if (stage_dir / name).is_dir():
            _seal(stage_dir / name, partial / name)
    _write_provenance(ctx, partial)
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
    if (stage_dir / TREE_INFO).exists():
        import json

        info.update(json.loads((stage_dir / TREE_INFO).read_text(encoding="utf-8")))
    ctx.corpus.publish(partial, snap_id, info)
    shutil.rmtree(stage_dir, ignore_errors=True)
    gc = collect_after_publish(ctx)
    return {"snapshot": snap_id, **({"gc": gc} if gc is not None else {})}


def _seal(src: Path, dst: Path) -> None:
    """The staged file or folder ``src`` at ``dst`` in the snapshot, file by file hard-linked (module docs)."""
    if src.is_dir():
        shutil.copytree(src, dst, copy_function=_link_or_copy)
    else:
        _link_or_copy(src, dst)


def _link_or_copy(src: str | Path, dst: str | Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or none that links (the copy is what was always done)
        shutil.copy2(src, dst)


def collect_after_publish(ctx: StageContext) -> dict[str, Any] | None:
    """Apply retention after a publish (``retention.auto``); never raises: the publish stands."""
    if not ctx.config.retention.auto:
        return None
    import logging

    from arborag.storage.snapshots import collect_garbage

    try:  # the publish stage runs inside the writer's lock: gc does not take it again
        summary = collect_garbage(ctx.corpus, ctx.config.retention, lock=False).summary()
    except Exception as exc:  # noqa: BLE001 - reported and recorded, never fails the run that published
        summary = {"errors": [f"{type(exc).__name__}: {exc}"]}
    if summary.get("errors"):
        logging.getLogger("arborag.gc").warning("retention after publish: %s (the publish stands)", "; ".join(summary["errors"]))
    ctx.counters.stages["gc"] = summary
    return summary


def _write_provenance(ctx: StageContext, partial: Path) -> None:
    """``chunks.parquet`` and ``documents.parquet`` of the snapshot in ``partial``."""
    from arborag.storage.tables import read_table, write_table

    nodes = pq.read_table(partial / "nodes.parquet", columns=["node_id", "level"])
    chunks = read_table("chunks", ctx.corpus.table_path("chunks"))
    documents = read_table("documents", ctx.corpus.table_path("documents"))
    leaf_chunks, docs = snapshot_provenance(nodes, chunks, documents)
    write_table("chunks", leaf_chunks, partial / "chunks.parquet")
    write_table("documents", docs, partial / "documents.parquet")
