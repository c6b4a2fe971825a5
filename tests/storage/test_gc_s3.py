"""Retention on an ``s3://`` corpus: a real S3-compatible server (moto in server mode on
127.0.0.1; the client is the real s3fs/botocore), two machines (two local mirrors). Pins and
leases live in the bucket, so a lease taken on one machine protects the snapshot from gc on the
other; removed snapshots leave the bucket and the mirror; gc runs after every publish."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.s3 import moto_s3
from helpers.update import CONFIG, make_sources

from arborag.config import RetentionConfig
from arborag.flows.build import run_build
from arborag.flows.update import run_update
from arborag.storage.corpus import Corpus
from arborag.storage.leases import acquire_lease, live_leases
from arborag.storage.objectstore import ObjectStore, mirror_dir
from arborag.storage.snapshots import collect_garbage, diff_snapshots, list_snapshots, pin_snapshot, unpin_snapshot

pytestmark = pytest.mark.slow

pytest.importorskip("moto.server")

URI = "s3://arborag-gc/corpora/tale"
NO_AUTO = CONFIG.with_overrides(retention={"auto": False})


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 (a free port) with one bucket; AWS_* point at it; two mirrors."""
    mirrors = {"a": str(tmp_path_factory.mktemp("mirror-a")), "b": str(tmp_path_factory.mktemp("mirror-b"))}
    with moto_s3("arborag-gc", mirrors["a"]):
        yield mirrors


@pytest.fixture(scope="module")
def history(s3: dict[str, str], tmp_path_factory: pytest.TempPathFactory, examples_dir: Path) -> dict[str, Any]:
    src = make_sources(tmp_path_factory.mktemp("src-s3"), examples_dir)
    b = run_build([src], URI, NO_AUTO, use_prefect=False, progress=False)
    (src / "zebra.txt").write_text("The zebra queen sold her carriage to a travelling tinker.\n", encoding="utf-8")
    u1 = run_update([src], URI, NO_AUTO)
    (src / "part05.txt").unlink()
    u2 = run_update([src], URI, NO_AUTO)
    assert b["status"] == u1["status"] == u2["status"] == "ok"
    return {"src": src, "ids": [b["snapshot"], u1["snapshot"], u2["snapshot"]]}


def _on_machine(mp: pytest.MonkeyPatch, s3: dict[str, str], name: str) -> Corpus:
    mp.setenv("ARBORAG_OBJECT_CACHE", s3[name])
    return Corpus(URI)


def test_s3_retention_leases_pins_and_gc_after_publish(s3: dict[str, str], history: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    b, u1, u2 = history["ids"]
    store = ObjectStore(URI)
    a = _on_machine(monkeypatch, s3, "a")
    assert [s.id for s in list_snapshots(a)] == [u2, u1, b] and all((s.bytes or 0) > 10_000 for s in list_snapshots(a))
    assert diff_snapshots(a, u1, u2)["documents"]["removed"] == [str(history["src"] / "part05.txt")]

    machine_b = _on_machine(monkeypatch, s3, "b")
    lease = acquire_lease(machine_b, u1, holder="serve on machine b", ttl_s=120)
    assert store.exists(f"leases/{u1}/{lease.token}.json")
    a = _on_machine(monkeypatch, s3, "a")
    assert list(live_leases(a)) == [u1]  # machine a sees machine b's lease in the bucket
    pin_snapshot(a, b, note="baseline")
    strict = RetentionConfig(keep_last=0, keep_days=0, grace_s=0)
    report = collect_garbage(a, strict)
    assert report.removed == [] and not report.errors
    assert report.kept == {u2: ["published"], u1: [report.kept[u1][0]], b: ["pinned"]} and report.kept[u1][0].startswith("leased")

    lease.release()
    assert not store.exists(f"leases/{u1}/{lease.token}.json")
    report = collect_garbage(a, strict)
    assert [r["id"] for r in report.removed] == [u1] and not report.errors
    assert not store.exists(f"snapshots/{u1}/info.json") and not store.fs.find(store.path(f"snapshots/{u1}"))
    assert not (mirror_dir(URI) / "snapshots" / u1).exists()
    assert [s.id for s in list_snapshots(_on_machine(monkeypatch, s3, "b"))] == [u2, b]

    # after every publish: unpinned, the baseline goes with the next update (keep_last=1)
    a = _on_machine(monkeypatch, s3, "a")
    unpin_snapshot(a, b)
    (history["src"] / "late.txt").write_text("A tinker mended the royal kettle for three copper coins.\n", encoding="utf-8")
    up = run_update([history["src"]], URI, CONFIG.with_overrides(retention={"keep_last": 1, "grace_s": 0}))
    assert up["status"] == "ok" and sorted(up["publish"]["gc"]["snapshots_removed"]) == sorted([b, u2])
    assert [s.id for s in list_snapshots(a)] == [up["snapshot"]]
    left = {p.split("/snapshots/", 1)[1].split("/", 1)[0] for p in store.fs.find(store.path("snapshots"))}
    assert left == {up["snapshot"]}
    assert json.loads(json.dumps(up["publish"]["gc"]))["errors"] == []
