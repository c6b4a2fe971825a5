"""Stage ``plan`` of ``arborag update``: the documents table after an update, and the plan that says why.

The pure function :func:`plan_documents` reads the sources into the existing ``documents`` table
with the ingest machinery (:func:`arborag.tasks.stages.documents.build_documents`: unchanged files are
not parsed again, a changed file replaces its document), classifies every uri with
:func:`arborag.tasks.changes.documents_diff.diff_documents` (added / changed / deleted / unchanged /
failed) and, when ``prune`` is on, removes the deleted uris with the ingest merge's own
``detach`` (a document goes when no uri holds its content any more; a duplicate uri that goes
is struck from ``metadata.duplicate_uris``). ``ingest`` stays additive; only ``update`` prunes.

The sources of an update are the whole corpus: a uri of the documents table that the sources do
not hold any more is *deleted* (``--dry-run`` shows which before anything happens). The delete
guard (:class:`DeleteLimit`, :func:`check_deletes`) stops an update that would delete more than a
bounded share of the documents held (default: more than half) before anything is written: a run
given one new file where the whole folder was meant would otherwise empty the index.

The runner :func:`run_update_documents` writes the table (only when it changed) and returns the
plan's counts; :func:`update_estimate` says what the tree will cost (new leaves to embed,
clusters to re-summarize per level, roughly). Once the leaves are segmented, :func:`decide` says
how the tree follows them: not at all, incrementally, or by a full rebuild — and why.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from arborag.config import ArboragConfig
from arborag.errors import ArboragError
from arborag.tasks.changes.documents_diff import DocumentsDiff, diff_documents
from arborag.tasks.stage_context import StageContext, StageSummary, table_fingerprint
from arborag.tasks.stages.documents import build_documents
from arborag.tasks.ingest.existing import RECORD_URI_PATTERN, duplicate_uris
from arborag.tasks.ingest.merge import DocumentState
from arborag.tasks.ingest.records import IngestReport

__all__ = ["DEFAULT_MAX_DELETE", "DeleteLimit", "DeletesRefused", "PlanSummary", "UpdatePlan", "check_deletes", "decide", "deleted_documents", "failure_rows", "held_documents", "incoming_uris", "plan_documents", "prune_documents", "run_update_documents", "update_estimate"]


@dataclass(frozen=True)
class UpdatePlan:
    """The documents table after the update and the per-uri diff that produced it."""

    documents: pa.Table  # DOCUMENTS: the table to write
    diff: DocumentsDiff
    report: IngestReport
    pruned: bool

    def as_dict(self, *, examples: int = 20) -> dict[str, Any]:
        """Counts plus the first uris of each class (for the printed plan and ``runs``)."""
        out: dict[str, Any] = dict(self.diff.counts)
        out["pruned"] = self.pruned
        out["deleted_documents"] = deleted_documents(self.diff)
        for kind in ("added", "changed", "deleted", "failed"):
            out[f"{kind}_uris"] = getattr(self.diff, kind).column("uri").to_pylist()[:examples]
        return out


#: The delete guard's default: an update may delete at most half of the documents held.
DEFAULT_MAX_DELETE = "50%"


@dataclass(frozen=True)
class DeleteLimit:
    """How many documents one update may delete: ``count`` (a number) or ``percent`` of those held;
    neither: no limit. Parsed from ``"N"``, ``"N%"`` or ``"all"`` by :meth:`parse`."""

    count: int | None = None
    percent: float | None = None

    @classmethod
    def parse(cls, text: str | int | None) -> "DeleteLimit":
        if text is None:
            return cls.parse(DEFAULT_MAX_DELETE)
        raw = str(text).strip().lower()
        try:
            if raw in ("all", "none", "off"):
                return cls()
            if raw.endswith("%"):
                pct = float(raw[:-1])
                if 0 <= pct <= 100:
                    return cls(percent=pct)
            else:
                n = int(raw)
                if n >= 0:
                    return cls(count=n)
        except ValueError:
            pass
        raise ArboragError(f"max-delete {text!r}: give a number of documents (e.g. 10), a share of the corpus (e.g. 50%), or 'all' for no limit")

    def allowed(self, held: int) -> int | None:
        """The most documents that may go out of ``held``; None: no limit."""
        if self.count is not None:
            return self.count
        if self.percent is not None:
            return int(held * self.percent / 100)
        return None

    def describe(self) -> str:
        if self.count is not None:
            return f"--max-delete {self.count}"
        if self.percent is not None:
            return f"--max-delete {self.percent:g}%"
        return "no delete limit"


class DeletesRefused(ArboragError):
    """An update would delete more documents than its :class:`DeleteLimit` allows; nothing was
    written. ``plan`` is the plan's dict (:meth:`UpdatePlan.as_dict`) to print."""

    def __init__(self, plan: dict[str, Any], held: int, allowed: int, limit: DeleteLimit) -> None:
        self.plan, self.held, self.allowed, self.limit = plan, held, allowed, limit
        n = int(plan.get("deleted_documents", 0))
        super().__init__(
            f"refused: this update would delete {n} of the {held} documents the corpus holds, more than {limit.describe()} "
            f"allows ({allowed}). The SOURCES of `arborag update` are the whole corpus: a file left out is deleted from the index. "
            "Nothing was written. To index only the named files and keep the rest, run `arborag add FILE... --corpus DIR`; "
            "to mirror the sources anyway, run again with --max-delete N (or a share, e.g. 100%) or --allow-delete; "
            "--no-prune keeps every document"
        )

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (an orchestrator may carry it across processes)
        return (type(self), (self.plan, self.held, self.allowed, self.limit))


