"""LightEmbedder (torch + tokenizers, no sentence-transformers) gives the build embedder's vectors, bit for bit.

Equality figure: ``LightEmbedder.embed(texts)`` == ``Embedder.embed(texts)`` exactly (every float
equal), for the same batches: real texts of the shared corpora in several padded batches and
groups, long texts over the model's 256-token window with and without a repeated prefix, a single
text (one thread, as a query), bfloat16 (the default) and float32. The embedding worker of a cold
CLI run uses it (tests/embed/test_embed_worker.py compares the worker with the in-process
sentence-transformers model).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arborag.config import EmbedConfig
from arborag.embed.model import Embedder
from arborag.embed.light import LightEmbedder, light_supported

CINDERELLA = (Path(__file__).resolve().parents[2] / "examples" / "corpus" / "cinderella.txt").read_text(encoding="utf-8")
TEXTS = [
    "How did Cinderella reach her happy ending?",
    "golden slipper",
    "a",
    "Der Prinz suchte überall nach ihr — 王子と靴",
    CINDERELLA[:4000],  # far more than 256 tokens: the mean of its windows (embed.long_text)
    CINDERELLA[4000:4600],
]


PREFIX = [0, 0, 0, 0, 40, 0]  # the long text embeds with its first 40 characters repeated in every window


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_same_vectors_as_the_build_embedder(dtype: str) -> None:
    cfg = EmbedConfig(dtype=dtype)
    full, light = Embedder(cfg), LightEmbedder(cfg)
    assert light_supported(light.path)
    assert len(full.windows(TEXTS[4])) > 1
    want = full.embed(TEXTS, prefix_chars=PREFIX)
    got = light.embed(TEXTS, prefix_chars=PREFIX)
    assert got.shape == want.shape == (len(TEXTS), full.dim) and got.dtype == np.float32
    assert np.array_equal(got, want)
    for text in (TEXTS[0], TEXTS[4]):  # one text: one thread (embed.threads = auto), as a query
        assert np.array_equal(light.embed([text]), full.embed([text]))
    assert light.windows(TEXTS[4], 40) == full.windows(TEXTS[4], 40)
    assert light.model_id == full.model_id and light.max_len == full.max_len == 256
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_same_vectors_on_real_corpus_texts_in_padded_batches(shared_data: Path) -> None:
    """Hundreds of real paragraphs of very different lengths, in batches of 8 inside groups of 64
    (sentence-transformers' own ordering decides which texts share a batch, so its padding)."""
    corpus = json.loads((shared_data / "hotpotqa" / "hotpotqa_train_corpus.json").read_text(encoding="utf-8"))
    texts = ["".join(sentences) for sentences in list(corpus.values())[:100]]
    texts += [f"Title: {title}\n\n" + " ".join(sentences) * 2 for title, sentences in list(corpus.items())[100:106]]
    prefix = [0] * 100 + [len(f"Title: {title}\n\n") for title in list(corpus)[100:106]]
    cfg = EmbedConfig(batch_size=8)
    full, light = Embedder(cfg), LightEmbedder(cfg)
    assert any(len(full.windows(t, p)) > 1 for t, p in zip(texts, prefix))
    lengths = {len(t) for t in texts}
    assert len(lengths) > 80  # padding in nearly every batch
    assert np.array_equal(light.embed(texts, prefix_chars=prefix), full.embed(texts, prefix_chars=prefix))


def test_empty_input_and_unsupported_folder(tmp_path: Path) -> None:
    light = LightEmbedder(EmbedConfig())
    assert light.embed([]).shape == (0, 384)
    assert not light_supported(tmp_path)
    (tmp_path / "modules.json").write_text('[{"type": "sentence_transformers.models.Transformer"}]')
    assert not light_supported(tmp_path)


def test_no_sentence_transformers_import() -> None:
    code = (
        "import sys\n"
        "from arborag.config import EmbedConfig\n"
        "from arborag.embed.light import LightEmbedder\n"
        "LightEmbedder(EmbedConfig()).embed(['glass slipper'])\n"
        "bad = [m for m in ('sentence_transformers', 'transformers', 'sklearn', 'scipy') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
