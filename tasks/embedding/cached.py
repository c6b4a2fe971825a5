"""Embedding through the content-addressed cache (docs/METHODS.md §1.3, §5.1).

:func:`embed_cached` embeds only the texts (deduplicated) the cache does not have. The model
loader lives in the foundation (:mod:`arborag.embed.model`) and the cache in storage
(:mod:`arborag.storage.embedding_cache`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from arborag.embed.model import Embedder, Progress
from arborag.hashing import hash_text
from arborag.storage.embedding_cache import EmbeddingCache

__all__ = ["FLUSH_TEXTS", "embed_cached"]


#: Texts computed between two writes to the embedding cache (:func:`embed_cached`): what a killed
#: run can lose. 1,988 HotpotQA paragraphs (≤ 1,200 characters), packaged model, two runs each on
#: a loaded 2-core machine: CPU 63.7 s and 65.8 s in slices of 256, 59.7 s and 66.3 s in one call
#: (wall time varied 100-152 s with the load); a slice is one encode group of 8 batches at the
#: default ``embed.batch_size``, the unit the embedder encodes in anyway.
FLUSH_TEXTS = 256


def embed_cached(
    texts: Sequence[str],
    embedder: Embedder | Any,
    cache: EmbeddingCache | None,
    *,
    progress: Progress = None,
    prefix_chars: Sequence[int] | None = None,
    flush_every: int | None = FLUSH_TEXTS,
) -> tuple[np.ndarray, int]:
    """Vectors of ``texts`` (rows aligned), embedding only what the cache lacks.

    Identical texts are embedded once. Returns ``(vectors, n_computed)`` where ``n_computed``
    counts the distinct texts that went through the model. ``embedder`` needs ``model_id``,
    ``dim`` and ``embed(texts, progress=...)``. ``prefix_chars[i] > 0``: the first characters of
    ``texts[i]`` (a chunk's header) are repeated in each long-text window
    (:meth:`arborag.embed.model.Embedder.embed`); such a text's cache key is ``<text hash>+p<n>``.

    The texts to compute go through the model ``flush_every`` at a time (None: all at once), and
    each slice's vectors are written to the cache before the next slice starts: a run killed
    mid-way keeps every finished slice and the next run recomputes at most the one in flight.
    The slices written by one call are merged into one shard when the call ends.
    """
    texts = list(texts)
    dim = int(embedder.dim)
    if not texts:
        return np.zeros((0, dim), dtype=np.float32), 0
    pre = [int(p) for p in prefix_chars] if prefix_chars is not None else [0] * len(texts)
    hashes = [hash_text(t) + (f"+p{p}" if p > 0 else "") for t, p in zip(texts, pre, strict=True)]
    first: dict[str, int] = {}  # distinct hash -> first row holding it
    inverse = np.fromiter((first.setdefault(h, len(first)) for h in hashes), dtype=np.int64, count=len(hashes))
    unique = list(first)
    rows_of = np.unique(inverse, return_index=True)[1]  # first row of each distinct text
    distinct = np.zeros((len(unique), dim), dtype=np.float32)
    found = np.zeros(len(unique), dtype=bool)
    if cache is not None:
        found, vecs = cache.get_many(embedder.model_id, unique)
        if found.any():
            distinct[found] = np.stack([v for v in vecs if v is not None])
    if progress is not None and found.any():
        progress(int(found[inverse].sum()))
    missing = np.flatnonzero(~found)
    if len(missing):
        # longest first, then in slices of ``flush_every``: each slice's vectors reach the cache
        # (one fsynced shard) as soon as it is encoded, so a killed run loses at most the slice
        # in flight; the slices hold texts of similar length (little padding in a batch)
        lengths = np.fromiter((len(texts[rows_of[j]]) for j in missing), dtype=np.int64, count=len(missing))
        ordered = missing[np.argsort(-lengths, kind="stable")]
        step = len(ordered) if cache is None or flush_every is None else max(1, int(flush_every))
        step = max(step, int(getattr(embedder, "parallel_texts", 0) or 0))  # a fan-out gets enough groups
        written: list[Path] = []
        for start in range(0, len(ordered), step):
            part = ordered[start : start + step]
            todo = [texts[rows_of[j]] for j in part]
            todo_pre = [pre[rows_of[j]] for j in part]
            if any(todo_pre) and _takes_prefixes(embedder):
                new = embedder.embed(todo, progress=progress, prefix_chars=todo_pre)
            else:
                new = embedder.embed(todo, progress=progress)
            new = np.asarray(new, dtype=np.float32)
            if cache is not None:
                shard = cache.put_many(embedder.model_id, [unique[j] for j in part], new)
                if shard is not None:
                    written.append(shard)
            distinct[part] = new
        if cache is not None and len(written) > 1:
            cache.merge_shards(written)  # one shard per call, as before the slices
    return distinct[inverse], len(missing)


def _takes_prefixes(embedder: Any) -> bool:
    """Does ``embedder.embed`` accept ``prefix_chars`` (the foundation embedder does; test doubles may not)?"""
    try:
        return "prefix_chars" in inspect.signature(embedder.embed).parameters
    except (TypeError, ValueError):
        return False
