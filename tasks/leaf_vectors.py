"""Stage ``embed``: the leaves' vectors, staged as ``staging/<key>/leaf_vectors.parquet``.

Also the run's one embed function (:func:`embed_function`: the foundation embedder behind the
storage embedding cache, counting what it computes in ``ctx.counters``), which the tree stage
hands to :func:`arborag.tasks.tree.build_tree` for the summaries, and the staged vector files
(``node_id`` + ``vector`` fixed-size list; :mod:`arborag.storage.arrays` converts).
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
from arborag.storage.tables import atomic_path, atomic_write_parquet
from arborag.tasks.context import StageContext
from arborag.tasks.embeddings import embed_cached
from arborag.tasks.leaves import load_leaves
from arborag.tasks.tree import leaf_embed_texts

__all__ = ["OUTPUTS", "embed_function", "embedder_of", "header_chars", "read_vectors_file", "run_leaf_vectors", "write_vectors_file"]

OUTPUTS = ("leaf_vectors.parquet",)


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
    (:func:`arborag.tasks.tree.leaf_embed_texts`; 0 without a header): repeated in every window of a
    long chunk, so each window is embedded with the chunk's context."""
    if "header" not in leaves.column_names:
        return [0] * leaves.num_rows
    lengths = pc.fill_null(pc.utf8_length(leaves.column("header")), 0).to_numpy(zero_copy_only=False)
    return [int(n) + 2 if n else 0 for n in lengths]


def write_vectors_file(path: Path, ids: pa.Array | pa.ChunkedArray, vectors: np.ndarray) -> None:
    """Stage ``vectors`` (rows aligned with ``ids``) as a Parquet file, atomically."""
    atomic_write_parquet(pa.table({"node_id": ids, "vector": vectors_to_arrow(vectors)}), path)


def read_vectors_file(path: Path) -> tuple[pa.ChunkedArray, np.ndarray]:
    """The ids and the ``(n, dim)`` float32 vectors of a staged vector file."""
    t = pq.read_table(path)
    return t.column("node_id"), arrow_to_vectors(t.column("vector"))


def run_leaf_vectors(ctx: StageContext, key: str) -> dict[str, Any]:
    """Embed the run's leaves (``header + text``) and stage their vectors under ``key``."""
    stage_dir = ctx.staging_dir(key)
    stage_dir.mkdir(parents=True, exist_ok=True)
    leaves = load_leaves(ctx)
    before = ctx.counters.embedded_texts
    path = stage_dir / OUTPUTS[0]
    if leaves.num_rows <= STREAM_ROWS:
        vectors = embed_function(ctx, "leaves")(leaf_embed_texts(leaves), header_chars(leaves))
        write_vectors_file(path, leaves.column("chunk_id"), vectors)
    else:
        _stream_leaf_vectors(ctx, leaves, path)
    ctx.counters.stages["embed"] = {"leaves": leaves.num_rows, "computed": ctx.counters.embedded_texts - before}
    return {"path": str(path), "rows": leaves.num_rows}


#: Leaves per slice when a corpus has more (docs/SCALE.md): the texts (Python strings), their
#: hashes and vectors exist for one slice at a time; the vectors go to Parquet as they come.
STREAM_ROWS = 8192


def _stream_leaf_vectors(ctx: StageContext, leaves: pa.Table, path: Path) -> None:
    """Embed ``leaves`` slice by slice through the cache and append each slice's vectors to ``path``
    (one Parquet row group per slice, written atomically as a whole)."""
    embedder, cache = embedder_of(ctx)
    with progress_bar("embed leaves", leaves.num_rows, enabled=ctx.progress) as advance, atomic_path(path) as tmp:
        writer: pq.ParquetWriter | None = None
        try:
            for start in range(0, leaves.num_rows, STREAM_ROWS):
                part = leaves.slice(start, STREAM_ROWS)
                vectors, n_new = embed_cached(leaf_embed_texts(part), embedder, cache, progress=advance,
                                              prefix_chars=header_chars(part))
                ctx.counters.embedded_texts += n_new
                table = pa.table({"node_id": part.column("chunk_id"), "vector": vectors_to_arrow(vectors)})
                if writer is None:
                    writer = pq.ParquetWriter(str(tmp), table.schema, compression="zstd")
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