def held_documents(documents: pa.Table) -> int:
    """How many documents ``documents`` holds (ok rows: one per content, whatever its uris)."""
    return int(pc.sum(pc.equal(documents.column("status"), "ok")).as_py() or 0) if documents.num_rows else 0


def deleted_documents(diff: DocumentsDiff) -> int:
    """Documents a pruning update removes: contents of deleted uris that no uri holds afterwards.
    A moved file (same content at a new uri), a deleted duplicate uri and a stale error row count
    nothing; a changed file is a change, not a delete."""
    ids = diff.deleted.column("doc_id")
    return int(pc.count_distinct(ids.filter(pc.is_in(ids, value_set=diff.gone_doc_ids))).as_py() or 0)


def check_deletes(plan: dict[str, Any], held: int, limit: DeleteLimit) -> None:
    """Raise :class:`DeletesRefused` when ``plan`` (pruning) deletes more documents
    (``deleted_documents``) than ``limit`` allows of the ``held`` ones."""
    n = int(plan.get("deleted_documents", 0) or 0)
    if not n or not plan.get("pruned", True):
        return
    allowed = limit.allowed(held)
    if allowed is not None and n > allowed:
        raise DeletesRefused(plan, held, allowed, limit)


def failure_rows(existing: pa.Table, report: IngestReport) -> list[dict[str, Any]]:
    """Every source that failed to read in this run with its reason, and ``new``: False when the
    table already recorded the same uri failing for the same reason (a file still broken as it
    was), True otherwise (a new failure: a file that read before, a new file, another reason)."""
    df = pl.from_arrow(existing.select(["uri", "status", "error"]))
    assert isinstance(df, pl.DataFrame)
    known = {(u, e) for u, e in df.filter(pl.col("status") == "error").select("uri", "error").iter_rows()}
    return [{"uri": f.uri, "reason": f.reason, "new": (f.uri, f.reason) not in known} for f in report.failed]


