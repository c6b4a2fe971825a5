"""Stage ``links``: the links between leaves (``tasks/links.build_links``), staged as ``links.parquet``.

Runs in the build and in the update, after the tree, over the run's leaves: an update recomputes
the whole table from the current leaves (polars, well under a second per thousand leaves), so
added, changed and deleted documents are reflected exactly, document frequencies included. The
file is sealed into the snapshot by ``publish`` (``arborag sql``: ``SELECT * FROM links``) and read
by ``--mode hop`` (``query/hop.py``). Beside it, from the same leaves, ``boilerplate.parquet``: each
leaf's boilerplate share (``tasks/boilerplate.py``), which the query side uses to down-weight
repeated notices and page furniture (``query/boilerplate.py``); the shares are counted over every
occurrence of the strategy's chunks, so a text collapsed into one leaf still counts as repeated. And
``repeats.parquet`` (``tasks/build/repeats.py``): each occurrence of a repeated text that is not a
leaf of its own, with the leaf that stands for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from arborag.storage.tables import write_table
from arborag.tasks.boilerplate import boilerplate_shares
from arborag.tasks.build.leaves import load_leaves, load_occurrences
from arborag.tasks.build.repeats import repeats_table
from arborag.tasks.links import build_links
from arborag.tasks.stage_context import StageContext, StageSummary

__all__ = ["OUTPUTS", "LinksSummary", "leaf_shares", "run_links"]

OUTPUTS = ("links.parquet", "boilerplate.parquet", "repeats.parquet")


@dataclass(frozen=True)
class LinksSummary(StageSummary):
    """The staged links; recorded as it is (``runs.counts`` key ``links``)."""

    links: int
    title_links: int  # links of kind ``title``
    entities: int  # distinct linked names
    boilerplate_leaves: int  # leaves whose boilerplate share is at least 0.5
    repeats: int  # occurrences of a repeated text that another leaf stands for


def run_links(ctx: StageContext, key: str) -> LinksSummary:
    """Build the links of the run's leaves and stage them for build ``key``."""
    leaves = load_leaves(ctx)
    links = build_links(leaves, ctx.corpus.read("documents"))
    write_table("links", links, ctx.staging_dir(key) / OUTPUTS[0])
    shares = leaf_shares(boilerplate_shares(load_occurrences(ctx)), leaves)
    write_table("boilerplate", shares, ctx.staging_dir(key) / OUTPUTS[1])
    repeats = repeats_table(leaves)
    write_table("repeats", repeats, ctx.staging_dir(key) / OUTPUTS[2])
    values = shares.column("share").to_pylist()
    kinds = links.column("kind").to_pylist()
    return LinksSummary(links=links.num_rows, title_links=sum(1 for k in kinds if k == "title"),
                        entities=len(set(links.column("entity").to_pylist())),
                        boilerplate_leaves=sum(1 for v in values if v >= 0.5), repeats=repeats.num_rows)


def leaf_shares(shares: pa.Table, leaves: pa.Table) -> pa.Table:
    """The rows of ``shares`` (one per occurrence) whose node is one of ``leaves``, in their order."""
    return shares.filter(pc.is_in(shares.column("node_id"), leaves.column("chunk_id").combine_chunks()))
