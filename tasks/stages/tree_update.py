"""Stage ``tree-update``: the published tree brought up to date locally, not rebuilt (docs/METHODS.md §5.9).

The runner :func:`run_tree_update` reads the previous snapshot (nodes and edges once each,
``clusters/``), the staged leaf vectors, and hands them to the pure update —
:func:`arborag.tasks.tree.update.update_tree` (the corpus-wide tree; the cached summary vectors
come through the embedding cache, keyed by text) or, for per-document trees
(``tree.scope = document``), :func:`arborag.tasks.tree.update_docs.update_document_trees` (exact:
unchanged documents keep their trees, added and changed ones are built anew). It stages nodes,
edges, node vectors, the updated models and ``tree_info.json`` (drift counted on) exactly like
the build's tree stage, so the build's vectors/sparse/publish stages follow.

:func:`leaf_delta`, :func:`same_leaves` and :func:`drift_after` tell the flow what changed: the
leaves, and where the texts they stand for also occur (the snapshot's ``repeats.parquet``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from arborag.errors import SchemaError
from arborag.tasks.stage_context import StageContext, StageSummary
from arborag.tasks.tree.stats import UpdateLevelStats, fallback_summary

__all__ = ["CLUSTERS_DIR", "OUTPUTS", "TreeUpdateSummary", "drift_after", "leaf_delta", "published_repeats", "run_tree_update", "same_leaves"]

CLUSTERS_DIR = "clusters"
OUTPUTS = ("nodes.parquet", "edges.parquet", "node_vectors.parquet", "tree_info.json")


# -- what changed (the flow's decision) ------------------------------------------------------------
def published_repeats(snap: Path) -> pa.Table | None:
    """The snapshot's ``repeats`` table, or None for a snapshot written before it (all its chunks are leaves)."""
    path = snap / "repeats.parquet"
    return pq.read_table(path) if path.is_file() else None


def _occurrences(snap: Path, leaves: pa.Table) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(published, current) occurrences (``tasks/build/repeats.occurrence_keys``)."""
    from arborag.tasks.build.repeats import occurrence_keys, published_occurrence_keys

    old = published_occurrence_keys(pq.read_table(snap / "chunks.parquet", columns=["doc_id", "chunk_id", "header"]), published_repeats(snap))
    return old, occurrence_keys(leaves)


def _one_side(a: pl.DataFrame, b: pl.DataFrame) -> pl.DataFrame:
    return a.join(b, on=["chunk_id", "header", "stands_for"], how="anti")


def leaf_delta(snap: Path, leaves: pa.Table) -> tuple[int, int]:
    """``(added, removed)`` leaves of ``leaves`` against the snapshot's (a changed header counts as both;
    an occurrence of a repeated text that a leaf stands for is not a leaf)."""
    old, new = _occurrences(snap, leaves)
    is_leaf = pl.col("stands_for") == ""
    return _one_side(new.filter(is_leaf), old.filter(is_leaf)).height, _one_side(old.filter(is_leaf), new.filter(is_leaf)).height


def same_leaves(snap: Path, leaves: pa.Table) -> bool:
    """True when the snapshot holds exactly ``leaves`` (ids and headers) and the same occurrences of
    repeated texts, each stood for by the same leaf."""
    if not (snap / "chunks.parquet").exists():
        return False
    old, new = _occurrences(snap, leaves)
    return _one_side(old, new).height == 0 and _one_side(new, old).height == 0


def drift_after(snap: Path, info: dict[str, Any], leaves: pa.Table) -> dict[str, Any]:
    """Leaves changed incrementally since the last full fit if this update runs: ``{fitted, changed, share}``."""
    drift = info.get("drift") or {}
    fitted = int(drift.get("fitted") or (info.get("counts") or {}).get("levels", {}).get("0", 0) or leaves.num_rows or 1)
    added, removed = leaf_delta(snap, leaves)
    changed = int(drift.get("changed") or 0) + added + removed
    return {"fitted": fitted, "changed": changed, "share": changed / max(fitted, 1), "added": added, "removed": removed}


# -- the stage runner -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TreeUpdateSummary(StageSummary):
    """The updated tree (``runs.counts`` key ``tree-update``): as the build's tree stage, plus the
    leaves added and removed, the summaries rewritten per level, the clusters opened per level for
    new nodes no existing cluster admitted (counted in the rewritten ones too), the drift since the
    last full fit and each level's statistics."""

    nodes: int
    edges: int
    levels: dict[int, int]
    leaves_added: int
    leaves_removed: int
    clusters_touched: dict[str, int]  # level -> summaries rewritten
    clusters_opened: dict[str, int]  # level -> clusters opened (levels that opened none left out)
    summaries: int
    fallbacks: int
    fallback_reasons: dict[str, int]
    drift: dict[str, Any]  # fitted, changed, share
    stats: list[UpdateLevelStats]

    def counts(self) -> dict[str, Any]:
        return {**self.fields(), "stats": [s.counts() for s in self.stats]}

    def report(self) -> dict[str, Any]:
        return {k: v for k, v in self.fields().items() if k not in ("levels", "drift", "stats")}


