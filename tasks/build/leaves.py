"""The leaves a build starts from: the chunks of one strategy in document order (the tree's level 0),
one per repeated text (:mod:`arborag.tasks.build.repeats`).

- :func:`strategy_chunks` — every chunk of one strategy, sorted by document and ordinal (every
  occurrence of a repeated text included);
- :func:`leaves_for` — those chunks with repeats collapsed: the leaves every stage works on;
- :func:`load_leaves` / :func:`load_occurrences` — both of a run (computed once per run, shared by the stages).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from arborag.tasks.build.repeats import collapse_repeats
from arborag.tasks.stage_context import StageContext

__all__ = ["leaves_for", "load_leaves", "load_occurrences", "strategy_chunks"]


def strategy_chunks(chunks: pa.Table, strategy: str) -> pa.Table:
    """The chunks of ``strategy``, sorted by (doc_id, ordinal)."""
    leaves = chunks.filter(pc.equal(chunks.column("strategy"), strategy))
    order = pc.sort_indices(leaves, sort_keys=[("doc_id", "ascending"), ("ordinal", "ascending")])
    return leaves.take(order)


def leaves_for(chunks: pa.Table, strategy: str, *, scope: str = "corpus") -> pa.Table:
    """The leaves of ``strategy``: its chunks sorted by (doc_id, ordinal), one per repeated text,
    with ``doc_ids`` and ``repeats`` (:func:`~arborag.tasks.build.repeats.collapse_repeats`).
    ``scope`` is the tree scope: with per-document trees (``document``) a text repeated in two
    documents stays a leaf of each (each document's tree holds all of its own text); repeats
    inside one document collapse in either scope."""
    if scope not in ("corpus", "document"):
        raise ValueError(f"leaves_for: scope must be 'corpus' or 'document', not {scope!r}")
    return collapse_repeats(strategy_chunks(chunks, strategy), within_document=scope == "document")


def load_leaves(ctx: StageContext) -> pa.Table:
    """The leaves of this run: the flow puts them in ``ctx.resources``; a runner called alone reads them."""
    return ctx.shared("leaves", lambda: leaves_for(ctx.corpus.read("chunks"), ctx.config.segment.strategy, scope=ctx.config.tree.scope))


def load_occurrences(ctx: StageContext) -> pa.Table:
    """Every chunk of this run's strategy, repeats not collapsed (:func:`strategy_chunks`)."""
    return ctx.shared("occurrences", lambda: strategy_chunks(ctx.corpus.read("chunks"), ctx.config.segment.strategy))
