"""open_index uses what the snapshot was built with (info.json "sparse_backend" and "embed"),
not the current config: an Elasticsearch-built snapshot opens with the default config, and a
snapshot built with another embedder embeds queries with that embedder.
"""

from __future__ import annotations

import pytest
from fake_es_server import FakeES
from helpers.query import FakeQueryEmbedder, publish_snapshot

import arborag.embed.model
from arborag.config import ArboragConfig, EmbedConfig, SparseConfig
from arborag.query import open_index
from arborag.query.index import snapshot_embed_config, snapshot_sparse_config
from arborag.storage.corpus import Corpus


def test_elasticsearch_snapshot_opens_with_the_default_config(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeES() as fake:
        corpus = Corpus(tmp_path / "c").ensure()
        built_with = SparseConfig(backend="elasticsearch", es_url=fake.url)
        publish_snapshot(corpus, "snap-es", sparse=built_with, info={"sparse_backend": "elasticsearch"})
        fake.search_hits = [{"_id": "d", "_score": 2.0, "_source": {"node_id": "d", "level": 0}},
                            {"_id": "s2", "_score": 1.0, "_source": {"node_id": "s2", "level": 1}}]
        monkeypatch.setenv("ARBORAG_ES_URL", fake.url)  # where the cluster is: the environment, not the config
        default = ArboragConfig()
        assert default.sparse.backend == "embedded"

        index = open_index(corpus.root, config=default, embed_query=FakeQueryEmbedder())
        hits = index.search("beta", mode="sparse", budget=None, k=5)

        assert index.sparse_index().backend == "elasticsearch"
        assert [h.node_id for h in hits] == ["d", "s2"] and hits[0].text == "text of d"
        searched = [r for r in fake.requests if r["path"].split("?")[0].endswith("/_search")]
        assert searched and searched[-1]["path"].startswith("/arborag-snap-es/")  # the snapshot's own index


def test_embedded_snapshot_ignores_an_elasticsearch_config(tmp_path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "snap-emb", sparse=SparseConfig(), info={"sparse_backend": "embedded"})
    now = ArboragConfig(sparse=SparseConfig(backend="elasticsearch", es_url="http://127.0.0.1:9"))
    index = open_index(corpus.root, config=now, embed_query=FakeQueryEmbedder())
    assert index.sparse_index().backend == "embedded"
    assert [h.node_id for h in index.search("text", mode="sparse", budget=None, k=3)]


class RecordingEmbedder:
    """Stands in for arborag.embed.model.Embedder: records the config it was built with."""

    built: list[EmbedConfig] = []

    def __init__(self, cfg: EmbedConfig) -> None:
        RecordingEmbedder.built.append(cfg)
        self.cfg = cfg

    def embed(self, texts):
        return FakeQueryEmbedder()(list(texts))


def test_queries_are_embedded_with_the_snapshots_embedder(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    recorded = EmbedConfig(model="/models/other-minilm", dtype="float32", batch_size=7, device="cuda:1").model_dump(mode="json")
    publish_snapshot(corpus, "snap-other", info={"embed": recorded, "sparse_backend": "embedded"})
    monkeypatch.setattr(arborag.embed.model, "Embedder", RecordingEmbedder)
    RecordingEmbedder.built.clear()
    now = ArboragConfig(embed=EmbedConfig(batch_size=64))  # the current config: the packaged model, bf16

    hits = open_index(corpus.root, config=now).search("alpha", mode="collapsed", budget=1000)

    assert hits[0].node_id == "a"
    (cfg,) = RecordingEmbedder.built
    assert (cfg.model, cfg.dtype) == ("/models/other-minilm", "float32")  # what built the vectors
    assert (cfg.batch_size, cfg.device) == (64, "cpu")  # speed-only settings: this machine's


def test_snapshot_config_helpers() -> None:
    cfg = ArboragConfig()
    assert snapshot_embed_config({}, cfg) == cfg.embed  # older snapshots: the current embedder
    assert snapshot_embed_config({"embed": {"model": "m", "dtype": "float32", "retired": 1}}, cfg).model == "m"
    assert snapshot_sparse_config({}, cfg) == cfg.sparse
    es = snapshot_sparse_config({"sparse_backend": "elasticsearch"}, cfg)
    assert es.backend == "elasticsearch" and es.es_index_prefix == cfg.sparse.es_index_prefix
