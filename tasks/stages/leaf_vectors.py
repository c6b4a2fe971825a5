"""Stage ``embed``: the leaves' vectors, staged as ``staging/<key>/leaf_vectors.parquet``.

The run's embed function lives in :mod:`arborag.tasks.embedding.embedder`, the staged vector files in :mod:`arborag.tasks.embedding.vector_files`
(the tree and tree-update stages use them too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from arborag.progress import progress_bar
from arborag.storage.arrays import vectors_to_arrow
from arborag.storage.tables import atomic_path
from arborag.tasks.build.leaves import load_leaves
from arborag.tasks.embedding.cached import embed_cached
from arborag.tasks.embedding.embedder import embed_function, embedder_of, header_chars
from arborag.tasks.embedding.vector_files import VECTOR_FILE_OPTIONS, write_vectors_file
from arborag.tasks.stage_context import StageContext, StageSummary
from arborag.tasks.tree.build import leaf_embed_texts

__all__ = ["OUTPUTS", "STREAM_ROWS", "LeafVectorsSummary", "run_leaf_vectors"]

OUTPUTS = ("leaf_vectors.parquet",)


@dataclass(frozen=True)
class LeafVectorsSummary(StageSummary):
    """The staged leaf vectors: the flow gets the file and its rows; the run record
    (``runs.counts`` key ``embed``) the leaves and how many texts were embedded, not read from the cache."""

    path: str
    rows: int
    computed: int

    def counts(self) -> dict[str, Any]:
        return {"leaves": self.rows, "computed": self.computed}

    def report(self) -> dict[str, Any]:
        return {"path": self.path, "rows": self.rows}


def run_leaf_vectors(ctx: StageContext, key: str) -> LeafVectorsSummary:
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
    return LeafVectorsSummary(path=str(path), rows=leaves.num_rows, computed=ctx.counters.embedded_texts - before)


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
                    writer = pq.ParquetWriter(str(tmp), table.schema, **VECTOR_FILE_OPTIONS)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