def incoming_uris(documents: pa.Table, files: Sequence[str], failed: Sequence[str]) -> pa.Table:
    """``uri, doc_id, status`` of every uri that ``files`` hold in ``documents`` (ok rows, their
    ``duplicate_uris``, error rows; a JSONL record ``FILE#L<n>`` belongs to ``FILE``).

    A uri that failed to read in this run (``failed``) has status ``error`` even where the
    table keeps the document read from it before (a failing file is not a delete).
    """
    df = pl.from_arrow(documents.select(["doc_id", "uri", "status", "metadata"]))
    assert isinstance(df, pl.DataFrame)
    ok = df.filter(pl.col("status") == "ok")
    dups = ok.select("doc_id", duplicate_uris(pl.col("metadata")).alias("uri")).explode("uri").drop_nulls("uri")
    pairs = pl.concat([
        ok.select("uri", "doc_id", pl.lit("ok").alias("status")),
        dups.select("uri", "doc_id", pl.lit("ok").alias("status")),
        df.filter(pl.col("status") == "error").select("uri", pl.lit(None, dtype=pl.String).alias("doc_id"), pl.lit("error").alias("status")),
    ])
    files_s = pl.Series("f", list(files), dtype=pl.String)
    file_of = pl.col("uri").str.replace(RECORD_URI_PATTERN, "$1")
    mine = pairs.filter(pl.col("uri").is_in(files_s) | file_of.is_in(files_s))
    failed_s = pl.Series("x", list(failed), dtype=pl.String)
    mine = mine.with_columns(pl.when(pl.col("uri").is_in(failed_s)).then(pl.lit("error")).otherwise(pl.col("status")).alias("status"))
    # one row per uri: an error this run wins over the document kept from before
    mine = mine.sort(["uri", "status"], descending=[False, False]).unique("uri", keep="first", maintain_order=True)
    return mine.to_arrow()


def prune_documents(documents: pa.Table, deleted_uris: Sequence[str]) -> pa.Table:
    """``documents`` without ``deleted_uris`` (the ingest merge's ``detach`` for each)."""
    if not deleted_uris:
        return documents
    state = DocumentState(documents, list(deleted_uris), IngestReport())
    for uri in deleted_uris:
        state.detach(uri)
    return state.to_table()


def plan_documents(existing: pa.Table, files: Sequence[str], cfg: ArboragConfig, *, prune: bool, progress: Any = None,
                   discovered: bool = False, skip: Collection[str] = (), stats: list[tuple[str, os.stat_result, int]] | None = None) -> UpdatePlan:
    """Read ``files`` into ``existing``, diff by uri and content hash, prune deleted uris (``prune``).
    ``discovered``: ``files`` are what source discovery found (read as given, not walked again).
    ``skip``: files whose bytes ``existing`` already holds as they are now (:mod:`arborag.tasks.changes.source_stats`):
    not read, unchanged. ``stats``: gets the stat of every file read (``build_documents``)."""
    to_read = [f for f in files if f not in skip] if skip else list(files)
    table, report = build_documents(to_read, cfg.ingest, existing=existing, progress=progress, discovered=discovered, stats=stats)
    if len(to_read) < len(files):
        report.files += len(files) - len(to_read)
        report.skipped_unchanged_files += len(files) - len(to_read)
        if progress is not None:
            progress(len(files) - len(to_read))
    incoming = incoming_uris(table, files, [f.uri for f in report.failed])
    diff = diff_documents(existing, incoming)
    if prune and diff.deleted.num_rows:
        table = prune_documents(table, diff.deleted.column("uri").to_pylist())
    return UpdatePlan(documents=table, diff=diff, report=report, pruned=prune)


@dataclass(frozen=True)
class PlanSummary(StageSummary):
    """The plan of an update: ``plan`` is :meth:`UpdatePlan.as_dict` (the diff's counts, ``pruned``,
    ``deleted_documents`` and the first uris of each class), then what the run read and wrote.
    ``estimate`` and ``refused`` are a dry run's (None otherwise). The run record (``runs.counts``
    key ``plan``) leaves out the uri and id lists, the failures, the estimate and the refusal."""

    plan: dict[str, Any]
    files: int
    held: int
    failures: list[dict[str, Any]]
    new_failures: int
    files_read: int
    written: bool
    fingerprint: str
    new_doc_ids: list[str]
    gone_doc_ids: list[str]
    estimate: dict[str, Any] | None = None
    refused: str | None = None

    def report(self) -> dict[str, Any]:
        out = {**self.plan, **{k: v for k, v in self.fields().items() if k != "plan"}}
        return {k: v for k, v in out.items() if k not in ("estimate", "refused") or v is not None}

    def counts(self) -> dict[str, Any]:
        left_out = ("new_doc_ids", "gone_doc_ids", "estimate", "failures", "refused")
        return {k: v for k, v in self.report().items() if not k.endswith("_uris") and k not in left_out}


