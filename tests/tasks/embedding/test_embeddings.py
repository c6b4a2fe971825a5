"""tasks/embedding/cached.py: embed_cached embeds only what the cache lacks, each distinct text once."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.embed import TEXTS, FakeEmbedder

from arborag.config import EmbedConfig
from arborag.embed.model import Embedder
from arborag.storage.embedding_cache import EmbeddingCache
from arborag.tasks.embedding.cached import embed_cached


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The real packaged model (bfloat16), loaded once per module."""
    e = Embedder(EmbedConfig(dtype="bfloat16", batch_size=2))
    e.embed(["warm up"])
    return e


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


def test_embed_cached_without_cache_and_with_real_model(embedder, tmp_path):
    e = embedder
    cache = EmbeddingCache(tmp_path)
    v, n = embed_cached(TEXTS + TEXTS[:2], e, cache)
    assert n == len(TEXTS) and v.shape == (len(TEXTS) + 2, 384)
    v2, n2 = embed_cached(TEXTS, e, None)
    assert n2 == len(TEXTS)
    assert np.sum(v[: len(TEXTS)] * v2, axis=1).min() > 0.999


def test_model_facts_come_from_config_files_without_torch(tmp_path) -> None:
    """Dimension and max sequence length are read from a model folder's JSON files; a Dense
    layer makes the dimension unknown; broken or odd files are skipped, not fatal."""
    import json

    from arborag.embed.model import _dim_from_files, max_seq_length

    m = tmp_path / "model"
    (m / "1_Pooling").mkdir(parents=True)
    assert _dim_from_files(m) is None and max_seq_length(m) == 512
    (m / "config.json").write_text(json.dumps({"hidden_size": 384, "max_position_embeddings": 512}))
    (m / "sentence_bert_config.json").write_text("[1, 2]")  # valid JSON, not an object: skipped
    assert _dim_from_files(m) == 384 and max_seq_length(m) == 512
    (m / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 256}))
    (m / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    assert _dim_from_files(m) == 256 and max_seq_length(m) == 128
    (m / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 1}))  # nonsense: next source
    assert max_seq_length(m) == 512
    (m / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Dense"}]))
    assert _dim_from_files(m) is None
