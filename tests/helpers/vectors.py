"""Synthetic unit vectors for the clustering tests: separated blobs with their labels."""

from __future__ import annotations

import numpy as np


def unit(x: np.ndarray) -> np.ndarray:
    """The rows of ``x`` scaled to length 1, float32."""
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def blobs(sizes: list[int], dim: int = 64, spread: float = 0.05, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One blob of ``size`` unit vectors around a random centre per entry of ``sizes``; (vectors, blob labels)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((len(sizes), dim))
    xs, labels = [], []
    for c, size in enumerate(sizes):
        xs.append(centers[c] + spread * rng.standard_normal((size, dim)))
        labels += [c] * size
    return unit(np.concatenate(xs)), np.array(labels)
