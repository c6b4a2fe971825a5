"""Stage ``links``: the links between leaves (``tasks/links.build_links``), staged as ``links.parquet``.

Runs in the build and in the update, after the tree, over the run's leaves: an update recomputes
the whole table from the current leaves (polars, well under a second per thousand leaves), so
added, changed and deleted documents are reflected exactly, document frequencies included. The
file is sealed into the snapshot by ``publish`` (``arborag sql``: ``SELECT * FROM links``) and read
by ``--mode hop`` (``query/hop.py``). Beside it, from the same leaves, ``boilerplate.parquet``: each
leaf's boilerplate share (``tasks/boilerplate.py``), which the query side uses to down-weight
repeated notices and page furniture (``query/boilerplate.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from arborag.storage.tables import write_table
from arborag.tasks.boilerplate import boilerplate_shares
from arborag.tasks.build.leaves import load_leaves
from arborag.tasks.links import build_links
from arborag.tasks.stage_context import StageContext, StageSummary

__all__ = ["OUTPUTS", "LinksSummary", "run_links"]

OUTPUTS = ("links.parquet", "boilerplate.parquet")


@dataclass(frozen=True)
class LinksSummary(StageSummary):
    """The staged links; recorded as it is (``runs.counts`` key ``links``)."""

    links: int
    title_links: int  # links of kind ``title``
    entities: int  # distinct linked names
    boilerplate_leaves: int  # leaves whose boilerplate share is at least 0.5


def run_links(ctx: StageContext, key: str) -> LinksSummary:
    """Build the links of the run's leaves and stage them for build ``key``."""
    leaves = load_leaves(ctx)
    links = build_links(leaves, ctx.corpus.read("documents"))
    write_table("links", links, ctx.staging_dir(key) / OUTPUTS[0])
    shares = boilerplate_shares(leaves)
    write_table("boilerplate", shares, ctx.staging_dir(key) / OUTPUTS[1])
    values = shares.column("share").to_pylist()
    kinds = links.column("kind").to_pylist()
    return LinksSummary(links=links.num_rows, title_links=sum(1 for k in kinds if k == "title"),
                        entities=len(set(links.column("entity").to_pylist())),
                        boilerplate_leaves=sum(1 for v in values if v >= 0.5))