def run_update_documents(ctx: StageContext, files: list[str], prune: bool, dry_run: bool = False) -> PlanSummary:
    """Plan the update of ``files`` and (unless ``dry_run``) write the documents table; the plan's counts.

    The delete guard: ``ctx.resources["delete_limit"]`` (a :class:`DeleteLimit`; absent: the
    default, :data:`DEFAULT_MAX_DELETE`) bounds how many uris a pruning update deletes. Past it,
    :class:`DeletesRefused` is raised before anything is written (a dry run notes it in
    ``refused`` instead)."""
    from arborag.progress import progress_bar

    from arborag.tasks.changes import source_stats
    from arborag.tasks.ingest.readers import reader_key

    existing = ctx.corpus.read("documents")
    reader = reader_key(ctx.config.ingest)
    local = not ctx.corpus.remote  # the stat record lives beside a local corpus only
    before = table_fingerprint(ctx.corpus.table_path("documents")) if local else None
    skip = source_stats.skippable(ctx.corpus.cache_dir, existing, before, files, reader) if before is not None else None
    stats: list[tuple[str, os.stat_result, int]] = []
    with progress_bar("read sources", len(files), enabled=ctx.progress) as advance:
        plan = plan_documents(existing, files, ctx.config, prune=prune, progress=advance, discovered=True,  # the flow discovered them
                              skip=set(skip["uri"].to_list()) if skip is not None else (), stats=stats)
    limit = ctx.resources.get("delete_limit") or DeleteLimit.parse(None)
    held = held_documents(existing)
    failures = failure_rows(existing, plan.report)
    try:
        check_deletes(plan.as_dict(), held, limit)
    except DeletesRefused as exc:
        if not dry_run:
            exc.plan["failures"] = failures
            raise
        refused: str | None = str(exc)
    else:
        refused = None
    written = False if dry_run else ctx.write_if_changed("documents", plan.documents, existing)
    # an unwritten table is the file hashed above: hash it again only when it was replaced
    fingerprint = before if before is not None and not written else table_fingerprint(ctx.corpus.table_path("documents"))
    if local and not dry_run:
        rows = [source_stats.stat_rows(stats)] + ([skip] if skip is not None else [])
        source_stats.write_record(ctx.corpus.cache_dir, pl.concat(rows), documents_hash=fingerprint, reader=reader)
    return PlanSummary(
        plan=plan.as_dict(),
        files=len(files),
        held=held,
        failures=failures,
        new_failures=sum(1 for f in failures if f["new"]),
        files_read=len(files) - (skip.height if skip is not None else 0),
        written=written,
        fingerprint=fingerprint,
        new_doc_ids=plan.diff.new_doc_ids.to_pylist(),
        gone_doc_ids=plan.diff.gone_doc_ids.to_pylist(),
        estimate=estimate_work(ctx, plan) if dry_run else None,
        refused=(refused or None) if dry_run else None,
    )


def estimate_work(ctx: StageContext, plan: UpdatePlan) -> dict[str, Any]:
    """What the update would cost: new leaves to embed, leaves that go, and per level about
    how many clusters are re-summarized (from the published snapshot's tree)."""
    import pyarrow.parquet as pq

    from arborag.tasks.stages.chunks import build_chunks

    docs = plan.documents.filter(pc.is_in(plan.documents.column("doc_id"), value_set=plan.diff.new_doc_ids))
    new_chunks = build_chunks(docs, ctx.config.segment)
    n_new = new_chunks.num_rows
    tokens = float(np.mean(new_chunks.column("n_tokens").to_numpy())) if n_new else 0.0
    out: dict[str, Any] = {"new_leaves": n_new, "gone_leaves": 0, "levels": [], "summaries": 0, "embed_texts": n_new}
    man = ctx.corpus.manifest()
    snap = ctx.corpus.snapshots_dir / man["snapshot"] if man else None
    if snap is None or not (snap / "chunks.parquet").exists():
        out["note"] = "no published snapshot with provenance yet: the update builds the whole tree (see `arborag build --dry-run`)"
        return out
    chunks = pq.read_table(snap / "chunks.parquet", columns=["chunk_id", "doc_id"])
    gone = chunks.filter(pc.is_in(chunks.column("doc_id"), value_set=plan.diff.gone_doc_ids)).column("chunk_id")
    if (snap / "repeats.parquet").exists():  # a repeated text's other occurrences were never leaves
        repeats = pq.read_table(snap / "repeats.parquet", columns=["chunk_id"]).column("chunk_id")
        gone = gone.filter(pc.invert(pc.is_in(gone, value_set=repeats.combine_chunks())))
    edges = pq.read_table(snap / "edges.parquet", columns=["parent_id", "child_id", "level"])
    first = edges.filter(pc.equal(edges.column("level"), 1))
    parents = pc.count_distinct(first.filter(pc.is_in(first.column("child_id"), value_set=gone.combine_chunks())).column("parent_id")).as_py()
    levels = {int(k): int(v) for k, v in ((man or {}).get("counts") or {}).get("levels", {}).items()}
    rows = update_estimate(n_new, int(parents or 0), [levels[lv] for lv in sorted(levels) if lv >= 1], ctx.config.summarize.max_tokens, tokens)
    out.update(gone_leaves=len(gone), levels=rows, summaries=sum(r["summaries"] for r in rows))
    out["embed_texts"] = n_new + out["summaries"]
    return out


