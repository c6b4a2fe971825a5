"""Retention after every publish, through the real build and update flows: recorded in the run,
never failing it, keeping exactly the cache entries the kept snapshots use, and bounding every
part of the corpus over many updates (Prefect records included)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from helpers.update import CONFIG, make_sources

from arborag.flows.build import run_build
from arborag.flows.update import run_update
from arborag.llm.cache import LLMCache
from arborag.storage.corpus import Corpus
from arborag.storage.snapshots import disk_usage, list_snapshots


def _runs(corpus: Path) -> list[dict[str, Any]]:
    return pq.read_table(corpus / "tables" / "runs.parquet").to_pylist()


def _cache_rows(corpus: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in (corpus / "cache" / "embeddings").glob("emb-*.parquet"))


def _edit(src: Path, i: int) -> None:
    """One update's worth of change: zebra.txt rewritten, and a file added or deleted in turn."""
    (src / "zebra.txt").write_text(f"The zebra number {i} crossed river {i * 7} with {i + 2} owls.\n\nIt rained {i} times.\n", encoding="utf-8")
    extra = src / f"extra{i % 3}.txt"
    if extra.exists():
        extra.unlink()
    else:
        extra.write_text(f"Captain {i} of the ferry counted {i * 11} lanterns on the quay of Port {i}.\n", encoding="utf-8")


def test_gc_after_publish_is_recorded_and_keeps_what_the_kept_snapshots_use(tmp_path: Path, examples_dir: Path) -> None:
    src = make_sources(tmp_path, examples_dir)
    corpus = tmp_path / "c"
    cfg = CONFIG.with_overrides(retention={"keep_last": 1, "grace_s": 0})
    first = run_build([src], corpus, cfg, use_prefect=False, progress=False)
    _edit(src, 1)
    up = run_update([src], corpus, cfg)
    assert up["status"] == "ok" and up["publish"]["gc"]["snapshots_removed"] == [first["snapshot"]]
    counts = json.loads(_runs(corpus)[-1]["counts"])
    assert counts["gc"]["snapshots_removed"] == [first["snapshot"]] and counts["gc"]["errors"] == []
    assert counts["gc"]["parts"]["embedding_cache"]["items"] > 0  # the old zebra leaf and rewritten summaries
    assert [s.id for s in list_snapshots(Corpus(corpus))] == [up["snapshot"]]
    # every vector the kept snapshot uses is still cached: a full rebuild of the same leaves embeds no leaf
    again = run_build([src], corpus, cfg.with_overrides(cluster={"dims": 5}), use_prefect=False, progress=False)
    assert again["status"] == "ok" and json.loads(_runs(corpus)[-1]["counts"])["embed"]["computed"] == 0


