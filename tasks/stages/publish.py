"""Stage ``publish``: seal the staged outputs of a build as a snapshot and switch the manifest.

Links the staged files the pipeline declares for the snapshot (``snapshot_files``: the build's
``nodes``, ``edges``, ``vectors.lance`` and ``sparse``; see :func:`arborag.flows.stage.snapshot_files`)
into a fresh snapshot folder (hard links: the staging folder goes right after, and no stage
writes into a staged file in place; a copy where the file system has no hard links),
adds the provenance a reader needs without touching the live corpus tables — ``chunks.parquet``
(the leaf chunks and every other occurrence of a repeated text, ``repeats.parquet``: doc id,
section, ordinal, character offsets, header) and ``documents.parquet``
(the documents those leaves come from, text included, for titles, citations and stitching) —
publishes the sparse index (an Elasticsearch alias switch; nothing for the embedded engine),
writes ``info.json`` (build key, config hash, the embedder and sparse backend that built it,
the run, per-level counts, the content fingerprint) and switches ``manifest.json`` atomically.
The staging folder goes.

A build whose result is content-identical to the published snapshot — same nodes (the run that
wrote them aside), edges, links, node vectors, provenance and the config that shapes the indexes
(:func:`content_fingerprint`) — publishes nothing: the published snapshot stays, the manifest
records it as the result of this build key (so the next build of the same inputs is a no-op before
any stage runs) and the summary says ``unchanged``. A weekly rebuild then never fills
``retention.keep_last`` with copies of one snapshot.

Then retention runs (``retention.auto``; :func:`arborag.storage.snapshots.collect_garbage`, inside
this writer's lock): old snapshots, unreferenced cache entries, abandoned staging folders and
Prefect records go. Its summary is recorded in the run's counts (``gc``); a gc error is reported
there and logged, and the publish stands.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from arborag.tasks.build.key import snapshot_id_for
from arborag.tasks.stage_context import StageContext, StageSummary
from arborag.tasks.stages.tree import level_counts

__all__ = ["PROVENANCE_FILES", "PublishSummary", "content_fingerprint", "run_publish", "snapshot_provenance", "tree_counts"]

#: Provenance written into every snapshot by :func:`snapshot_provenance` (readers never need the
#: live working tables, which a later ingest or update may already have changed).
PROVENANCE_FILES = ("chunks.parquet", "documents.parquet")
#: Copied when the tree stage staged them: the fitted clustering per level (the incremental update
#: starts from it) and ``tree_info.json``, merged into ``info.json`` (tree config, drift since the last full fit).
OPTIONAL_FILES = ("clusters",)
TREE_INFO = "tree_info.json"


def snapshot_provenance(nodes: pa.Table, chunks: pa.Table, documents: pa.Table, repeats: pa.Table | None = None) -> tuple[pa.Table, pa.Table]:
    """The leaf chunks of ``nodes`` (level 0; ``node_id`` = ``chunk_id``) and the occurrences of
    repeated texts they stand for (``repeats``' ``chunk_id``), and the documents they come from,
    both sorted (doc_id, ordinal) / (doc_id): semi-joins in polars over Arrow."""
    import polars as pl

    from arborag.storage.frames import frame

    leaf_ids = frame(nodes.select(["node_id", "level"])).filter(pl.col("level") == 0).select(pl.col("node_id").alias("chunk_id"))
    if repeats is not None and repeats.num_rows:
        leaf_ids = pl.concat([leaf_ids, frame(repeats.select(["chunk_id"]))])
    ch = frame(chunks).join(leaf_ids, on="chunk_id", how="semi").unique("chunk_id", keep="first", maintain_order=True)
    ch = ch.sort(["doc_id", "ordinal", "start_char"])
    docs = frame(documents).join(ch.select("doc_id").unique(), on="doc_id", how="semi").unique("doc_id", keep="last", maintain_order=True)
    return ch.to_arrow().cast(chunks.schema), docs.sort("doc_id").to_arrow().cast(documents.schema)


def tree_counts(nodes_path: Path) -> dict[str, Any]:
    """``{"nodes": n, "levels": {"0": n0, "1": n1, ...}}`` of a nodes file."""
    levels = level_counts(pq.read_table(nodes_path, columns=["level"]))
    return {"nodes": sum(levels.values()), "levels": {str(k): v for k, v in sorted(levels.items(), key=lambda kv: str(kv[0]))}}


@dataclass(frozen=True)
class PublishSummary(StageSummary):
    """The published snapshot; ``unchanged``: an equal one was already published and stays current;
    ``gc``: what retention did after the publish (None: ``retention.auto`` is off). The publish has
    no entry of its own in the run record; retention's is ``gc`` (:func:`collect_after_publish`)."""

    snapshot: str
    unchanged: bool = False
    gc: dict[str, Any] | None = None

    def counts(self) -> dict[str, Any]:
        return {}

    def report(self) -> dict[str, Any]:
        if self.unchanged:
            return {"snapshot": self.snapshot, "unchanged": True}
        return {"snapshot": self.snapshot, **({"gc": self.gc} if self.gc is not None else {})}


def run_publish(ctx: StageContext, key: str, snapshot_files: Sequence[str]) -> PublishSummary:
    """Publish the staged build ``key`` as snapshot ``snap-<key>``: its ``snapshot_files`` (what the
    stages before publish declare for the snapshot), the optional files and the provenance."""
    if not snapshot_files:
        raise ValueError("publish needs the staged files of the snapshot: the pipeline declares none before publish")
    from arborag.storage.sparse import publish_sparse_index  # looked up per call (tests stand in for it)

    stage_dir = ctx.staging_dir(key)
    snap_id = snapshot_id_for(key)
    leaf_chunks, docs = _provenance(ctx, stage_dir / "nodes.parquet")
    content = content_fingerprint(ctx, stage_dir, snapshot_files, leaf_chunks, docs)
    same = _published_with(ctx, content, key)
    if same is not None:
        shutil.rmtree(stage_dir, ignore_errors=True)
        return PublishSummary(snapshot=same, unchanged=True)
    partial = ctx.corpus.partial_dir(snap_id)
    for name in snapshot_files:
        _seal(stage_dir / name, partial / name)
    for name in OPTIONAL_FILES:
        if (stage_dir / name).is_dir():
            _seal(stage_dir / name, partial / name)
    from arborag.storage.tables import write_table

    write_table("chunks", leaf_chunks, partial / "chunks.parquet")
    write_table("documents", docs, partial / "documents.parquet")
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
        "content": content,
    }
    if (stage_dir / TREE_INFO).exists():
        import json

        info.update(json.loads((stage_dir / TREE_INFO).read_text(encoding="utf-8")))
    ctx.corpus.publish(partial, snap_id, info)
    shutil.rmtree(stage_dir, ignore_errors=True)
    gc = collect_after_publish(ctx)
    return PublishSummary(snapshot=snap_id, gc=gc)


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