_EST_MEMBERSHIP = 1.1


def update_estimate(new_leaves: int, gone_leaf_parents: int, clusters_per_level: Sequence[int], summary_tokens: int, leaf_tokens: float) -> list[dict[str, Any]]:
    """About how many clusters each level re-summarizes: level 1 gets the parents of the leaves
    that leave plus ~1.1 clusters per new leaf (soft membership); each level above about one per
    changed child (changed siblings often share a parent, so this leans high) — never more than
    the level's clusters. Returns per level ``{level, summaries, tokens_in}``."""
    rows = []
    touched = float(gone_leaf_parents + np.ceil(new_leaves * _EST_MEMBERSHIP))
    per_node = leaf_tokens
    for level, n_clusters in enumerate(clusters_per_level, start=1):
        touched = min(float(n_clusters), touched)
        if touched <= 0:
            break
        size = 5.0
        rows.append({"level": level, "summaries": int(touched), "tokens_in": int(touched * size * per_node)})
        per_node = float(summary_tokens)
    return rows


def decide(ctx: StageContext, leaves: pa.Table) -> tuple[str, str]:
    """``("noop" | "incremental" | "full", why)`` for the current leaves against the published tree
    (its ``info.json``: tree config, fitted leaves, levels; its clusters and leaf provenance)."""
    import json

    from arborag.tasks.build.key import tree_config
    from arborag.tasks.stages import tree_update

    man = ctx.corpus.manifest()
    if man is None or not (ctx.corpus.snapshots_dir / man["snapshot"]).is_dir():
        return "full", "no published tree yet"
    snap = ctx.corpus.snapshots_dir / man["snapshot"]
    info = json.loads((snap / "info.json").read_text(encoding="utf-8"))
    if tree_update.same_leaves(snap, leaves) and info.get("tree_config") in (None, tree_config(ctx.config)):
        return "noop", "the published tree already holds exactly these leaves"
    if info.get("tree_config") != tree_config(ctx.config):
        return "full", "the tree config (embedder, clustering, summarizer, scope) differs from the published tree's"
    if ctx.config.tree.scope == "document":
        if not (snap / "chunks.parquet").exists():
            return "full", "the published tree has no leaf provenance (chunks.parquet) to compare documents against"
        added, removed = tree_update.leaf_delta(snap, leaves)
        return "incremental", f"per-document trees: {added} leaves added, {removed} removed; only the trees of added or changed documents are built"
    if not (snap / tree_update.CLUSTERS_DIR).is_dir():
        return "full", "the published tree has no fitted clusters to update (built before incremental updates)"
    levels = [int(k) for k in ((info.get("counts") or {}).get("levels") or {"0": 0})]
    if max(levels) == 0 and leaves.num_rows > ctx.config.cluster.dims + 1:
        return "full", "the published tree has no summary level yet and the leaves are now enough for one"
    drift = tree_update.drift_after(snap, info, leaves)
    if drift["share"] > ctx.config.update.max_drift:
        return "full", (f"{drift['changed']} of {drift['fitted']} leaves ({drift['share']:.0%}) changed since the last full fit, "
                        f"over update.max_drift = {ctx.config.update.max_drift:.0%}: re-fitting the whole tree")
    return "incremental", f"{drift['changed']} of {drift['fitted']} leaves ({drift['share']:.0%}) changed since the last full fit"
