"""embed_cached writes computed vectors to the cache slice by slice and merges the slices at the end."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from arborag.storage.embedding_cache import EmbeddingCache
from arborag.tasks.embedding.cached import embed_cached


class FakeEmbedder:
    """A fake: vectors from a hash of the text; records the size of every embed call and can fail on one."""

    model_id = "fake-model"
    dim = 8

    def __init__(self, fail_on_call: int | None = None, parallel_texts: int = 0) -> None:
        self.calls: list[int] = []
        self.fail_on_call = fail_on_call
        self.parallel_texts = parallel_texts

    def embed(self, texts, progress=None):  # noqa: ANN001, ANN201 - the embedder protocol
        self.calls.append(len(texts))
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise RuntimeError("fake failure in the middle of embedding")
        out = np.array([np.frombuffer(hashlib.sha256(t.encode()).digest()[:32], dtype=np.uint8)[: self.dim] for t in texts],
                       dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _texts(n: int) -> list[str]:
    return [f"text number {i} " + "x" * (i % 17) for i in range(n)]


def test_slices_reach_the_cache_and_end_as_one_shard(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    fake = FakeEmbedder()
    vectors, computed = embed_cached(_texts(100) + _texts(10), fake, cache, flush_every=30)
    assert computed == 100 and fake.calls == [30, 30, 30, 10]
    assert len(list(tmp_path.glob("emb-*.parquet"))) == 1  # merged
    again = EmbeddingCache(tmp_path)
    assert len(again) == 100
    cached, n = embed_cached(_texts(100), FakeEmbedder(), again)
    assert n == 0 and np.array_equal(cached, vectors[:100])


def test_a_failure_mid_way_keeps_the_finished_slices(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        embed_cached(_texts(100), FakeEmbedder(fail_on_call=3), EmbeddingCache(tmp_path), flush_every=30)
    assert len(EmbeddingCache(tmp_path)) == 60
    rerun = FakeEmbedder()
    _, computed = embed_cached(_texts(100), rerun, EmbeddingCache(tmp_path), flush_every=30)
    assert computed == 40 and rerun.calls == [30, 10]


def test_a_damaged_slice_file_is_skipped_and_recomputed(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        embed_cached(_texts(90), FakeEmbedder(fail_on_call=3), EmbeddingCache(tmp_path), flush_every=30)
    shards = sorted(tmp_path.glob("emb-*.parquet"))
    assert len(shards) == 2
    shards[-1].write_bytes(shards[-1].read_bytes()[: 200])  # torn
    rerun = FakeEmbedder()
    _, computed = embed_cached(_texts(90), rerun, EmbeddingCache(tmp_path), flush_every=30)
    assert computed == 60


def test_no_cache_or_no_flush_embeds_in_one_call(tmp_path: Path) -> None:
    fake = FakeEmbedder()
    embed_cached(_texts(100), fake, None, flush_every=30)
    embed_cached(_texts(100), fake, EmbeddingCache(tmp_path), flush_every=None)
    assert fake.calls == [100, 100]


def test_a_fan_out_gets_slices_of_its_size(tmp_path: Path) -> None:
    fake = FakeEmbedder(parallel_texts=64)
    embed_cached(_texts(100), fake, EmbeddingCache(tmp_path), flush_every=30)
    assert fake.calls == [64, 36]


def test_the_embedder_asks_for_bigger_slices_only_with_a_fan_out() -> None:
    from arborag.config import load_config
    from arborag.embed.model import Embedder

    cfg = load_config().embed
    assert Embedder(cfg).parallel_texts == 0
    assert Embedder(cfg, map=map).parallel_texts == cfg.batch_size * 8 * 16


def test_a_merge_cut_short_is_finished_on_the_next_open(tmp_path: Path) -> None:
    """A crash after the merged shard is written and before its sources are deleted: simulated by
    putting the sources back; the next open deletes them and no entry is there twice."""
    with pytest.raises(RuntimeError):
        embed_cached(_texts(90), FakeEmbedder(fail_on_call=3), EmbeddingCache(tmp_path), flush_every=30)
    sources = {p.name: p.read_bytes() for p in tmp_path.glob("emb-*.parquet")}
    cache = EmbeddingCache(tmp_path)
    merged = cache.merge_shards(sorted(tmp_path / n for n in sources))
    assert merged is not None and sorted(p.name for p in tmp_path.glob("emb-*.parquet")) == [merged.name]
    for name, data in sources.items():
        (tmp_path / name).write_bytes(data)
    reopened = EmbeddingCache(tmp_path)
    assert sorted(p.name for p in tmp_path.glob("emb-*.parquet")) == [merged.name]
    assert len(reopened) == 60 and reopened.n_shards == 1
