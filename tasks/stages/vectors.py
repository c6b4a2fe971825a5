"""Stage ``vectors``: the snapshot's LanceDB vector table, staged as ``staging/<key>/vectors.lance``.

Written under ``vectors.partial`` and renamed on success, so its existence means "done" (a
build that failed later resumes after it).

Where lancedb is loaded: importing it costs ~1.6 s of Python bytecode (its REST-namespace client's
pydantic models; about half of that is left out by :mod:`arborag.storage.lancedb_import`, which is
how the build and the update import it), and on a thread of the run it takes the GIL from the stages beside it (a cold
+1% update's links stage: 0.31 s beside the helper, 1.63 s beside the import on a thread;
benchmarks/results/update_start.md).
An incremental update therefore has a helper process import lancedb at low priority — on the
core time the run and its embedding worker leave idle (:func:`arborag.embed.worker.preimport`) —
and this stage hands the write to that process (the same function, the same rows); when there
is no such process, or it fails, the table is written here.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from arborag.errors import SchemaError
from arborag.storage.tables import read_table
from arborag.tasks.embedding.vector_files import read_vectors_file
from arborag.tasks.stage_context import StageContext, StageSummary

__all__ = ["OUTPUTS", "VectorsSummary", "run_vectors"]

OUTPUTS = ("vectors.lance",)

log = logging.getLogger(__name__)


def _write(directory: Path, nodes: pa.Table, vectors: np.ndarray, ann_min_rows: int | None = None) -> dict[str, Any]:
    """:func:`~arborag.storage.vectors.write_vectors` in the run's helper process when it was
    asked to load lancedb (module docs), else in this process; ``writer`` says which. From
    ``ann_min_rows`` rows on (``query.ann_min_rows``) the table gets its ANN index."""
    from functools import partial

    from arborag.embed import worker as embed_worker
    from arborag.storage.vectors import LANCEDB_IMPORT
    from arborag.storage.vectors import write_vectors as write_all

    write_vectors = partial(write_all, ann_min_rows=ann_min_rows)

    worker = embed_worker.holding(LANCEDB_IMPORT)  # what flows/update.py's helper was asked to import
    if worker is not None:
        try:
            return {**worker.call(write_vectors, directory, nodes, vectors), "writer": "helper process"}
        except Exception as exc:  # noqa: BLE001 - the helper is an accelerator: write it here instead
            log.warning("the helper process could not write the vector table (%r); writing it in this process", exc)
            shutil.rmtree(directory, ignore_errors=True)
    return {**write_vectors(directory, nodes, vectors), "writer": "this process"}


@dataclass(frozen=True)
class VectorsSummary(StageSummary):
    """The staged vector table (``runs.counts`` key ``vectors``): its rows and dimension, whether it
    has an ANN index, and which process wrote it."""

    rows: int
    dim: int
    ann_index: bool
    writer: str  # "helper process" or "this process"


def run_vectors(ctx: StageContext, key: str) -> VectorsSummary:
    """Write the staged nodes and their vectors of build ``key`` as a LanceDB table."""
    stage_dir = ctx.staging_dir(key)
    nodes = read_table("nodes", stage_dir / "nodes.parquet", missing_ok=False)
    ids, vectors = read_vectors_file(stage_dir / "node_vectors.parquet")
    if not ids.equals(nodes.column("node_id")):
        raise SchemaError("node_vectors", "staged vectors do not align with staged nodes; delete the staging folder and rebuild")
    out, tmp = stage_dir / OUTPUTS[0], stage_dir / "vectors.partial"
    for d in (out, tmp):
        if d.exists():
            shutil.rmtree(d)
    stats = _write(tmp, nodes, vectors, ctx.config.query.ann_min_rows)
    tmp.rename(out)
    return VectorsSummary(**stats)
