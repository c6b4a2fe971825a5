"""Retention removes the link rows (``cache/link_rows``: the per-snapshot file a bounded reader's
``hop`` writes) of the snapshots it removes, and keeps those of the snapshots it keeps."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
from helpers.query import HOP_LINK_ROWS, HOP_SPEC, links_table, publish_snapshot

from arborag.config import RetentionConfig
from arborag.storage.corpus import Corpus
from arborag.storage.link_rows import link_rows_path, ptr_path, write_link_rows
from arborag.storage.snapshots.retention import collect_garbage
from arborag.storage.tables import write_table


def _with_link_rows(corpus: Corpus, sid: str) -> Path:
    snap = publish_snapshot(corpus, sid, spec=HOP_SPEC, edges_spec=[])
    write_table("links", links_table(HOP_LINK_ROWS), snap / "links.parquet")
    ids = pa.chunked_array([pa.array([n for n, *_ in HOP_SPEC])])
    return write_link_rows(snap / "links.parquet", ids, link_rows_path(corpus.cache_dir, sid))


def test_gc_removes_the_link_rows_of_removed_snapshots_only(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c")
    corpus.ensure()
    old = [_with_link_rows(corpus, sid) for sid in ("snap-a", "snap-b")]
    time.sleep(0.01)
    kept = _with_link_rows(corpus, "snap-c")
    folder = kept.parent
    stale_layout = folder / "snap-c.arrow"  # a file of another layout beside a kept snapshot's
    stale_layout.write_bytes(b"x" * 100)
    young_tmp = folder / ".snap-c.npy.abc.tmp"  # a reader writing now
    young_tmp.write_bytes(b"y")
    dead_tmp = folder / ".snap-a.npy.def.tmp"  # a write that died long ago
    dead_tmp.write_bytes(b"z" * 10)
    os.utime(dead_tmp, (time.time() - 7200, time.time() - 7200))
    policy = RetentionConfig(keep_last=1, keep_days=None, grace_s=0)

    dry = collect_garbage(corpus, policy, dry_run=True)
    assert dry.parts["link_rows"]["items"] == 6 and all(p.exists() for p in old)  # a dry run removes nothing

    report = collect_garbage(corpus, policy)
    assert sorted(r["id"] for r in report.removed) == ["snap-a", "snap-b"]
    for p in old:
        assert not p.exists() and not ptr_path(p).exists()
    assert kept.is_file() and ptr_path(kept).is_file() and young_tmp.exists()
    assert not stale_layout.exists() and not dead_tmp.exists()
    assert report.parts["link_rows"]["items"] == 6 and report.parts["link_rows"]["bytes"] > 110
    assert not report.errors
