"""Embedding through the content-addressed cache (SPEC §1 caches, §5.1).

:func:`embed_cached` embeds only the texts (deduplicated) the cache does not have. The model
loader lives in the foundation (:mod:`arborag.embedder`) and the cache in storage
(:mod:`arborag.storage.embedding_cache`); both are re-exported here for existing callers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from arborag.embedder import PACKAGED_MODEL, Embedder, Progress, resolve_model_path
from arborag.hashing import hash_text
from arborag.storage.embedding_cache import EmbeddingCache

__all__ = [
    "PACKAGED_MODEL",
    "Embedder",
    "EmbeddingCache",
    "embed_cached",
    "resolve_model_path",
]


def embed_cached(
    texts: Sequence[str],
    embedder: Embedder | Any,
    cache: EmbeddingCache | None,
    *,
    progress: Progress = None,
) -> tuple[np.ndarray, int]:
    """Vectors of ``texts`` (rows aligned), embedding only what the cache lacks.

    Identical texts are embedded once. Returns ``(vectors, n_computed)`` where ``n_computed``
    counts the distinct texts that went through the model. ``embedder`` needs ``model_id``,
    ``dim`` and ``embed(texts, progress=...)``.
    """
    texts = list(texts)
    dim = int(embedder.dim)
    out = np.zeros((len(texts), dim), dtype=np.float32)
    if not texts:
        return out, 0
    hashes = [hash_text(t) for t in texts]
    first: dict[str, int] = {}
    for i, h in enumerate(hashes):
        first.setdefault(h, i)
    unique = list(first)
    if cache is not None:
        found, vecs = cache.get_many(embedder.model_id, unique)
    else:
        found, vecs = np.zeros(len(unique), dtype=bool), [None] * len(unique)
    by_hash: dict[str, np.ndarray] = {h: v for h, v in zip(unique, vecs) if v is not None}
    if progress is not None and found.any():
        progress(int(sum(1 for h in hashes if h in by_hash)))
    missing = [h for h, f in zip(unique, found) if not f]
    if missing:
        new = embedder.embed([texts[first[h]] for h in missing], progress=progress)
        new = np.asarray(new, dtype=np.float32)
        if cache is not None:
            cache.put_many(embedder.model_id, missing, new)
        for h, v in zip(missing, new):
            by_hash[h] = v
    for i, h in enumerate(hashes):
        out[i] = by_hash[h]
    return out, len(missing)
