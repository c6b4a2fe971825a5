"""Time travel: open_index / arborag query on an earlier retained snapshot, by id,
prefix or time, under a reader lease that retention respects."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from helpers.query import NODES_SPEC, FakeQueryEmbedder, publish_snapshot

from arborag.config import RetentionConfig, SparseConfig
from arborag.errors import QueryError, SnapshotNotFound
from arborag.query import open_index
from arborag.query.index import parse_as_of
from arborag.storage.corpus import Corpus
from arborag.storage.leases import live_leases
from arborag.storage.snapshots import collect_garbage

REPO = Path(__file__).resolve().parents[2]
DROP_ALL = RetentionConfig(keep_last=1, keep_days=None, grace_s=0, auto=False)  # would keep only the published one


@pytest.fixture()
def two(tmp_path: Path) -> tuple[Path, datetime]:
    """snap-one (the 9-node tree, texts "first ...") then snap-two (leaves only, "second ...");
    returns the corpus and a time between the two publishes."""
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "snap-one", text="first {}", sparse=SparseConfig())
    time.sleep(0.05)
    between = datetime.now(timezone.utc)
    time.sleep(0.05)
    publish_snapshot(corpus, "snap-two", spec=[n for n in NODES_SPEC if n[1] == 0], edges_spec=[], text="second {}",
                     sparse=SparseConfig())
    return corpus.root, between


def _texts(index, q: str = "alpha") -> list[str]:
    return [h.text for h in index.search(q, mode="collapsed", budget=None, k=3)]


def test_published_by_default_an_earlier_one_by_id_prefix_or_time(two: tuple[Path, datetime]) -> None:
    root, between = two
    now = open_index(root, embed_query=FakeQueryEmbedder())
    assert now.snapshot == "snap-two" and all(t.startswith("second") for t in _texts(now)) and now.lease is None
    for kw in ({"snapshot": "snap-one"}, {"snapshot": "snap-o"}, {"snapshot": "one"}, {"as_of": between},
               {"as_of": between.isoformat()}, {"as_of": between.astimezone(timezone(timedelta(hours=5))).isoformat()}):
        old = open_index(root, embed_query=FakeQueryEmbedder(), **kw)
        try:
            assert old.snapshot == "snap-one", kw
            texts = _texts(old)
            assert texts and all(t.startswith("first") for t in texts), (kw, texts)
            assert old.top_level == 2  # the old tree, not the new leaves-only one
        finally:
            old.close()
    assert open_index(root, as_of=datetime.now(timezone.utc), embed_query=FakeQueryEmbedder()).snapshot == "snap-two"
    naive_utc = datetime.now(timezone.utc).replace(tzinfo=None)  # a time without a zone is UTC
    assert open_index(root, as_of=naive_utc.isoformat(), embed_query=FakeQueryEmbedder()).snapshot == "snap-two"


def test_unknown_snapshot_or_too_early_says_what_is_retained(two: tuple[Path, datetime]) -> None:
    root, _ = two
    with pytest.raises(SnapshotNotFound, match=r"snap-nope.*retained: snap-two, snap-one.*arborag snapshots list"):
        open_index(root, snapshot="snap-nope")
    with pytest.raises(SnapshotNotFound, match=r"no retained snapshot was published at or before"):
        open_index(root, as_of="2001-01-01T00:00:00Z")
    with pytest.raises(QueryError, match="ISO-8601"):
        parse_as_of("last tuesday")
    assert parse_as_of("2026-11-26T09:30Z") == datetime(2026, 11, 26, 9, 30, tzinfo=timezone.utc)
    assert not live_leases(Corpus(root)), "a failed open left a lease behind"


def test_an_open_old_snapshot_is_leased_and_survives_gc_until_closed(two: tuple[Path, datetime]) -> None:
    root, _ = two
    corpus = Corpus(root)
    old = open_index(root, snapshot="snap-one", embed_query=FakeQueryEmbedder())
    held = live_leases(corpus)
    assert [r["holder"] for r in held.get("snap-one", [])] == ["query"]
    report = collect_garbage(corpus, DROP_ALL)
    assert "snap-one" not in [r["id"] for r in report.removed] and (root / "snapshots" / "snap-one").is_dir()
    assert _texts(old)[0].startswith("first")  # still answers, files intact
    old.close()
    assert "snap-one" not in live_leases(corpus)
    report = collect_garbage(corpus, DROP_ALL)
    assert [r["id"] for r in report.removed] == ["snap-one"]
    with pytest.raises(SnapshotNotFound, match="retained: snap-two"):
        open_index(root, snapshot="snap-one")


def _cli(*args: str) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "arborag"
    return subprocess.run([str(script), *args], capture_output=True, text=True, timeout=300, cwd=str(REPO),
                          env={**__import__("os").environ, "COLUMNS": "200", "NO_COLOR": "1"})


def test_cli_query_snapshot_and_as_of(two: tuple[Path, datetime]) -> None:
    root, between = two
    old = _cli("query", "first", "--corpus", str(root), "--mode", "sparse", "--snapshot", "snap-one", "--json")
    assert old.returncode == 0, old.stderr
    hits = json.loads(old.stdout)
    assert hits and all(h["text"].startswith("first") for h in hits)
    assert "answering from snapshot snap-one" in old.stderr
    at = _cli("query", "second", "--corpus", str(root), "--mode", "sparse", "--as-of", between.isoformat(), "--json")
    assert at.returncode == 0 and json.loads(at.stdout) == [], at.stdout  # snap-one holds no "second" text
    now = _cli("query", "second", "--corpus", str(root), "--mode", "sparse", "--json")
    assert now.returncode == 0 and json.loads(now.stdout) and all(h["text"].startswith("second") for h in json.loads(now.stdout))
    bad = _cli("query", "x", "--corpus", str(root), "--snapshot", "snap-gone")
    assert bad.returncode != 0 and "snap-gone" in bad.stderr and "arborag snapshots list" in bad.stderr
    both = _cli("query", "x", "--corpus", str(root), "--snapshot", "snap-one", "--as-of", between.isoformat())
    assert both.returncode == 2 and "not both" in both.stderr
    assert not live_leases(Corpus(root)), "the CLI left a lease behind"
