"""The run's embedder and embed function.

- :func:`embedder_of` / :func:`embed_function`: the foundation embedder (loaded once per run)
  behind the corpus's embedding cache, counting what it computes in ``ctx.counters``; the embed,
  tree and tree-update stages embed through it.
- :func:`header_chars`: the header prefix of each leaf's embedded text.

The staged vector files they write are :mod:`arborag.tasks.embedding.vector_files`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arborag.embed.model import Embedder
from arborag.progress import progress_bar
from arborag.storage.embedding_cache import EmbeddingCache
from arborag.tasks.embedding.cached import embed_cached
from arborag.tasks.stage_context import StageContext

__all__ = ["embed_function", "embedder_of", "header_chars"]


def embedder_of(ctx: StageContext) -> tuple[Embedder, EmbeddingCache]:
    """The run's embedder (loaded once per run) and the corpus's embedding cache."""
    return (
        ctx.shared("embedder", lambda: Embedder(ctx.config.embed)),
        ctx.shared("embedding_cache", lambda: EmbeddingCache(ctx.corpus.cache_dir / "embeddings")),
    )


def embed_function(ctx: StageContext, label: str) -> Callable[..., np.ndarray]:
    """``embed(texts, prefix_chars=None) -> (n, dim) float32`` through the cache; adds computed
    texts to the counters (``prefix_chars``: see :func:`arborag.tasks.embedding.cached.embed_cached`)."""

    def embed(texts: Sequence[str], prefix_chars: Sequence[int] | None = None) -> np.ndarray:
        embedder, cache = embedder_of(ctx)
        texts = list(texts)
        with progress_bar(f"embed {label}", len(texts), enabled=ctx.progress) as advance:
            vectors, n_new = embed_cached(texts, embedder, cache, progress=advance, prefix_chars=prefix_chars)
        ctx.counters.embedded_texts += n_new
        return vectors

    return embed


def header_chars(leaves: pa.Table) -> list[int]:
    """Per leaf, the characters of ``header + "\\n\\n"`` at the start of its embedded text
    (:func:`arborag.tasks.tree.build.leaf_embed_texts`; 0 without a header): repeated in every window of a
    long chunk, so each window is embedded with the chunk's context."""
    if "header" not in leaves.column_names:
        return [0] * leaves.num_rows
    lengths = pc.fill_null(pc.utf8_length(leaves.column("header")), 0).to_numpy(zero_copy_only=False)
    return [int(n) + 2 if n else 0 for n in lengths]
