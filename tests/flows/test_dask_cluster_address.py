"""A build that joins a running Dask scheduler (``runner="dask", address=...``: the route of a
multi-machine run, here a 2-process ``LocalCluster`` on 127.0.0.1) publishes the same tree as the
in-process build of the same 40 HotpotQA paragraphs: same node ids, texts, levels, edges and
bit-identical vectors."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.reliability import write_hotpot_docs

from arborag.config import ArboragConfig
from arborag.flows.build import run_build
from arborag.storage.corpus import Corpus

pytestmark = pytest.mark.slow

pytest.importorskip("prefect_dask")


def _tree(corpus: Path) -> tuple[str, pa.Table, pa.Table, bytes]:
    snap = Corpus(corpus).published_dir()
    nodes = pq.read_table(snap / "nodes.parquet", columns=["node_id", "level", "text", "doc_ids"]).sort_by("node_id")
    edges = pq.read_table(snap / "edges.parquet").sort_by([("parent_id", "ascending"), ("child_id", "ascending")])
    arrow = pa.ipc.open_file(pa.memory_map(str(snap / "vectors.lance" / "nodes.arrow"), "r")).read_all()
    order = arrow.column("node_id").to_pylist()
    vectors = arrow.column("vector").combine_chunks().flatten().to_numpy()
    dim = len(vectors) // max(1, len(order))
    by_id = sorted(range(len(order)), key=order.__getitem__)
    return snap.name, nodes, edges, b"".join(vectors[i * dim:(i + 1) * dim].tobytes() for i in by_id)


def test_a_build_on_a_running_scheduler_gives_the_in_process_tree(tmp_path: Path, shared_data: Path, prefect_harness: None) -> None:
    from distributed import LocalCluster

    docs = write_hotpot_docs(tmp_path / "docs", 40)
    cfg = ArboragConfig()
    local = run_build([str(p) for p in docs], tmp_path / "local", cfg, use_prefect=False, progress=False)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None) as cluster:
        remote = run_build([str(p) for p in docs], tmp_path / "dask", cfg, runner="dask", address=cluster.scheduler_address,
                           progress=False)
        with cluster.get_client() as client:
            ran = sum(client.run(lambda dask_worker: dask_worker.state.executed_count).values())
    assert local["status"] == remote["status"] == "ok"
    a, b = _tree(tmp_path / "local"), _tree(tmp_path / "dask")
    assert a[1].num_rows > 40 and max(a[1].column("level").to_pylist()) >= 1  # leaves and at least one summary level
    assert a[1].column("node_id").equals(b[1].column("node_id")), "node ids differ between in-process and Dask"
    assert a[1].column("text").equals(b[1].column("text")), "texts differ between in-process and Dask"
    assert a[1].equals(b[1])
    assert a[2].num_rows > 0 and a[2].equals(b[2]), "edges differ between in-process and Dask"
    assert a[3] == b[3], "vectors differ between in-process and Dask"
    assert a[0] == b[0]  # the snapshot id is the build key
    assert ran > 0  # the fan-out ran on the cluster's workers
