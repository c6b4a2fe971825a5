"""Dask through Prefect: a build on a 2-worker LocalCluster (127.0.0.1) publishes the same tree
as the in-process runner — same snapshot id, same nodes and edges (but the run id each node
records), bit-identical vectors — while its embedding groups, summarization chunks and local
clusterings ran as Prefect tasks on the workers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arborag.config import ArboragConfig
from arborag.errors import ConfigError
from arborag.flows.build import run_build
from arborag.storage.arrays import arrow_to_vectors
from arborag.storage.corpus import Corpus

pytestmark = pytest.mark.slow

pytest.importorskip("prefect_dask")


def _snapshot(corpus: Path) -> tuple[str, pa.Table, pa.Table, np.ndarray]:
    snap = Corpus(corpus).published_dir()
    nodes = pq.read_table(snap / "nodes.parquet")
    nodes = nodes.drop_columns(["created_by_run"])
    edges = pq.read_table(snap / "edges.parquet")
    arrow = pa.ipc.open_file(pa.memory_map(str(snap / "vectors.lance" / "nodes.arrow"), "r")).read_all()
    return snap.name, nodes, edges, arrow_to_vectors(arrow.column("vector"))


def test_scale_dask_runner_builds_the_same_tree(tmp_path: Path, examples_dir: Path, prefect_harness: None) -> None:
    cfg = ArboragConfig()
    local = run_build([examples_dir / "corpus" / "cinderella.txt"], tmp_path / "local", cfg, use_prefect=False, progress=False)
    dask = run_build([examples_dir / "corpus" / "cinderella.txt"], tmp_path / "dask", cfg, runner="dask", workers=2, progress=False)
    assert local["status"] == dask["status"] == "ok"
    a, b = _snapshot(tmp_path / "local"), _snapshot(tmp_path / "dask")
    assert a[0] == b[0]  # the snapshot id is the build key
    assert a[1].num_rows > 0 and max(a[1].column("level").to_pylist()) >= 1
    assert a[1].equals(b[1]), "nodes differ between the local and the Dask runner"
    assert a[2].equals(b[2]), "edges differ between the local and the Dask runner"
    assert a[3].tobytes() == b[3].tobytes(), "vectors differ between the local and the Dask runner"
    assert dask["calls"] == local["calls"]


def test_scale_dask_runner_needs_prefect(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no-prefect"):
        run_build([], tmp_path / "c", ArboragConfig(), use_prefect=False, runner="dask")
    with pytest.raises(ConfigError, match="unknown runner"):
        run_build([], tmp_path / "c", ArboragConfig(), runner="spark")
