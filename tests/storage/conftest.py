"""Fixtures of the storage tests: one embedded and (when reachable) one Elasticsearch sparse index."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from helpers.sparse import DOCS, ES_SKIP, es_cleanup, needs_es, nodes_table

from arborag.config import SparseConfig
from arborag.storage.sparse import SparseIndex, build_sparse_index, open_sparse_index, publish_sparse_index


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparseIndex]:
    directory = tmp_path_factory.mktemp("snap") / "sparse"
    cfg = SparseConfig()
    stats = build_sparse_index(nodes_table(), directory, cfg, snapshot_id="snap-1")
    assert stats["backend"] == "embedded" and stats["count"] == len(DOCS)
    index = open_sparse_index(directory, cfg)
    yield index
    index.close()


@pytest.fixture(scope="module")
def es_cfg() -> SparseConfig:
    return SparseConfig(backend="elasticsearch", es_index_prefix=f"arborag-test-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def elastic(tmp_path_factory: pytest.TempPathFactory, es_cfg: SparseConfig) -> Iterator[SparseIndex]:
    if ES_SKIP is not None:
        pytest.skip(ES_SKIP)
    directory = tmp_path_factory.mktemp("snap-es") / "sparse"
    try:
        build_sparse_index(nodes_table(), directory, es_cfg, snapshot_id="snap-1")
        publish_sparse_index(directory, es_cfg, snapshot_id="snap-1", corpus_name="contract")
        index = open_sparse_index(directory, es_cfg, corpus_name="contract")
        yield index
        index.close()
    finally:
        es_cleanup(es_cfg)


@pytest.fixture(params=["embedded", pytest.param("elasticsearch", marks=[pytest.mark.elasticsearch, needs_es])])
def backend(request: pytest.FixtureRequest) -> SparseIndex:
    return request.getfixturevalue("embedded" if request.param == "embedded" else "elastic")
