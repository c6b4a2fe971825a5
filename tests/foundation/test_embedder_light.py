"""LightEmbedder (torch + tokenizers, no sentence-transformers) gives the build embedder's vectors.

Equality figure: max absolute difference per component <= 1e-5 between
``LightEmbedder.embed([t])`` and ``Embedder.embed([t])`` (one text per call, as a query is
embedded; the reference on torch's default threads, the light one on one thread), for bfloat16
(the default) and float32, on real sentences including a text longer than the model's
256-token window (truncation must match). Measured here: 0.0 (bit-identical). Against the
build's *batched* (padded) bf16 embedding the same texts differ by up to ~2e-3 — that is the
build embedder's own padding noise in bf16 (float32: 1.5e-7), not the light embedder's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arborag.config import EmbedConfig
from arborag.embedder import Embedder
from arborag.embedder_light import LightEmbedder, light_supported

CINDERELLA = (Path(__file__).resolve().parents[2] / "examples" / "corpus" / "cinderella.txt").read_text(encoding="utf-8")
TEXTS = [
    "How did Cinderella reach her happy ending?",
    "golden slipper",
    "a",
    "Der Prinz suchte überall nach ihr — 王子と靴",
    CINDERELLA[:4000],  # far more than 256 tokens: the mean of its windows (embed.long_text)
    CINDERELLA[4000:4600],
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_same_vectors_as_the_build_embedder(dtype: str) -> None:
    import torch

    threads = torch.get_num_threads()
    cfg = EmbedConfig(dtype=dtype)
    full, light = Embedder(cfg), LightEmbedder(cfg)
    assert light_supported(light.path)
    def one_by_one(t: str) -> np.ndarray:  # each window in its own forward pass, as the light embedder runs them
        wins = np.vstack([full.embed([w]) for w in full.windows(t)])
        mean = wins.astype(np.float64).sum(axis=0)
        return (mean / np.linalg.norm(mean)).astype(np.float32)[None, :]

    want = np.vstack([one_by_one(t) for t in TEXTS])  # with torch's default threads
    assert len(full.windows(TEXTS[4])) > 1
    try:
        got = light.embed(TEXTS)  # on one thread (LightEmbedder's default)
        assert torch.get_num_threads() == 1
        assert len(light._load()["tokenizer"].encode(TEXTS[4]).ids) == 256  # one forward pass never exceeds the limit
    finally:
        torch.set_num_threads(threads)
    assert got.shape == want.shape == (len(TEXTS), full.dim) and got.dtype == np.float32
    assert float(np.abs(got - want).max()) <= 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    assert light.model_id == full.model_id


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
        "from arborag.embedder_light import LightEmbedder\n"
        "LightEmbedder(EmbedConfig()).embed(['glass slipper'])\n"
        "bad = [m for m in ('sentence_transformers', 'transformers', 'sklearn', 'scipy') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
