"""What the tree stages did per level, typed: :class:`LevelStats` (a build level) and
:class:`UpdateLevelStats` (an update level); the stages' summaries
(:class:`arborag.tasks.stages.tree.TreeSummary`, :class:`arborag.tasks.stages.tree_update.TreeUpdateSummary`)
hold them.

Each is made once, frozen, and turned into the plain JSON the run records (``runs.counts``, which
users query with DuckDB) by :meth:`counts`: a field left ``None`` did not apply to that level (a
level 0 is not clustered; a level of the update with no cluster to summarize has no token counts)
and is left out, so every key written is one that was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["LevelStats", "UpdateLevelStats", "fallback_summary"]


def _present(obj: Any) -> dict[str, Any]:
    """``obj``'s fields that apply (not ``None``), by name."""
    return {f.name: getattr(obj, f.name) for f in fields(obj) if getattr(obj, f.name) is not None}


@dataclass(frozen=True)
class LevelStats:
    """One level of a build (:func:`arborag.tasks.tree.build.build_tree`): level 0 counts the leaves
    (``n_nodes``, ``n_docs``); a summary level its clustering, summaries and the time each took."""

    level: int
    n_nodes: int
    n_docs: int | None = None  # level 0: the documents of the leaves
    n_trees: int | None = None  # trees clustered at this level (one per document with tree.scope = document)
    n_input: int | None = None  # nodes clustered (the level below)
    global_k: int | None = None  # one tree only: the global clustering's k
    local_ks: list[int] | None = None  # one tree only: each global cluster's local k
    cluster_s: float | None = None
    umap_s: float | None = None
    gmm_s: float | None = None
    gmm_fits: int | None = None
    umap_fits: int | None = None
    reclustered: int | None = None
    cut: int | None = None
    global_s: float | None = None
    global_umap_s: float | None = None
    global_layout_s: float | None = None
    umap_cpu_s: float | None = None
    gmm_cpu_s: float | None = None
    summarize_s: float | None = None
    n_clusters: int | None = None  # summaries written (one per cluster)
    n_fallback: int | None = None
    fallback_reasons: dict[str, int] | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    embed_s: float | None = None

    @property
    def summaries(self) -> int:
        return self.n_clusters or 0

    def counts(self) -> dict[str, Any]:
        """The JSON of this level in ``runs.counts`` (the fields that apply)."""
        return _present(self)


@dataclass(frozen=True)
class UpdateLevelStats:
    """One summary level of an update: the local update's (:func:`arborag.tasks.tree.update.update_tree`)
    or the per-document one's (:func:`arborag.tasks.tree.update_docs.update_document_trees`)."""

    level: int
    rewritten: int  # summaries written at this level
    # the local update
    removed_children: int | None = None
    new_children: int | None = None
    replaced_children: int | None = None
    training_dropped: int | None = None  # training rows of the level's fitted model whose node left the tree
    assigned: int | None = None  # nodes placed into clusters (new leaves, orphaned summaries)
    assigned_by_centroid: int | None = None  # of those, placed by the nearest centroid (no usable fit)
    assigned_leaves: int | None = None  # level 1: the new leaves
    rejected: int | None = None  # new nodes no cluster of the level admitted (farther from each centroid than its members)
    opened: int | None = None  # clusters opened for those (their summaries are new nodes of the next level)
    dissolved: int | None = None
    emptied: int | None = None
    split: int | None = None
    clusters: int | None = None  # clusters of the level after the update
    seconds: float | None = None
    # the per-document update
    documents: int | None = None  # documents whose trees were built anew
    documents_kept: int | None = None
    documents_dropped: int | None = None
    # summaries written (both)
    n_fallback: int | None = None
    fallback_reasons: dict[str, int] | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None

    @property
    def summaries(self) -> int:
        return self.rewritten

    def counts(self) -> dict[str, Any]:
        """The JSON of this level in ``runs.counts`` (the fields that apply)."""
        return _present(self)


def fallback_summary(stats: list[LevelStats] | list[UpdateLevelStats]) -> tuple[int, dict[str, int]]:
    """``(fallbacks, {reason: count})`` over a tree's per-level stats: how many clusters got the
    extractive fallback instead of the configured summarizer's summary, most frequent reason first."""
    reasons: dict[str, int] = {}
    for st in stats:
        for reason, n in (st.fallback_reasons or {}).items():
            reasons[reason] = reasons.get(reason, 0) + int(n)
    return sum(reasons.values()), dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
