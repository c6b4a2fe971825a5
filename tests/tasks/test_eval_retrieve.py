"""Retrieval for an evaluation: every question × system × budget (arborag.tasks.evaluation.retrieve)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from helpers.eval import FakeBuilds, FakeIndex, FakeVectorIndex, write_hotpot_data

from arborag.config import ArboragConfig
from arborag.storage.schemas import HITS
from arborag.tasks.evaluation.datasets import prepare_dataset
from arborag.tasks.evaluation.retrieve import count_errors, run_queries, run_retrieve


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    return write_hotpot_data(tmp_path)


def test_run_queries_records_errors_and_latency(data_dir: Path, tmp_path: Path) -> None:
    prepared = prepare_dataset("hotpotqa", tmp_path / "ds", data_dir=data_dir)
    FakeBuilds()([str(prepared.corpus_dir)], str(tmp_path / "c"), ArboragConfig())
    index = FakeIndex(str(tmp_path / "c"), broken_modes=("hybrid",))
    hits = run_queries(index, prepared.queries(), "sentence", ["flat", "hybrid"], [10, 40], k=5)
    assert hits.schema == HITS
    assert hits.num_rows == 3 * 2 * 2 == index.searches
    rows = hits.to_pylist()
    assert all(r["error"] and r["node_ids"] == [] for r in rows if r["system"] == "hybrid")
    flat = [r for r in rows if r["system"] == "flat"]
    assert all(r["error"] is None and r["latency_ms"] >= 0 for r in flat)
    assert all(set(r["levels"]) <= {0} and sum(r["n_tokens"]) <= r["budget"] for r in flat)


def test_run_queries_embeds_each_question_once(data_dir: Path, tmp_path: Path) -> None:
    prepared = prepare_dataset("hotpotqa", tmp_path / "ds", data_dir=data_dir)
    FakeBuilds()([str(prepared.corpus_dir)], str(tmp_path / "c"), ArboragConfig())
    index = FakeVectorIndex(str(tmp_path / "c"))
    embed_ms: dict[str, float] = {}
    hits = run_queries(index, prepared.queries(), "sentence", ["flat", "bm25", "collapsed"], [10, 40], embed_ms=embed_ms)
    # warm-up + one timed call per question + one batch for the vectors
    assert index.embedded == [1, 1, 1, 1, 3]
    assert set(embed_ms) == {"q1", "q2", "q3"}
    assert index.vectors_seen == 3 * 2 * 2  # dense systems only; bm25 gets text alone
    assert hits.num_rows == 18
    # a second strategy reuses the timings and only batch-embeds
    index2 = FakeVectorIndex(str(tmp_path / "c"))
    run_queries(index2, prepared.queries(), "dds", ["flat"], [40], embed_ms=embed_ms)
    assert index2.embedded == [3]



def test_count_errors_ignores_null_and_empty() -> None:
    t = pa.table({"error": pa.array([None, "", "QueryError: x", "OSError: y"], pa.string())})
    assert count_errors(t) == 2
    assert count_errors(t.slice(0, 0)) == 0


def test_run_retrieve_writes_hits(data_dir: Path, tmp_path: Path) -> None:
    prepared = prepare_dataset("hotpotqa", tmp_path / "ds", data_dir=data_dir)
    FakeBuilds()([str(prepared.corpus_dir)], str(tmp_path / "c"), ArboragConfig())
    opened: list[str] = []

    def opener(corpus_dir: str, *, config: ArboragConfig | None = None) -> FakeIndex:
        opened.append(corpus_dir)
        return FakeIndex(corpus_dir, config=config, broken_modes=("sparse",))

    record = {"strategy": "sentence", "corpus_dir": str(tmp_path / "c")}
    info = run_retrieve(prepared, record, ["flat", "bm25"], [40], ArboragConfig(), tmp_path / "hits" / "sentence.parquet",
                        opener=opener, progress=False)
    assert opened == [str(tmp_path / "c")]
    assert info["rows"] == 3 * 2 and info["errors"] == 3 and Path(info["path"]).exists()
    assert pa.parquet.read_table(info["path"]).schema == HITS
