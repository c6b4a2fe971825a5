"""Which snapshots stay (:func:`plan_retention`), the garbage collection that applies it and
bounds everything else a corpus grows (:func:`collect_garbage`), and :func:`rollback`."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from arborag.storage.leases import prune_leases
from arborag.storage.snapshots.catalog import SnapshotInfo, _info, _published_id, list_snapshots, resolve_snapshot
from arborag.storage.snapshots.sweeps import (
    GcReport, _remove_snapshot, _sweep_embeddings, _sweep_link_rows, _sweep_llm, _sweep_prefect, _sweep_scratch, _sweep_staging,
    _sweep_unsealed, _trim_runs,
)

if TYPE_CHECKING:
    from arborag.config import RetentionConfig
    from arborag.storage.corpus import Corpus

__all__ = ["collect_garbage", "plan_retention", "rollback"]


def plan_retention(
    snapshots: list[SnapshotInfo], policy: "RetentionConfig", *, now: datetime | None = None,
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """``(kept: id -> reasons, removed: id -> reason)`` for ``snapshots`` (newest first, as
    :func:`list_snapshots` returns them) under ``policy``. Pure: reads nothing."""
    now = now or datetime.now(timezone.utc)
    kept: dict[str, list[str]] = {}
    removed: dict[str, str] = {}
    newer_at: datetime | None = None  # published_at of the next newer snapshot (when this one was superseded)
    for rank, s in enumerate(snapshots):
        why: list[str] = []
        if s.published:
            why.append("published")
        if s.pinned:
            why.append("pinned")
        if s.leases:
            why.append(f"leased ({s.leases} live reader{'s' if s.leases != 1 else ''})")
        if s.published_at is None:
            why.append("no publish time recorded")
        elif newer_at is not None and (now - newer_at).total_seconds() < policy.grace_s:
            why.append(f"superseded {max(0.0, (now - newer_at).total_seconds()):.0f} s ago (< grace_s={policy.grace_s:g})")
        young = s.published_at is None or policy.keep_days is None or now - s.published_at < timedelta(days=policy.keep_days)
        if rank < policy.keep_last and young:
            why.append(f"among the last {policy.keep_last}")
        if why:
            kept[s.id] = why
        elif rank >= policy.keep_last:
            removed[s.id] = f"beyond keep_last={policy.keep_last}"
        else:
            removed[s.id] = f"older than keep_days={policy.keep_days:g}"
        if s.published_at is not None:
            newer_at = s.published_at
    return kept, removed


def collect_garbage(
    corpus: "Corpus",
    policy: "RetentionConfig | None" = None,
    *,
    dry_run: bool = False,
    lock: bool = True,
    wait: bool = True,
    keep_staging: set[str] | None = None,
    now: datetime | None = None,
) -> GcReport:
    """Apply ``policy`` (default: the loaded config's ``retention``) to ``corpus``'s snapshots and
    bound its caches, staging folders and Prefect records (module docs). ``dry_run``: remove
    nothing, report what would go and how many bytes. ``lock``: take the writer lock (``wait``:
    wait for it); the publish hook passes ``lock=False`` because it runs inside the writer.
    A part that fails is reported in ``errors``; the others still run."""
    from arborag.storage.lock import corpus_lock, read_lock, stale_reason, lock_path

    if policy is None:
        from arborag.config import load_config

        policy = load_config().retention
    t0 = time.perf_counter()
    report = GcReport(dry_run=dry_run)
    if lock and not dry_run:
        with corpus_lock(corpus.root, wait=wait, purpose="gc"):
            _collect(corpus, policy, report, dry_run=dry_run, writer_live=False, keep_staging=keep_staging or set(), now=now)
    else:
        writer_live = False
        if dry_run and lock:  # no lock taken for a dry run: leave what a live writer may be staging alone
            owner = read_lock(corpus.root)
            writer_live = owner is not None and stale_reason(owner, lock_path(corpus.root)) is None
        _collect(corpus, policy, report, dry_run=dry_run, writer_live=writer_live, keep_staging=keep_staging or set(), now=now)
    report.seconds = time.perf_counter() - t0
    return report


def _collect(corpus: "Corpus", policy: "RetentionConfig", report: GcReport, *, dry_run: bool, writer_live: bool,
             keep_staging: set[str], now: datetime | None) -> None:
    now = now or datetime.now(timezone.utc)
    snaps = list_snapshots(corpus)
    kept, removed = plan_retention(snaps, policy, now=now)
    report.kept = kept
    by_id = {s.id: s for s in snaps}
    kept_ids = [s.id for s in snaps if s.id in kept]
    for s in snaps:
        if s.id not in removed:
            continue
        try:
            gone = True if dry_run else _remove_snapshot(corpus, s.id)
        except OSError as exc:
            report.errors.append(f"snapshot {s.id}: {type(exc).__name__}: {exc}")
            continue
        if gone:
            report.removed.append({"id": s.id, "bytes": s.bytes or 0, "reason": removed[s.id]})
            report.add("snapshots", 1, s.bytes or 0)
        else:
            kept[s.id] = ["leased while gc ran"]
            kept_ids.append(s.id)
    # the oldest snapshot kept by the last-N rule (or the published one): records older than it go
    ruled = [by_id[i] for i in kept_ids if any(r.startswith("among the last") or r == "published" for r in kept[i])]
    cutoff = min((s.published_at for s in ruled if s.published_at), default=None)
    keys = {str(by_id[i].build_key) for i in kept_ids if by_id[i].build_key}
    steps: list[tuple[str, Any]] = []
    if not writer_live:
        steps.append(("unsealed", lambda: _sweep_unsealed(corpus, report, dry_run=dry_run)))
        steps.append(("scratch", lambda: _sweep_scratch(corpus, report, dry_run=dry_run)))
        steps.append(("staging", lambda: keys.update(_sweep_staging(corpus, report, dry_run=dry_run, keep=keep_staging))))
        steps.append(("prefect", lambda: _sweep_prefect(corpus, report, dry_run=dry_run, keys=keys, cutoff=cutoff,
                                                             keep_newest=max(1, int(policy.keep_last)))))
    steps.append(("embedding_cache", lambda: _sweep_embeddings(corpus, report, kept_ids, dry_run=dry_run)))
    steps.append(("llm_cache", lambda: _sweep_llm(corpus, report, kept_ids, policy, dry_run=dry_run)))
    steps.append(("link_rows", lambda: _sweep_link_rows(corpus, report, kept_ids, dry_run=dry_run)))
    if not writer_live:
        steps.append(("runs", lambda: _trim_runs(corpus, report, {str(by_id[i].run_id) for i in kept_ids if by_id[i].run_id},
                                                 int(getattr(policy, "keep_runs", 1000)), dry_run=dry_run)))
    if not dry_run:
        steps.append(("leases", lambda: report.add("leases", prune_leases(corpus), 0)))
    for part, step in steps:
        try:
            step()
        except Exception as exc:  # one part failing leaves the others (and the publish) standing
            report.errors.append(f"{part}: {type(exc).__name__}: {exc}")


def rollback(corpus: "Corpus", ref: str, *, lock: bool = True, wait: bool = True,
             policy: "RetentionConfig | None" = None, report: dict[str, Any] | None = None) -> str:
    """Publish the retained snapshot ``ref`` again (one atomic manifest switch, under the writer
    lock); returns its id. Its ``info.json`` stays as sealed; the manifest records the rollback.
    Retention then runs as after any publish (``policy``, default the config's; skipped when its
    ``auto`` is off); its summary goes to ``report["gc"]`` when a dict is given."""
    from arborag.storage.lock import corpus_lock

    def _do() -> str:
        sid = resolve_snapshot(corpus, ref)
        before = _published_id(corpus)
        info = _info(corpus, sid)
        info = {k: v for k, v in info.items() if k not in ("snapshot", "published_at")}
        corpus.publish_existing(sid, {**info, "rolled_back_from": before})
        pol = policy
        if pol is None:
            from arborag.config import load_config

            pol = load_config().retention
        if pol.auto:  # inside the lock already: the publish hook's way
            try:
                summary = collect_garbage(corpus, pol, lock=False).summary()
            except Exception as exc:  # noqa: BLE001 - the rollback stands; say why gc did not run
                summary = {"errors": [f"{type(exc).__name__}: {exc}"]}
            if report is not None:
                report["gc"] = summary
        return sid

    if not lock:
        return _do()
    with corpus_lock(corpus.root, wait=wait, purpose="rollback"):
        return _do()
