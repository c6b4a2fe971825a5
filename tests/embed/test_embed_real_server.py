"""Opt-in: embed.backend = openai against a real OpenAI-compatible embeddings server.

Set ``ARBORAG_TEST_EMBED_URL`` (e.g. ``http://127.0.0.1:8012/v1`` of
``python -m llama_cpp.server --model <embedding GGUF> --embedding true --port 8012``, Text
Embeddings Inference, vLLM or Ollama) and ``ARBORAG_TEST_EMBED_MODEL`` (the model name the
server expects; default ``default``); the key, if the server needs one, in ``OPENAI_API_KEY``.
Skips with the reason when unset. docs/PLUGS.md has the commands.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from arborag.config import EmbedConfig
from arborag.embed.model import Embedder

URL = os.environ.get("ARBORAG_TEST_EMBED_URL")
MODEL = os.environ.get("ARBORAG_TEST_EMBED_MODEL", "default")

pytestmark = pytest.mark.skipif(
    not URL, reason="ARBORAG_TEST_EMBED_URL is not set: no real embeddings server to test against (docs/PLUGS.md)"
)


def test_a_real_server_embeds_consistently() -> None:
    e = Embedder(EmbedConfig(backend="openai", base_url=URL, api_model=MODEL, max_input_tokens=400, timeout_s=120))
    texts = ["The glass slipper fit Cinderella.", "Cinderella's slipper was made of glass.", "Jupiter has a great red spot."]
    t0 = time.perf_counter()
    v = e.embed(texts)
    took = time.perf_counter() - t0
    assert v.shape == (3, e.dim) and e.dim > 8
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2]), "paraphrases are closer than an unrelated sentence"
    again = e.embed(texts[:1])
    assert float(again[0] @ v[0]) > 0.999  # the same text, the same vector
    long = " ".join(["The prince searched the whole kingdom for the owner of the slipper."] * 120)
    assert e.embed([long]).shape == (1, e.dim)  # windowed under max_input_tokens, not refused
    print(f"real server {URL} model {MODEL}: dim {e.dim}, 3 texts in {took:.2f}s")
