"""Embedder, EmbeddingCache and embed_cached (tasks/embeddings.py)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arborag.config import EmbedConfig
from arborag.errors import ConfigError
from arborag.hashing import hash_text
from arborag.tasks.embeddings import Embedder, EmbeddingCache, embed_cached

TEXTS = [
    "Cinderella lost her glass slipper at the royal ball.",
    "The prince searched the whole kingdom for the girl whose foot fit the slipper.",
    "Gustave Eiffel's company designed and built the tower for the 1889 World's Fair.",
    "Short.",
    "A much longer text about the history of Paris, its bridges, its river, its museums and the "
    "many visitors who come every year to see the Eiffel Tower and the Louvre." * 3,
]


@pytest.fixture(scope="module")
def embedders() -> dict[str, Embedder]:
    """The real packaged model, loaded once per module in both dtypes."""
    out = {d: Embedder(EmbedConfig(dtype=d, batch_size=2)) for d in ("bfloat16", "float32")}
    for e in out.values():
        e.embed(["warm up"])
    return out


class FakeEmbedder:
    """Deterministic fake with the Embedder surface; counts the texts it embeds."""

    model_id = "fake@float32"
    dim = 8

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts, *, progress=None):
        texts = list(texts)
        self.calls.append(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            rng = np.random.default_rng(int(hash_text(t)[:8], 16))
            v = rng.standard_normal(self.dim)
            out[i] = v / np.linalg.norm(v)
        if progress is not None:
            progress(len(texts))
        return out


def test_model_id_and_dim_without_loading():
    e = Embedder(EmbedConfig())
    assert e.model_id == "all-MiniLM-L6-v2@bfloat16"
    assert Embedder(EmbedConfig(dtype="float32")).model_id == "all-MiniLM-L6-v2@float32"
    assert e.dim == 384 and not e.loaded


def test_unknown_model_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        Embedder(EmbedConfig(model=str(tmp_path / "nope")))


def test_embed_shape_norm_and_order(embedders):
    e = embedders["bfloat16"]
    seen: list[int] = []
    v = e.embed(TEXTS, progress=seen.append)
    assert v.dtype == np.float32 and v.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert sum(seen) == len(TEXTS)
    # rows follow the input order although batches are sorted by length
    rev = e.embed(TEXTS[::-1])
    np.testing.assert_allclose(rev[::-1], v, atol=2e-3)
    # a text alone embeds like the same text in a batch
    single = e.embed([TEXTS[2]])
    assert float(single[0] @ v[2]) > 0.999
    assert e.embed([]).shape == (0, 384)


def test_bf16_agrees_with_fp32(embedders):
    a = embedders["bfloat16"].embed(TEXTS)
    b = embedders["float32"].embed(TEXTS)
    cos = np.sum(a * b, axis=1)
    assert cos.min() > 0.99
    # and the embedding is semantic: slipper texts are closer to each other than to the tower
    assert b[0] @ b[1] > b[0] @ b[2]


def test_cache_hits_misses_and_dedup(tmp_path):
    fake = FakeEmbedder()
    cache = EmbeddingCache(tmp_path / "emb")
    texts = ["a", "b", "a", "c"]
    v1, n1 = embed_cached(texts, fake, cache)
    assert n1 == 3 and fake.calls == [["a", "b", "c"]]
    np.testing.assert_array_equal(v1[0], v1[2])
    v2, n2 = embed_cached(["c", "d", "a", "d"], fake, cache)
    assert n2 == 1 and fake.calls[-1] == ["d"]
    np.testing.assert_array_equal(v2[0], v1[3])
    np.testing.assert_array_equal(v2[2], v1[0])
    v3, n3 = embed_cached(texts, fake, cache)
    assert n3 == 0 and len(fake.calls) == 2
    np.testing.assert_array_equal(v3, v1)
    # persisted: a new cache object over the folder sees every entry
    reopened = EmbeddingCache(tmp_path / "emb")
    assert len(reopened) == 4 and reopened.n_shards == 2
    v4, n4 = embed_cached(["d", "b"], fake, reopened)
    assert n4 == 0
    np.testing.assert_array_equal(v4[1], v1[1])


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


def test_embed_cached_without_cache_and_with_real_model(embedders, tmp_path):
    e = embedders["bfloat16"]
    cache = EmbeddingCache(tmp_path)
    v, n = embed_cached(TEXTS + TEXTS[:2], e, cache)
    assert n == len(TEXTS) and v.shape == (len(TEXTS) + 2, 384)
    v2, n2 = embed_cached(TEXTS, e, None)
    assert n2 == len(TEXTS)
    assert np.sum(v[: len(TEXTS)] * v2, axis=1).min() > 0.999
