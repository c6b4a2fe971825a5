"""The snapshot catalog, retention and gc on a real corpus: one build and two real updates
(the update tests' small multi-level corpus), each test working on its own copy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers.update import CONFIG, copy_corpus, make_sources

from arborag.config import RetentionConfig
from arborag.errors import CorpusLockedError, SnapshotNotFound
from arborag.flows.build import run_build
from arborag.flows.update import run_update
from arborag.storage.corpus import Corpus
from arborag.storage.leases import acquire_lease, live_leases
from arborag.storage.snapshots import (
    collect_garbage,
    diff_snapshots,
    list_snapshots,
    pin_snapshot,
    plan_retention,
    resolve_snapshot,
    rollback,
    snapshot_dir,
    unpin_snapshot,
)

NO_AUTO = CONFIG.with_overrides(retention={"auto": False})
NEW_DOC = "A lighthouse keeper counted nine silver gulls over the harbour of Bellmare each dawn.\n"


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory, examples_dir: Path) -> dict[str, Any]:
    """build -> update 1 (zebra.txt changed) -> update 2 (new.txt added, part05.txt deleted)."""
    root = tmp_path_factory.mktemp("history")
    src = make_sources(root, examples_dir)
    corpus = root / "c"
    b = run_build([src], corpus, NO_AUTO, use_prefect=False, progress=False)
    (src / "zebra.txt").write_text("The zebra queen left at dawn on a raft of reeds.\n\nNobody saw the owls again.\n", encoding="utf-8")
    u1 = run_update([src], corpus, NO_AUTO)
    (src / "new.txt").write_text(NEW_DOC, encoding="utf-8")
    (src / "part05.txt").unlink()
    u2 = run_update([src], corpus, NO_AUTO)
    assert b["status"] == u1["status"] == u2["status"] == "ok"
    assert len({b["snapshot"], u1["snapshot"], u2["snapshot"]}) == 3
    return {"corpus": corpus, "src": src, "ids": [b["snapshot"], u1["snapshot"], u2["snapshot"]]}


@pytest.fixture()
def copy(history: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    corpus, src = copy_corpus(history["corpus"], history["src"], tmp_path)
    return {"corpus": Corpus(corpus), "src": src, "ids": history["ids"]}


def test_list_shows_every_snapshot_newest_first(history: dict[str, Any]) -> None:
    snaps = list_snapshots(Corpus(history["corpus"]))
    assert [s.id for s in snaps] == history["ids"][::-1]
    assert [s.published for s in snaps] == [True, False, False]
    assert [s.flow for s in snaps] == ["update", "update", "build"]
    assert all(s.bytes and s.bytes > 10_000 for s in snaps)
    assert [s.documents for s in snaps] == [7, 7, 7]  # 7 files; update 2 added one and deleted one
    assert all(s.leaves == s.levels["0"] and s.nodes == sum(s.levels.values()) for s in snaps)
    assert snaps[0].published_at > snaps[1].published_at > snaps[2].published_at


def test_resolve_ids_prefixes_published_and_as_of(history: dict[str, Any]) -> None:
    corpus = Corpus(history["corpus"])
    b, u1, u2 = history["ids"]
    assert resolve_snapshot(corpus) == resolve_snapshot(corpus, "published") == u2
    assert resolve_snapshot(corpus, u1[:12]) == u1
    assert resolve_snapshot(corpus, u1[len("snap-"):][:8]) == u1  # "snap-" may be left out
    t1 = {s.id: s.published_at for s in list_snapshots(corpus)}[u1]
    assert resolve_snapshot(corpus, as_of=t1) == u1
    assert resolve_snapshot(corpus, as_of=t1 - timedelta(microseconds=1)) == b
    with pytest.raises(SnapshotNotFound, match="no retained snapshot was published at or before"):
        resolve_snapshot(corpus, as_of=datetime(2000, 1, 1, tzinfo=timezone.utc))
    with pytest.raises(SnapshotNotFound) as err:
        resolve_snapshot(corpus, "snap-nope")
    assert err.value.available == [u2, u1, b] and "arborag snapshots list" in str(err.value) and u1 in str(err.value)
    with pytest.raises(SnapshotNotFound, match="ambiguous"):
        resolve_snapshot(corpus, "snap-")


def test_diff_of_real_updates_names_exactly_the_changed_documents(history: dict[str, Any]) -> None:
    corpus = Corpus(history["corpus"])
    b, u1, u2 = history["ids"]
    src = history["src"]
    d1 = diff_snapshots(corpus, b, u1)
    assert d1["documents"] == {"added": [], "removed": [], "changed": [str(src / "zebra.txt")]}
    assert d1["leaves"]["added"] >= 1 and d1["leaves"]["removed"] >= 1
    assert any(v["added"] or v["removed"] for v in d1["summaries"].values())  # summaries above zebra rewritten
    d2 = diff_snapshots(corpus, u1, u2)
    assert d2["documents"] == {"added": [str(src / "new.txt")], "removed": [str(src / "part05.txt")], "changed": []}
    assert diff_snapshots(corpus, u2, u2)["leaves"] == {"added": 0, "removed": 0}


def test_published_pinned_and_leased_survive_gc(copy: dict[str, Any]) -> None:
    corpus = copy["corpus"]
    b, u1, u2 = copy["ids"]
    strict = RetentionConfig(keep_last=0, keep_days=0, grace_s=0)
    pin_snapshot(corpus, b[:10], note="baseline")
    with acquire_lease(corpus, u1, holder="test-reader", ttl_s=60) as lease:
        assert list(live_leases(corpus)) == [u1]
        report = collect_garbage(corpus, strict)
        assert report.removed == [] and not report.errors
        assert report.kept[u2] == ["published"] and report.kept[b] == ["pinned"] and report.kept[u1][0].startswith("leased")
        lease.renew()
        assert lease.expires > time.time() + 50
    assert live_leases(corpus) == {}
    report = collect_garbage(corpus, strict)
    assert [r["id"] for r in report.removed] == [u1] and report.parts["snapshots"]["bytes"] > 10_000
    assert not (corpus.snapshots_dir / u1).exists()
    with pytest.raises(SnapshotNotFound, match="not retained"):
        acquire_lease(corpus, u1, holder="late reader")
    assert live_leases(corpus) == {}  # the failed acquire left no lease behind
    unpin_snapshot(corpus, b)
    assert [r["id"] for r in collect_garbage(corpus, strict).removed] == [b]
    assert [s.id for s in list_snapshots(corpus)] == [u2]


def test_keep_last_and_keep_days_combine_as_caps(history: dict[str, Any]) -> None:
    snaps = list_snapshots(Corpus(history["corpus"]), sizes=False)
    b, u1, u2 = history["ids"]
    now = datetime.now(timezone.utc)
    kept, removed = plan_retention(snaps, RetentionConfig(keep_last=2, keep_days=7, grace_s=0), now=now)
    assert set(kept) == {u2, u1} and removed == {b: "beyond keep_last=2"}
    kept, removed = plan_retention(snaps, RetentionConfig(keep_last=10, keep_days=1, grace_s=0), now=now + timedelta(days=2))
    assert set(kept) == {u2} and set(removed) == {u1, b} and removed[u1] == "older than keep_days=1"
    kept, _ = plan_retention(snaps, RetentionConfig(keep_last=10, keep_days=None, grace_s=0), now=now + timedelta(days=400))
    assert set(kept) == {u2, u1, b}
    # a snapshot superseded less than grace_s ago stays even beyond keep_last
    kept, removed = plan_retention(snaps, RetentionConfig(keep_last=1, keep_days=7, grace_s=3600), now=now)
    assert set(kept) == {u2, u1, b} and "grace_s" in kept[u1][0]


def test_dead_or_expired_leases_are_not_live(copy: dict[str, Any]) -> None:
    corpus = copy["corpus"]
    _, u1, u2 = copy["ids"]
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    lease = acquire_lease(corpus, u1, holder="dead", ttl_s=600)
    rec = json.loads((corpus.root / "leases" / u1 / f"{lease.token}.json").read_text())
    rec.update(pid=child.pid, proc_start=None)  # the holder has exited
    corpus.put_record(f"leases/{u1}/{lease.token}.json", rec)
    expired = acquire_lease(corpus, u2, holder="expired", ttl_s=0.05)
    time.sleep(0.1)
    assert live_leases(corpus) == {}
    report = collect_garbage(corpus, RetentionConfig(keep_last=1, keep_days=None, grace_s=0))
    assert u1 in [r["id"] for r in report.removed] and report.parts["leases"]["items"] == 2
    assert expired.released is False and not list((corpus.root / "leases").rglob("*.json"))  # records of dead leases pruned


def test_gc_is_guarded_by_the_writer_lock(copy: dict[str, Any]) -> None:
    corpus = copy["corpus"]
    staging = corpus.root / "staging" / "in-progress"
    staging.mkdir(parents=True)
    (staging / "leaf_vectors.parquet").write_bytes(b"x" * 100)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom arborag.storage.lock import corpus_lock\n"
         "with corpus_lock(sys.argv[1], purpose='update'):\n    print('held', flush=True)\n    time.sleep(60)\n", str(corpus.root)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(CorpusLockedError, match="locked by another writer"):
            collect_garbage(corpus, RetentionConfig(keep_last=1, grace_s=0), wait=False)
        dry = collect_garbage(corpus, RetentionConfig(keep_last=1, grace_s=0), dry_run=True)
        assert "staging" not in dry.parts and staging.is_dir()  # a live writer's staging is left alone
        assert len(dry.removed) == 2 and len(list_snapshots(corpus)) == 3  # said, not done
    finally:
        holder.kill()
        holder.wait()
    report = collect_garbage(corpus, RetentionConfig(keep_last=1, grace_s=0))
    assert report.parts["staging"] == {"items": 1, "bytes": 100} and not staging.exists()


def test_unsealed_staging_and_prefect_records_are_swept(copy: dict[str, Any]) -> None:
    corpus = copy["corpus"]
    b, u1, u2 = copy["ids"]
    partial = corpus.snapshots_dir / "snap-killed.partial"
    (partial / "sparse").mkdir(parents=True)
    (partial / "nodes.parquet").write_bytes(b"n" * 50)
    results = corpus.prefect_dir / "results"
    results.mkdir(parents=True)
    keys = {s.id: s.build_key for s in list_snapshots(corpus)}
    for name in (f"embed@{keys[u2]}", f"publish@{keys[b]}", "ingest-0123abcd", "ingest-fresh1", "ingest-fresh2", "segment-fresh"):
        (results / name).write_text("{}")
    old = time.time() - 3600
    os.utime(results / "ingest-0123abcd", (old, old))
    report = collect_garbage(corpus, RetentionConfig(keep_last=2, grace_s=0))
    assert [r["id"] for r in report.removed] == [b]
    assert not partial.exists() and report.parts["unsealed"]["items"] == 1
    # the old ingest record goes: older than every kept snapshot and not among its stage's 2 newest
    # (the newest records of a stage stay even when old: the last run's cache hits need them)
    assert sorted(p.name for p in results.iterdir()) == sorted([f"embed@{keys[u2]}", "ingest-fresh1", "ingest-fresh2", "segment-fresh"])
    assert report.parts["prefect"]["items"] == 2


def test_rollback_publishes_an_earlier_snapshot_atomically(copy: dict[str, Any]) -> None:
    corpus = copy["corpus"]
    b, _, u2 = copy["ids"]
    assert rollback(corpus, b[:9]) == b
    man = corpus.manifest()
    assert man["snapshot"] == b and man["rolled_back_from"] == u2
    assert corpus.published_dir() == snapshot_dir(corpus, b)
    assert [s.id for s in list_snapshots(corpus) if s.published] == [b]


def test_rollback_applies_retention_like_any_publish(copy: dict[str, Any]) -> None:
    corpus = copy["corpus"]
    b, u1, u2 = copy["ids"]
    got: dict[str, Any] = {}
    assert rollback(corpus, b, policy=RetentionConfig(keep_last=1, grace_s=0), report=got) == b
    # kept: the published one (b again) and the newest publish before it (u2, what was rolled back from)
    assert sorted(s.id for s in list_snapshots(corpus)) == sorted([b, u2])
    assert got["gc"]["snapshots_removed"] == [u1] and not got["gc"]["errors"]


def test_runs_table_is_bounded_but_keeps_the_runs_of_kept_snapshots(copy: dict[str, Any]) -> None:
    import pyarrow as pa

    from arborag.storage.schemas import SCHEMAS

    corpus = copy["corpus"]
    runs = corpus.read("runs")
    publishing = {s.run_id for s in list_snapshots(corpus)} - {None}
    assert publishing and publishing <= set(runs.column("run_id").to_pylist())
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    extra = [{"run_id": f"failed-{i}", "flow": "update", "config_hash": "x", "started_at": t0 + timedelta(minutes=i),
              "finished_at": t0 + timedelta(minutes=i, seconds=5), "status": "failed", "counts": "{}", "tokens_in": 0,
              "tokens_out": 0, "message": "a run that published nothing"} for i in range(6)]
    corpus.write("runs", pa.concat_tables([pa.Table.from_pylist(extra, schema=SCHEMAS["runs"]), runs]))
    before = corpus.read("runs").num_rows
    dry = collect_garbage(corpus, RetentionConfig(keep_last=10, grace_s=0, keep_runs=2), dry_run=True)
    assert corpus.read("runs").num_rows == before  # a dry run only says what would go
    report = collect_garbage(corpus, RetentionConfig(keep_last=10, grace_s=0, keep_runs=2))
    assert not report.errors, report.errors
    left = corpus.read("runs").column("run_id").to_pylist()
    assert publishing <= set(left)  # every kept snapshot's run stays, whatever keep_runs says
    assert not any(r.startswith("failed-") for r in left)  # the oldest runs that published nothing go
    assert report.parts["runs"]["items"] == dry.parts["runs"]["items"] == before - len(left) >= 6


# -- the CLI ---------------------------------------------------------------------------------------
def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from arborag.cli.app import app

    return CliRunner().invoke(app, list(args))


def test_cli_diff_of_a_real_arborag_update_names_exactly_the_changed_documents(copy: dict[str, Any]) -> None:
    corpus, src = copy["corpus"], copy["src"]
    # the copy's snapshots name the original source paths: a first update publishes one naming the copy's
    (src / "part03.txt").write_text("The king's herald read the proclamation twice in the market square.\n", encoding="utf-8")
    assert _cli("update", str(src), "--corpus", str(corpus.root), "--no-prefect").exit_code == 0
    before = corpus.manifest()["snapshot"]
    (src / "part01.txt").write_text("Cinderella's stepmother sold the house and moved to the coast.\n", encoding="utf-8")
    (src / "part02.txt").unlink()
    (src / "late.txt").write_text("The fairy godmother opened a bakery that sold pumpkin bread.\n", encoding="utf-8")
    up = _cli("update", str(src), "--corpus", str(corpus.root), "--no-prefect")
    assert up.exit_code == 0, up.output
    res = _cli("snapshots", "diff", before[:10], "published", "--corpus", str(corpus.root), "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["a"] == before and d["b"] == corpus.manifest()["snapshot"] != before
    assert d["documents"] == {"added": [str(src / "late.txt")], "removed": [str(src / "part02.txt")], "changed": [str(src / "part01.txt")]}
    table = _cli("snapshots", "diff", before, "published", "--corpus", str(corpus.root))
    assert table.exit_code == 0 and "documents changed: 1" in table.output and "part01.txt" in table.output


def test_cli_list_show_pin_gc_rollback(copy: dict[str, Any]) -> None:
    c = str(copy["corpus"].root)
    b, u1, u2 = copy["ids"]
    listed = _cli("snapshots", "list", "--corpus", c, "--json")
    assert listed.exit_code == 0 and [s["id"] for s in json.loads(listed.output)] == [u2, u1, b]
    assert _cli("snapshots", "list", "--corpus", c).output.count("snap-") == 3
    shown = json.loads(_cli("snapshots", "show", "published", "--corpus", c).output)
    assert shown["id"] == u2 and shown["info"]["snapshot"] == u2 and shown["published"] is True
    assert _cli("snapshots", "pin", b[:12], "--corpus", c, "--note", "baseline").exit_code == 0
    dry = _cli("snapshots", "gc", "--corpus", c, "--dry-run", "--keep-last", "1", "--grace-s", "0")
    assert dry.exit_code == 0 and f"would remove {u1}" in dry.output and "would free" in dry.output and "pinned" in dry.output
    assert len(list_snapshots(copy["corpus"])) == 3  # a dry run removes nothing
    done = json.loads(_cli("snapshots", "gc", "--corpus", c, "--keep-last", "1", "--grace-s", "0", "--json").output)
    assert [r["id"] for r in done["removed"]] == [u1] and done["bytes_freed"] > 10_000
    rolled = _cli("snapshots", "rollback", b[:12], "--corpus", c)
    assert rolled.exit_code == 0 and copy["corpus"].manifest()["snapshot"] == b
    missing = _cli("snapshots", "show", u1, "--corpus", c)
    assert missing.exit_code == 1 and "not found" in missing.output and "arborag snapshots list" in missing.output
    for sub in ("list", "show", "diff", "pin", "unpin", "gc", "rollback"):
        assert "Example" in _cli("snapshots", sub, "--help").output
