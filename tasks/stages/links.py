"""Stage ``links``: the links between leaves (``tasks/links.build_links``), staged as ``links.parquet``.

Runs in the build and in the update, after the tree, over the run's leaves: an update recomputes
the whole table from the current leaves (polars, well under a second per thousand leaves), so
added, changed and deleted documents are reflected exactly, document frequencies included. The
file is sealed into the snapshot by ``publish`` (``arborag sql``: ``SELECT * FROM links``) and read
by ``--mode hop`` (``query/hop.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from arborag.storage.tables import write_table
from arborag.tasks.build.leaves import load_leaves
from arborag.tasks.links import build_links
from arborag.tasks.stage_context import StageContext, StageSummary

__all__ = ["OUTPUTS", "LinksSummary", "run_links"]

OUTPUTS = ("links.parquet",)


@dataclass(frozen=True)
class LinksSummary(StageSummary):
    """The staged links; recorded as it is (``runs.counts`` key ``links``)."""

    links: int
    title_links: int  # links of kind ``title``
    entities: int  # distinct linked names


def run_links(ctx: StageContext, key: str) -> LinksSummary:
    """Build the links of the run's leaves and stage them for build ``key``."""
    links = build_links(load_leaves(ctx), ctx.corpus.read("documents"))
    write_table("links", links, ctx.staging_dir(key) / OUTPUTS[0])
    kinds = links.column("kind").to_pylist()
    return LinksSummary(links=links.num_rows, title_links=sum(1 for k in kinds if k == "title"),
                        entities=len(set(links.column("entity").to_pylist())))