def test_a_gc_error_is_recorded_and_the_publish_stands(tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.storage import snapshots

    def broken(*_a: Any, **_k: Any) -> Any:
        raise PermissionError(13, "Permission denied", "snapshots/old")

    monkeypatch.setattr(snapshots, "collect_garbage", broken)
    src = make_sources(tmp_path, examples_dir)
    out = run_build([src], tmp_path / "c", CONFIG, use_prefect=False, progress=False)
    assert out["status"] == "ok" and Corpus(tmp_path / "c").manifest()["snapshot"] == out["snapshot"]
    gc = json.loads(_runs(tmp_path / "c")[-1]["counts"])["gc"]
    assert gc["errors"] and "PermissionError" in gc["errors"][0]


def test_llm_cache_sweep_keeps_young_and_referenced_records(tmp_path: Path) -> None:
    folder = tmp_path / "llm"
    for shard in range(3):
        cache = LLMCache(folder, shard_id=f"s{shard}", flush_every=100)
        for i in range(4):
            cache.put(f"k{shard}-{i}", {"text": f" summary {shard}-{i} ", "model": "m", "created_at": "2026-01-01T00:00:00+00:00"})
        cache.put(f"new{shard}", {"text": "fresh", "model": "m", "created_at": "2099-01-01T00:00:00+00:00"})
        cache.flush()
    dry = LLMCache.sweep(folder, keep_texts={"summary 1-2"}, max_age_s=86400, dry_run=True)
    assert dry["records_removed"] == 11 and len(list(folder.glob("calls-*.jsonl"))) == 3
    got = LLMCache.sweep(folder, keep_texts={"summary 1-2"}, max_age_s=86400)
    assert got == {"records_removed": 11, "records_kept": 4, "bytes_freed": got["bytes_freed"]} and got["bytes_freed"] > 0
    assert len(list(folder.glob("calls-*.jsonl"))) == 1
    fresh = LLMCache(folder)
    assert len(fresh) == 4 and fresh.get("k1-2") is not None and fresh.get("new0") is not None and fresh.get("k0-0") is None


@pytest.mark.slow
def test_every_part_stays_bounded_over_many_updates(prefect_harness: None, tmp_path: Path, examples_dir: Path) -> None:
    """12 updates under Prefect with keep_last=3: snapshots, caches, staging and Prefect records
    plateau (the last size is within 1.5x of the size after update 4)."""
    src = make_sources(tmp_path, examples_dir)
    corpus = tmp_path / "c"
    cfg = CONFIG.with_overrides(retention={"keep_last": 3, "grace_s": 0})
    run_build([src], corpus, cfg, use_prefect=True, progress=False)
    # a killed run's leftovers: they must not survive the next publish
    (corpus / "staging" / "killed-build").mkdir(parents=True)
    (corpus / "staging" / "killed-build" / "leaf_vectors.parquet").write_bytes(b"x" * 4096)
    sizes: list[dict[str, int]] = []
    rows: list[int] = []
    for i in range(12):
        _edit(src, i)
        out = run_update([src], corpus, cfg, use_prefect=True)
        assert out["status"] == "ok" and out["mode"] in ("incremental", "full"), out
        sizes.append(disk_usage(Corpus(corpus)))
        rows.append(_cache_rows(corpus))
        assert len(list_snapshots(Corpus(corpus))) <= 3
        assert sizes[-1]["staging"] == 0
    print("sizes per update:", json.dumps([{k: v for k, v in s.items()} for s in sizes]))
    print("embedding cache rows:", rows)
    assert sizes[-1]["prefect"] > 0  # Prefect did record the runs
    for part in ("snapshots", "embedding_cache", "prefect", "total"):
        assert sizes[-1][part] <= 1.5 * sizes[3][part], (part, [s[part] for s in sizes])
    assert max(rows[4:]) <= 1.5 * rows[3], rows
    files = len(list((corpus / "prefect" / "results").iterdir()))
    assert files <= 40, files


def test_embedding_cache_sweep_keeps_exactly_the_referenced_vectors(tmp_path: Path) -> None:
    import numpy as np

    from arborag.storage.embedding_cache import EmbeddingCache, sweep_embedding_cache, vector_digests

    cache = EmbeddingCache(tmp_path)
    rng = np.random.default_rng(0)
    blocks = [rng.random((3, 8), dtype=np.float32) for _ in range(20)]
    for i, v in enumerate(blocks):
        cache.put_many("m", [f"h{i}-{j}" for j in range(3)], v)
    first = sorted(tmp_path.glob("emb-*.parquet"))[0]
    (tmp_path / "emb-99999999999999999999-dup.parquet").write_bytes(first.read_bytes())  # a killed sweep's duplicate
    keep = np.concatenate([blocks[i] for i in range(20) if i not in (4, 7)] + [blocks[9][:1]])
    dry = sweep_embedding_cache(tmp_path, vector_digests(keep), dry_run=True)
    assert dry["entries_removed"] == 6 and len(list(tmp_path.glob("emb-*.parquet"))) == 21
    got = sweep_embedding_cache(tmp_path, vector_digests(keep))
    assert got["entries_removed"] == 6 and got["shards_before"] == 21 and got["shards_after"] == 1  # > 16 shards: merged
    after = EmbeddingCache(tmp_path)
    assert len(after) == 54 and ("m", "h4-0") not in after and ("m", "h5-2") in after
    found, vecs = after.get_many("m", ["h9-1", "h3-2"])
    assert found.all() and np.array_equal(vecs[1], blocks[3][2])
    # the merged shard merges again with later ones (one schema: string keys)
    for i in range(20, 40):
        after.put_many("m", [f"h{i}"], rng.random((1, 8), dtype=np.float32))
    again = sweep_embedding_cache(tmp_path, vector_digests(np.concatenate([keep] + [after.get_many("m", [f"h{i}"])[1][0][None] for i in range(20, 40)])))
    assert again["entries_removed"] == 0 and again["shards_after"] == 1 and len(EmbeddingCache(tmp_path)) == 74


def test_vector_digests_match_equal_rows_and_tell_any_one_bit_apart() -> None:
    """The sweep's digests: the same row gives the same digest wherever it sits (block boundaries,
    a read-only memory view, a strided copy); changing any one bit of a row changes its digest
    (one word differing by 2**k times an odd weight is never 0 modulo 2**64)."""
    import numpy as np
    import pyarrow as pa
    import pytest

    from arborag.errors import SchemaError
    from arborag.storage.arrays import arrow_to_vectors, vectors_to_arrow
    from arborag.storage.embedding_cache import vector_digests

    rng = np.random.default_rng(3)
    v = rng.standard_normal((2500, 384)).astype(np.float32)  # three blocks of 1,024 rows
    d = vector_digests(v)
    assert d.dtype == np.uint64 and d.shape == (2500,) and len(np.unique(d)) == 2500
    one_by_one = np.concatenate([vector_digests(v[i : i + 1]) for i in range(0, 2500, 97)])
    assert np.array_equal(one_by_one, d[::97])
    view = arrow_to_vectors(pa.chunked_array([vectors_to_arrow(v)]))  # zero-copy, read-only
    assert not view.flags.writeable and np.array_equal(vector_digests(view), d)
    assert np.array_equal(vector_digests(np.asfortranarray(v)), d)
    row = v[7].copy()
    flipped = []
    for j in (0, 1, 200, 383):
        for bit in range(32):
            w = row.view(np.uint32).copy()
            w[j] ^= np.uint32(1 << bit)
            flipped.append(w.view(np.float32))
    assert not np.isin(vector_digests(np.stack(flipped)), d[7:8]).any()
    assert vector_digests(np.zeros((0, 384), np.float32)).shape == (0,)
    with pytest.raises(SchemaError):
        vector_digests(v.astype(np.float64))


def test_prefect_sweep_keeps_the_newest_records_of_each_input_keyed_stage(tmp_path: Path) -> None:
    """The records of the run that just published (ingest, segment ...) are older than its
    snapshot, so an age cutoff alone would delete the very records the next run's cache hit needs
    (a Prefect build ran ingest again). The newest ``keep_newest`` of each stage stay; older ones go;
    a tree stage's record goes unless its build key is kept."""
    import os
    from datetime import datetime, timezone

    from arborag.storage.corpus import Corpus
    from arborag.storage.snapshots.sweeps import GcReport, _sweep_prefect

    corpus = Corpus(tmp_path / "c").ensure()
    results = corpus.prefect_dir / "results"
    results.mkdir(parents=True, exist_ok=True)
    names = ["ingest-a1", "ingest-b2", "ingest-c3", "segment-d4", "tree@KEPT", "tree@GONE"]
    for age, name in enumerate(reversed(names)):  # tree@GONE newest ... ingest-a1 oldest
        path = results / name
        path.write_text("{}")
        os.utime(path, (1_000_000 - age * 10, 1_000_000 - age * 10))
    report = GcReport(dry_run=False)
    _sweep_prefect(corpus, report, dry_run=False, keys={"KEPT"}, cutoff=datetime.now(timezone.utc), keep_newest=2)
    left = sorted(p.name for p in results.iterdir())
    assert left == ["ingest-b2", "ingest-c3", "segment-d4", "tree@KEPT"], left
    assert report.parts["prefect"]["items"] == 2  # ingest-a1 (third newest ingest) and tree@GONE
