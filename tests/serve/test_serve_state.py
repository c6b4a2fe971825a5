"""Snapshot switching without a server: leases keep a replaced snapshot alive until the request
that holds it ends; a broken publication leaves the server on the snapshot it has."""

from __future__ import annotations

import json
import shutil

import pytest

from arborag.config import ArboragConfig
from arborag.serve.state import SnapshotHolder
from arborag.storage.corpus import Corpus


@pytest.fixture()
def two_snapshots(corpus_copy):
    """The built snapshot ``a`` (published) and ``b``, a sealed copy of it under another id."""
    corpus = Corpus(corpus_copy)
    a = corpus.manifest()["snapshot"]
    b = a + "-copy"
    shutil.copytree(corpus.snapshots_dir / a, corpus.snapshots_dir / b)
    info = json.loads((corpus.snapshots_dir / a / "info.json").read_text())
    (corpus.snapshots_dir / b / "info.json").write_text(json.dumps({**info, "snapshot": b}))
    return corpus, a, b, info


def test_a_lease_keeps_the_old_snapshot_until_its_request_ends(two_snapshots, embedders):
    corpus, a, b, info = two_snapshots
    holder = SnapshotHolder(corpus.root, ArboragConfig(), embedders)
    with holder.lease() as old:
        assert old.id == a and holder.swaps == 0
        corpus.publish_existing(b, info)
        with holder.lease() as new:  # the next request sees the new snapshot
            assert new.id == b and holder.current is new and holder.swaps == 1
        assert old.retired and old.index is not None and a not in holder.released
        assert old.index.search("slipper", mode="sparse", budget=200)  # the in-flight request finishes on it
    assert old.index is None and list(holder.released) == [a]
    with holder.lease() as snap:
        assert snap.id == b and snap.leases == 1
    assert snap.leases == 0 and snap.index is not None


def test_unchanged_manifest_is_one_stat(two_snapshots, embedders, monkeypatch):
    corpus, a, _, _ = two_snapshots
    holder = SnapshotHolder(corpus.root, ArboragConfig(), embedders)
    first = holder.refresh()
    opened = []
    monkeypatch.setattr(holder, "_open", lambda: opened.append(1))
    for _ in range(50):
        assert holder.refresh() is first
    assert not opened


def test_republishing_the_same_snapshot_opens_nothing(two_snapshots, embedders, monkeypatch):
    corpus, a, _, info = two_snapshots
    holder = SnapshotHolder(corpus.root, ArboragConfig(), embedders)
    first = holder.refresh()
    monkeypatch.setattr(holder, "_open", lambda: pytest.fail("a re-published snapshot must not be opened again"))
    corpus.publish_existing(a, info)  # a no-op rebuild rewrites the manifest
    assert holder.refresh() is first and holder.swaps == 0


def test_a_broken_publication_keeps_serving_the_current_snapshot(two_snapshots, embedders):
    corpus, a, _, info = two_snapshots
    holder = SnapshotHolder(corpus.root, ArboragConfig(), embedders)
    assert holder.refresh().id == a
    corpus.manifest_path.write_text(json.dumps({**info, "snapshot": "snap-gone"}))  # its folder does not exist
    assert holder.refresh().id == a and holder.swaps == 0


def test_an_unbuilt_corpus_has_no_snapshot(tmp_path, embedders):
    holder = SnapshotHolder(tmp_path / "c", ArboragConfig(), embedders)
    assert holder.refresh() is None
    with holder.lease() as snap:
        assert snap is None
