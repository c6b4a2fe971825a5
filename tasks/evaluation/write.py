"""The files of an evaluation folder: HITS and RESULTS Parquet (conformed to their schemas in
``storage.schemas``), JSON records (run.json, eval_build.json), summary.md + plots.

Every write is atomic (temporary file + rename, through ``storage.tables``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from arborag.storage.schemas import HITS, RESULTS
from arborag.storage.tables import atomic_write_bytes, atomic_write_parquet
from arborag.tasks.evaluation.report import write_report

__all__ = ["write_hits", "write_json", "write_report", "write_results", "write_run"]


def write_hits(hits: pa.Table, path: str | Path) -> Path:
    """A HITS table to ``path`` (Parquet, zstd)."""
    return atomic_write_parquet(hits.select(HITS.names).cast(HITS), path)


def write_results(results: pa.Table, out_dir: str | Path) -> Path:
    """The RESULTS table to ``out_dir/results.parquet``."""
    return atomic_write_parquet(results.select(RESULTS.names).cast(RESULTS), Path(out_dir) / "results.parquet")


def write_json(path: str | Path, obj: Any) -> Path:
    """``obj`` as indented, key-sorted JSON (``str`` for what JSON lacks)."""
    path = Path(path)
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True, default=str).encode("utf-8"))
    return path


def write_run(out_dir: str | Path, meta: dict[str, Any]) -> Path:
    """The run facts to ``out_dir/run.json``."""
    return write_json(Path(out_dir) / "run.json", meta)
