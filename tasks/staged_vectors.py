"""The run's embedder and embed function, and the staged vector files of a build.

- :func:`embedder_of` / :func:`embed_function`: the foundation embedder (loaded once per run)
  behind the corpus's embedding cache, counting what it computes in ``ctx.counters``; the embed,
  tree and tree-update stages embed through it.
- :func:`write_vectors_file` / :func:`read_vectors_file`: staged vector files (``node_id`` +
  ``vector`` fixed-size list; :mod:`arborag.storage.arrays` converts), written by the embed,
  tree and tree-update stages and read by the tree, tree-update and vectors stages.
- :func:`header_chars`: the header prefix of each leaf's embedded text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from arborag.embedder import Embedder
from arborag.progress import progress_bar
from arborag.storage.arrays import arrow_to_vectors, vectors_to_arrow
from arborag.storage.embedding_cache import EmbeddingCache
from arborag.storage.tables import atomic_write_parquet
from arborag.tasks.embeddings import embed_cached
from arborag.tasks.stage_context import StageContext

__all__ = ["VECTOR_FILE_OPTIONS", "embed_function", "embedder_of", "header_chars", "read_vectors_file", "write_vectors_file"]


def embedder_of(ctx: StageContext) -> tuple[Embedder, EmbeddingCache]:
    """The run's embedder (loaded once per run) and the corpus's embedding cache."""
    return (
        ctx.shared("embedder", lambda: Embedder(ctx.config.embed)),
        ctx.shared("embedding_cache", lambda: EmbeddingCache(ctx.corpus.cache_dir / "embeddings")),
    )


def embed_function(ctx: StageContext, label: str) -> Callable[..., np.ndarray]:
    """``embed(texts, prefix_chars=None) -> (n, dim) float32`` through the cache; adds computed
    texts to the counters (``prefix_chars``: see :func:`arborag.tasks.embeddings.embed_cached`)."""

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


#: Parquet options of a staged vector file: float vectors barely compress (2,982 × 384 floats:
#: 4.9 MB zstd, 5.3 MB plain) and the dictionary a writer tries on every column first costs more
#: than the write (43 ms with the defaults and zstd, 17 ms with these; the file lives until the
#: snapshot is published).
VECTOR_FILE_OPTIONS: dict[str, Any] = {"compression": "none", "use_dictionary": False, "write_statistics": False}


def write_vectors_file(path: Path, ids: pa.Array | pa.ChunkedArray, vectors: np.ndarray) -> None:
    """Stage ``vectors`` (rows aligned with ``ids``) as a Parquet file, atomically."""
    atomic_write_parquet(pa.table({"node_id": ids, "vector": vectors_to_arrow(vectors)}), path, **VECTOR_FILE_OPTIONS)


def read_vectors_file(path: Path) -> tuple[pa.ChunkedArray, np.ndarray]:
    """The ids and the ``(n, dim)`` float32 vectors of a staged vector file."""
    t = pq.read_table(path)
    return t.column("node_id"), arrow_to_vectors(t.column("vector"))
