"""The vectors stage writes the ANN index from ``query.ann_min_rows`` rows on: the configured
threshold reaches :func:`arborag.storage.vectors.write_vectors`, and the stage's cache key holds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from arborag.config import ArboragConfig
from arborag.flows.pipelines import VECTORS
from arborag.flows.stage import declared_config


def test_the_configured_threshold_reaches_the_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import arborag.storage.vectors as storage_vectors
    from arborag.tasks.stages import vectors as stage

    seen: list[Any] = []

    def spy_write(directory: Path, nodes: pa.Table, vecs: np.ndarray, *, ann_min_rows: int | None = None) -> dict[str, Any]:
        seen.append(ann_min_rows)
        return {"rows": nodes.num_rows}

    monkeypatch.setattr(storage_vectors, "write_vectors", spy_write)
    out = stage._write(tmp_path / "v", pa.table({"node_id": ["a"]}), np.zeros((1, 4), np.float32), 1234)
    assert seen == [1234] and out["writer"] == "this process"


def test_the_threshold_is_part_of_the_vectors_key() -> None:
    low = ArboragConfig.model_validate({"query": {"ann_min_rows": 10}})
    assert declared_config(ArboragConfig(), VECTORS.config) != declared_config(low, VECTORS.config)
