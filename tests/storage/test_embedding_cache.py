"""storage/embedding_cache.py: shards, model ids in keys, compaction, foreign shards, vectors without Python lists."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.embed import FakeEmbedder

from arborag.errors import SchemaError
from arborag.hashing import hash_text
from arborag.storage.embedding_cache import EmbeddingCache, _read_shard
from arborag.tasks.embedding.cached import embed_cached


def test_cache_keys_include_the_model_id(tmp_path):
    cache = EmbeddingCache(tmp_path)
    fake = FakeEmbedder()
    embed_cached(["x"], fake, cache)
    other = FakeEmbedder()
    other.model_id = "fake@bfloat16"
    _, n = embed_cached(["x"], other, cache)
    assert n == 1
    assert ("fake@float32", hash_text("x")) in cache and ("fake@bfloat16", hash_text("x")) in cache


def test_cache_files_are_plain_parquet_and_compact(tmp_path):
    cache = EmbeddingCache(tmp_path)
    fake = FakeEmbedder()
    embed_cached(["a"], fake, cache)
    embed_cached(["b"], fake, cache)
    shards = sorted(tmp_path.glob("*.parquet"))
    assert len(shards) == 2
    table = pq.read_table(shards[0])
    assert table.schema.field("vector").type == pa.list_(pa.float32(), 8)
    assert not list(tmp_path.glob("*.tmp"))
    cache.compact()
    assert len(list(tmp_path.glob("*.parquet"))) == 1
    again = EmbeddingCache(tmp_path)
    assert len(again) == 2
    # a shard written by another tool with a variable-size list column is read too
    pq.write_table(
        pa.table({"model_id": ["fake@float32"], "text_hash": [hash_text("z")], "vector": [[0.5] * 8]}),
        tmp_path / "emb-external.parquet",
    )
    assert ("fake@float32", hash_text("z")) in EmbeddingCache(tmp_path)


def test_a_shard_of_several_models_and_vectors_read_without_python_lists(tmp_path):
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    table = pa.table(
        {
            "model_id": ["a", "b", "a", "b"],
            "text_hash": ["h1", "h2", "h3", "h4"],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), 3),
        }
    )
    pq.write_table(table, tmp_path / "emb-mixed.parquet")
    cache = EmbeddingCache(tmp_path)
    found, vecs = cache.get_many("a", ["h3", "h1", "h2"])
    assert found.tolist() == [True, True, False]
    np.testing.assert_array_equal(vecs[0], v[2])
    np.testing.assert_array_equal(vecs[1], v[0])
    found, vecs = cache.get_many("b", ["h4"])
    np.testing.assert_array_equal(vecs[0], v[3])
    assert len(cache) == 4 and cache.n_shards == 1
    # a shard of one model becomes one float32 matrix (decoded batch by batch, no Python floats)
    only = tmp_path / "one"
    only.mkdir()
    pq.write_table(table.filter(pa.array([True, False, True, False])), only / "emb-a.parquet")
    one = EmbeddingCache(only)
    _, vecs = one.get_many("a", ["h1"])
    assert vecs[0].dtype == np.float32 and len(one._blocks["a"]) == 1 and one._blocks["a"][0].shape == (2, 3)
    np.testing.assert_array_equal(vecs[0], v[0])


def test_foreign_or_ragged_shards_are_ignored_and_bad_puts_are_typed_errors(tmp_path):
    pq.write_table(pa.table({"model_id": ["m", "m"], "text_hash": ["x", "y"], "vector": [[1.0, 2.0], [1.0]]}), tmp_path / "emb-ragged.parquet")
    (tmp_path / "emb-garbage.parquet").write_bytes(b"not parquet")
    cache = EmbeddingCache(tmp_path)
    assert len(cache) == 0 and cache.n_shards == 0
    with pytest.raises(SchemaError):
        cache.put_many("m", ["x", "y"], np.zeros((3, 4), np.float32))
    assert cache.put_many("m", ["x", "x"], np.ones((2, 4), np.float32)) is not None
    assert cache.put_many("m", ["x"], np.ones((1, 4), np.float32)) is None  # already present
    assert len(EmbeddingCache(tmp_path)) == 1


def test_vectors_are_read_batch_by_batch_into_one_matrix(tmp_path):
    v = np.random.default_rng(1).standard_normal((7, 5)).astype(np.float32)
    cache = EmbeddingCache(tmp_path)
    cache.put_many("m", [f"h{i}" for i in range(7)], v)
    (shard,) = tmp_path.glob("emb-*.parquet")
    keys, vectors = _read_shard(shard, batch_rows=3)  # three batches: 3 + 3 + 1 rows
    assert keys.column("text_hash").to_pylist() == [f"h{i}" for i in range(7)]
    np.testing.assert_array_equal(vectors, v)
