"""arborag/embed/model.py: the lazily loaded sentence-transformers embedder (the real packaged model)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.embed import TEXTS

from arborag.config import EmbedConfig
from arborag.errors import ConfigError
from arborag.embed.model import Embedder


@pytest.fixture(scope="module")
def embedders() -> dict[str, Embedder]:
    """The real packaged model, loaded once per module in both dtypes."""
    out = {d: Embedder(EmbedConfig(dtype=d, batch_size=2)) for d in ("bfloat16", "float32")}
    for e in out.values():
        e.embed(["warm up"])
    return out


def test_model_id_and_dim_without_loading():
    e = Embedder(EmbedConfig())
    # the long-text policy is part of the id (mean of 256-token windows sharing 32 tokens)
    assert e.model_id == "all-MiniLM-L6-v2@bfloat16+mean256o32"
    assert Embedder(EmbedConfig(dtype="float32")).model_id == "all-MiniLM-L6-v2@float32+mean256o32"
    assert Embedder(EmbedConfig(long_text="truncate")).model_id == "all-MiniLM-L6-v2@bfloat16"
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


def test_embedders_of_one_process_share_the_loaded_model(embedders):
    """A second Embedder of the same model, dtype and threads (a warm `arborag schedule` process
    makes one per run) reuses the loaded model: no second load, the same vectors."""
    first = embedders["bfloat16"]
    again = Embedder(EmbedConfig(dtype="bfloat16", batch_size=2))
    assert not again.loaded
    again.load()
    assert again.loaded and again._model is first._model
    assert np.array_equal(again.embed(TEXTS[:3]), first.embed(TEXTS[:3]))
    assert Embedder(EmbedConfig(dtype="float32", batch_size=2))._load() is embedders["float32"]._model
