"""Stage ``tree-update`` for per-document trees (``tree.scope = document``): exact, not approximate.

With one tree per document, a document's tree depends on that document's leaves alone (its own
clustering with the configured seed, its own summaries), so an update needs no fitted models
and no drift guard:

- a document whose leaves are unchanged (the same chunk ids and headers as in the published
  snapshot's ``chunks.parquet``, and the same repeats of a text inside it collapsed into the same
  leaf: per-document trees collapse repeats only within a document) keeps its whole tree as published: nodes, edges, and
  ``created_by_run`` of the run that built it;
- an added or changed document gets a new tree from :func:`arborag.tasks.tree.build.build_tree` over
  its leaves only (its old tree, if any, is dropped);
- a deleted document's tree is dropped.

The tables equal those of a full rebuild over the same leaves — the same node ids, texts,
edges and row order (level, then document position) — except ``created_by_run`` of the kept
trees. Kept summaries get their vectors from the embedding cache (keyed by text, so they are the
vectors the build stored); kept leaves take theirs from the staged leaf vectors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import polars as pl
import pyarrow as pa

from arborag.storage.frames import frame, to_table
from arborag.tasks.build.repeats import occurrence_keys, published_occurrence_keys
from arborag.tasks.tree.build import EmbedFn, TreeResult
from arborag.tasks.tree.model import UpdateResult
from arborag.tasks.tree.stats import UpdateLevelStats

__all__ = ["documents_to_rebuild", "update_document_trees"]

#: ``build(leaves, leaf_vectors)``: the trees of ``leaves`` (:func:`arborag.tasks.tree.build.build_tree` with the run's settings)
TreeBuilder = Callable[[pa.Table, np.ndarray], TreeResult]


def documents_to_rebuild(published_chunks: pa.Table, leaves: pa.Table, published_repeats: pa.Table | None = None) -> tuple[list[str], list[str], list[str]]:
    """``(rebuild, keep, drop)`` doc ids: documents of ``leaves`` whose leaf set (chunk ids and
    headers, and the repeats inside the document each leaf stands for) is new or differs from the
    published one (``published_chunks`` with the snapshot's ``published_repeats``); those whose set
    is the same; published documents no longer among ``leaves``. Each list sorted."""
    old, new = published_occurrence_keys(published_chunks, published_repeats), occurrence_keys(leaves)
    # a document differs when any of its (chunk_id, header, stands_for) rows is on one side only
    on = ["doc_id", "chunk_id", "header", "stands_for"]
    one_side = pl.concat([old.join(new, on=on, how="anti"), new.join(old, on=on, how="anti")]).select("doc_id").unique()
    docs_new = new.select("doc_id").unique()
    docs_old = old.select("doc_id").unique()
    rebuild = docs_new.join(one_side, on="doc_id", how="semi")
    keep = docs_new.join(one_side, on="doc_id", how="anti")
    drop = docs_old.join(docs_new, on="doc_id", how="anti")
    rebuild_ids, keep_ids, drop_ids = (sorted(f["doc_id"].to_list()) for f in (rebuild, keep, drop))
    return rebuild_ids, keep_ids, drop_ids


def update_document_trees(
    prev_nodes: pa.Table,
    prev_edges: pa.Table,
    published_chunks: pa.Table,
    leaves: pa.Table,
    leaf_vectors: np.ndarray,
    *,
    embed: EmbedFn,
    build: TreeBuilder,
    published_repeats: pa.Table | None = None,
) -> UpdateResult:
    """The per-document trees of ``leaves`` (a CHUNKS table aligned with ``leaf_vectors``),
    reusing the published trees of unchanged documents (module docstring). ``build(leaves,
    vectors)`` builds the trees of the added and changed documents: the build's
    :func:`~arborag.tasks.tree.build.build_tree` with the run's summarizer, config and run id.
    ``embed`` gives the kept summaries their vectors (cache hits: the build embedded them).
    ``published_repeats``: the snapshot's ``repeats`` table (None: it has none)."""
    rebuild, keep, drop = documents_to_rebuild(published_chunks, leaves, published_repeats)
    vectors = np.asarray(leaf_vectors, np.float32)
    dim = vectors.shape[1]

    # kept trees: every published node whose document is kept (a per-document node has one doc id)
    kept = frame(prev_nodes).with_row_index("row").with_columns(pl.col("doc_ids").list.first().alias("doc")).filter(pl.col("doc").is_in(keep))
    leaf_rows = frame(leaves.select(["chunk_id"])).rename({"chunk_id": "node_id"}).with_row_index("vrow")
    kept_vecs = np.zeros((kept.height, dim), np.float32)
    is_leaf = (kept["level"] == 0).to_numpy()
    if is_leaf.any():  # a kept leaf's vector is its row of the staged leaf vectors
        rows = kept.filter(pl.col("level") == 0).select("node_id").join(leaf_rows, on="node_id", how="left", maintain_order="left")["vrow"]
        kept_vecs[is_leaf] = vectors[rows.to_numpy()]
    if (~is_leaf).any():
        kept_vecs[~is_leaf] = embed(kept.filter(pl.col("level") > 0)["text"].to_list())  # cache hits: the build embedded them

    # rebuilt trees: build_tree over the leaves of the added and changed documents only
    parts = [kept.drop("doc")]
    part_vecs = [kept_vecs]
    edge_parts = [frame(prev_edges).filter(pl.col("parent_id").is_in(kept["node_id"].implode()))]
    rebuilt: list[UpdateLevelStats] = []
    if rebuild:
        mask = frame(leaves.select(["doc_id"]))["doc_id"].is_in(rebuild).to_numpy()
        built = build(leaves.filter(pa.array(mask)), vectors[mask])
        parts.append(frame(built.nodes).with_row_index("row"))
        part_vecs.append(built.vectors)
        edge_parts.append(frame(built.edges))
        rebuilt = [UpdateLevelStats(s.level, s.summaries, documents=len(rebuild), fallback_reasons=s.fallback_reasons or {})
                   for s in built.stats if s.level > 0]
    levels = {s.level for s in rebuilt}
    only_kept = [UpdateLevelStats(int(level), 0, documents=0)
                 for level in sorted(set(kept.filter(pl.col("level") > 0)["level"].to_list()) - levels)]
    stats = [replace(s, documents_kept=len(keep), documents_dropped=len(drop)) for s in sorted(rebuilt + only_kept, key=lambda s: s.level)]

    # one table in the build's order: level, then document (positions run document by document),
    # then each tree's own order; the vectors follow the rows
    # (a document's rows all come from one part, so "row" orders them within it)
    merged = pl.concat(parts, how="vertical_relaxed").with_columns(pl.col("doc_ids").list.first().alias("doc")).with_row_index("at")
    order = merged.sort(["level", "doc", "row"], maintain_order=True)["at"].to_numpy()
    all_vecs = np.concatenate(part_vecs)
    nodes = to_table(merged[order].drop(["at", "row", "doc"]), "nodes")
    edges = to_table(pl.concat(edge_parts, how="vertical_relaxed").unique(["parent_id", "child_id"], keep="first")
                     .sort(["level", "parent_id", "child_id"]), "edges")
    return UpdateResult(nodes, edges, all_vecs[order], [], stats)
