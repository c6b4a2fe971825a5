"""Elasticsearch at scale: shards, replicas, refresh intervals and bulk sizes come from
``sparse.es_*`` (against the fake ES server of tests/fake_es_server.py — a fake, named so; the
real-server tests in tests/storage/test_sparse_es.py skip without ARBORAG_ES_URL)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from arborag.config import SparseConfig
from arborag.storage.sparse import build_sparse_index, publish_sparse_index
from arborag.storage.sparse import es_backend
from tests.fake_es_server import FakeES
from tests.helpers.sparse import DOCS, nodes_table


@pytest.fixture
def fake_es(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(es_backend, "ES_BACKOFF_S", 0.01)
    with FakeES() as fake:
        yield fake


def test_scale_es_settings_and_bulk_sizes_are_configurable(fake_es: FakeES, tmp_path: Path) -> None:
    cfg = SparseConfig(backend="elasticsearch", es_url=fake_es.url, es_shards=3, es_replicas=1, es_bulk_docs=2,
                       es_bulk_refresh_interval="30s", es_refresh_interval="-1")
    build_sparse_index(nodes_table(), tmp_path / "sparse", cfg, snapshot_id="snap-big")
    settings = fake_es.indices["arborag-snap-big"]["body"]["settings"]
    assert settings["number_of_shards"] == 3 and settings["number_of_replicas"] == 0  # no replicas while loading
    assert settings["refresh_interval"] == "30s"
    bulks = [r for r in fake_es.requests if r["path"].split("?")[0].endswith("/_bulk")]
    assert len(bulks) == math.ceil(len(DOCS) / 2)  # es_bulk_docs per request
    after = [json.loads(r["body"]) for r in fake_es.requests if r["method"] == "PUT" and "/_settings" in r["path"]]
    assert after == [{"index": {"refresh_interval": "-1", "number_of_replicas": 1}}]  # replicas raised after the load
    # the alias swap (zero-downtime publish) is unchanged
    publish_sparse_index(tmp_path / "sparse", cfg, snapshot_id="snap-big", corpus_name="big")
    assert fake_es.indices["arborag-snap-big"]["aliases"] == {"arborag-corpus-big"}


def test_scale_es_defaults_keep_one_shard_and_server_refresh() -> None:
    cfg = SparseConfig()
    assert (cfg.es_shards, cfg.es_replicas, cfg.es_bulk_docs, cfg.es_bulk_refresh_interval, cfg.es_refresh_interval) == (1, 0, 500, "-1", None)