def run_tree_update(ctx: StageContext, key: str) -> TreeUpdateSummary:
    """Update the published tree to the run's leaves and stage it under ``key`` (as the build's tree stage)."""
    from arborag.tasks.embedding.embedder import embed_function, embedder_of
    from arborag.tasks.embedding.vector_files import read_vectors_file, write_vectors_file
    from arborag.tasks.build.leaves import load_leaves
    from arborag.tasks.stages.tree import fallback_nodes, labelled, level_counts, write_tree_info
    from arborag.tasks.summarize import make_summarizer
    from arborag.storage.tables import read_table, write_table
    from arborag.tasks.tree.model import load_models

    stage_dir = ctx.staging_dir(key)
    prev = (ctx.corpus.manifest() or {}).get("snapshot")  # the published snapshot: publish has not switched it yet
    if prev is None:
        raise SchemaError("snapshot", "no published tree to update; run `arborag build` first")
    snap = ctx.corpus.snapshots_dir / prev
    info = json.loads((snap / "info.json").read_text(encoding="utf-8"))
    leaves = load_leaves(ctx)
    ids, leaf_vecs = read_vectors_file(stage_dir / "leaf_vectors.parquet")
    if not ids.equals(leaves.column("chunk_id")):
        raise SchemaError("leaf_vectors", "staged leaf vectors do not align with the leaves; delete the staging folder and run again")
    embedder, _ = embedder_of(ctx)
    summarizer = make_summarizer(ctx.config.summarize, cache_dir=ctx.corpus.cache_dir / "llm", embedder=embedder)
    prev_nodes, prev_edges = read_table("nodes", snap / "nodes.parquet"), read_table("edges", snap / "edges.parquet")
    per_document = ctx.config.tree.scope == "document"
    if per_document:  # exact: only added and changed documents' trees are built
        from arborag.tasks.tree.build import build_tree
        from arborag.tasks.tree.update_docs import update_document_trees

        added, removed = leaf_delta(snap, leaves)
        drift = {"fitted": leaves.num_rows, "changed": 0, "share": 0.0, "added": added, "removed": removed}
        embed = embed_function(ctx, "summaries")
        build = functools.partial(build_tree, embed=embed, summarizer=summarizer, cfg=ctx.config.cluster, tree_cfg=ctx.config.tree, run_id=ctx.run_id)
        result = update_document_trees(prev_nodes, prev_edges, read_table("chunks", snap / "chunks.parquet"), leaves, leaf_vecs,
                                       embed=embed, build=build, published_repeats=published_repeats(snap))
    else:
        from arborag.tasks.tree.frames import summary_doc_ids
        from arborag.tasks.tree.update import update_tree

        drift = drift_after(snap, info, leaves)
        result = update_tree(
            prev_nodes, prev_edges, load_models(snap / CLUSTERS_DIR), leaves, leaf_vecs,
            embed=embed_function(ctx, "summaries"), summarizer=summarizer, cfg=ctx.config.cluster, run_id=ctx.run_id,
            background=True,  # the new summaries embed while the nodes are labelled and written
        )
        # a kept leaf's doc_ids change when a text it stands for now occurs in more or fewer documents:
        # the kept summaries above it follow
        result.nodes = summary_doc_ids(result.nodes, result.edges)
    ctx.counters.summaries += result.summaries
    ctx.counters.tokens_in += int(getattr(summarizer, "tokens_in", 0) or 0)
    ctx.counters.tokens_out += int(getattr(summarizer, "tokens_out", 0) or 0)
    write_table("nodes", labelled(result.nodes, result.edges, summarizer, prev_nodes, per_document=per_document), stage_dir / "nodes.parquet")
    write_table("edges", result.edges, stage_dir / "edges.parquet")
    write_vectors_file(stage_dir / "node_vectors.parquet", result.nodes.column("node_id"), result.wait_vectors())
    touched = {str(s.level): s.rewritten for s in result.stats}
    opened = {str(s.level): s.opened for s in result.stats if s.opened}
    fallbacks, reasons = fallback_summary(result.stats)
    write_tree_info(stage_dir, ctx, result.models, fitted=drift["fitted"], changed=drift["changed"], fallbacks=fallback_nodes(result.nodes),
                    updated_from=prev, update={"leaves_added": drift["added"], "leaves_removed": drift["removed"], "clusters_touched": touched})
    return TreeUpdateSummary(
        nodes=result.nodes.num_rows, edges=result.edges.num_rows, levels=level_counts(result.nodes), leaves_added=drift["added"],
        leaves_removed=drift["removed"], clusters_touched=touched, clusters_opened=opened, summaries=result.summaries, fallbacks=fallbacks, fallback_reasons=reasons,
        drift={k: drift[k] for k in ("fitted", "changed", "share")}, stats=result.stats,
    )