def _provenance(ctx: StageContext, nodes_path: Path) -> tuple[pa.Table, pa.Table]:
    """The snapshot's ``chunks`` and ``documents`` (:func:`snapshot_provenance`) of the staged nodes."""
    from arborag.storage.tables import read_table

    nodes = pq.read_table(nodes_path, columns=["node_id", "level"])
    chunks = read_table("chunks", ctx.corpus.table_path("chunks"))
    documents = read_table("documents", ctx.corpus.table_path("documents"))
    repeats_path = nodes_path.with_name("repeats.parquet")  # staged by the links stage
    repeats = read_table("repeats", repeats_path) if repeats_path.is_file() else None
    return snapshot_provenance(nodes, chunks, documents, repeats)


#: Columns that say which run wrote a row or when, not what the snapshot holds.
_RUN_COLUMNS = {"nodes": ("created_by_run",), "documents": ("ingested_at",)}


def _table_digest(table: pa.Table, drop: Sequence[str] = ()) -> str:
    """BLAKE2b of ``table``'s Arrow IPC stream (one record batch), ``drop`` columns left out."""
    from arborag.hashing import hash_bytes

    table = table.drop_columns([c for c in drop if c in table.column_names]).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(1, table.num_rows))
    return hash_bytes(sink.getvalue().to_pybytes())


def content_fingerprint(ctx: StageContext, stage_dir: Path, snapshot_files: Sequence[str], chunks: pa.Table, documents: pa.Table) -> str:
    """What a reader of the snapshot staged in ``stage_dir`` would see, hashed: its nodes (without
    the run that wrote them), edges, links and node vectors as staged, its provenance ``chunks`` and
    ``documents`` (without ingest times), and the config behind the vector table and the sparse
    index (the embedder, the sparse backend's settings, the strategy). The vector table and the
    sparse index are built from these, so they are not read."""
    import json

    parts: dict[str, str] = {}
    for name in ("nodes.parquet", "edges.parquet", "node_vectors.parquet", *snapshot_files):
        path = stage_dir / name
        if name.endswith(".parquet") and name not in parts and path.is_file():
            parts[name] = _table_digest(pq.read_table(path), _RUN_COLUMNS.get(name.removesuffix(".parquet"), ()))
    parts["chunks"] = _table_digest(chunks)
    parts["documents"] = _table_digest(documents, _RUN_COLUMNS["documents"])
    tree_info = stage_dir / TREE_INFO
    from arborag.hashing import hash_json

    return hash_json({
        "tables": parts,
        "files": sorted(snapshot_files),
        "tree_config": json.loads(tree_info.read_text(encoding="utf-8")).get("tree_config") if tree_info.is_file() else None,
        "embed": ctx.config.embed.model_dump(mode="json"),
        "sparse": ctx.config.sparse.model_dump(mode="json"),
        "strategy": ctx.config.segment.strategy,
        "corpus_name": ctx.corpus.root.name,
    })


def _published_with(ctx: StageContext, content: str, key: str) -> str | None:
    """The published snapshot when its content fingerprint is ``content`` (it is then recorded in
    the manifest as the result of build ``key``; the snapshot is not touched), else None."""
    man = ctx.corpus.manifest()
    if not man or man.get("content") != content or not man.get("snapshot"):
        return None
    snap = str(man["snapshot"])
    info = {k: v for k, v in man.items() if k not in ("snapshot", "published_at")}
    try:
        ctx.corpus.publish_existing(snap, {**info, "build_key": key})
    except Exception:  # noqa: BLE001 - the published snapshot is gone or unreadable: publish afresh
        return None
    return snap
