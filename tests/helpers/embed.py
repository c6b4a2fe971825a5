"""Test data and a deterministic fake embedder for the embedding tests."""

from __future__ import annotations

import numpy as np

from arborag.hashing import hash_text

__all__ = ["TEXTS", "FakeEmbedder"]

TEXTS = [
    "Cinderella lost her glass slipper at the royal ball.",
    "The prince searched the whole kingdom for the girl whose foot fit the slipper.",
    "Gustave Eiffel's company designed and built the tower for the 1889 World's Fair.",
    "Short.",
    "A much longer text about the history of Paris, its bridges, its river, its museums and the "
    "many visitors who come every year to see the Eiffel Tower and the Louvre." * 3,
]


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
