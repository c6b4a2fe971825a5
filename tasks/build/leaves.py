"""The leaves a build starts from: the chunks of one strategy in document order (the tree's level 0).

- :func:`leaves_for` — the chunks of one strategy, sorted by document and ordinal;
- :func:`load_leaves` — the leaves of a run (computed once per run, shared by the stages).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from arborag.tasks.stage_context import StageContext

__all__ = ["leaves_for", "load_leaves"]


def leaves_for(chunks: pa.Table, strategy: str) -> pa.Table:
    """The chunks of ``strategy``, sorted by (doc_id, ordinal)."""
    leaves = chunks.filter(pc.equal(chunks.column("strategy"), strategy))
    order = pc.sort_indices(leaves, sort_keys=[("doc_id", "ascending"), ("ordinal", "ascending")])
    return leaves.take(order)


def load_leaves(ctx: StageContext) -> pa.Table:
    """The leaves of this run: the flow puts them in ``ctx.resources``; a runner called alone reads them."""
    return ctx.shared("leaves", lambda: leaves_for(ctx.corpus.read("chunks"), ctx.config.segment.strategy))
