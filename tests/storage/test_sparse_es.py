"""arborag.storage.sparse with Elasticsearch: requests, the client side, and a real server.

* ``TestElasticsearchRequests``: request bodies and names, config and connection errors (no server).
* ``TestElasticsearchClientSide`` runs the real elasticsearch-py client against a tiny local
  HTTP stand-in that records requests (tests/fake_es_server.py): request bodies, bulk error
  reporting, 429 retries, the 8.x compatibility switch, alias switching and secret hygiene —
  everything that does not need Elasticsearch's own behaviour.
* ``TestElasticsearchServer`` needs the real server at ``ARBORAG_ES_URL`` and skips, saying why,
  when it is not set or not reachable.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fake_es_server import FakeES
from helpers.sparse import DOCS, FUZZ_TOKENS, ids, needs_es, nodes_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborag.config import SparseConfig
from arborag.errors import BackendUnavailable, ConfigError, NotBuiltError, QueryError
from arborag.storage.lucene import normalize_query
from arborag.storage.sparse import (
    ANALYZER_VERSION,
    SparseBulkError,
    SparseHit,
    SparseIndex,
    SparseIndexError,
    analyze,
    build_sparse_index,
    es_alias_name,
    es_index_body,
    es_index_name,
    es_search_body,
    open_sparse_index,
    publish_sparse_index,
)
from arborag.storage.sparse import es_backend, es_connection
from arborag.storage.sparse.es_connection import EsConnection


# ================================================================================================
# Elasticsearch: requests, without a server
# ================================================================================================
class TestElasticsearchRequests:
    def test_search_body_sends_the_normalised_string(self) -> None:
        body = es_search_body("apple AND NOT pie", k=5, levels=[0, 1], doc_ids=["recipes"])
        assert body is not None
        qs = body["query"]["bool"]["must"][0]["query_string"]
        assert qs["query"] == "+apple -pie" == normalize_query("apple AND NOT pie")
        assert qs["default_field"] == "text" and qs["default_operator"] == "or"
        assert qs["allow_leading_wildcard"] is False and qs["lenient"] is False
        assert body["query"]["bool"]["filter"] == [{"terms": {"level": [0, 1]}}, {"terms": {"doc_ids": ["recipes"]}}]
        assert body["size"] == 5 and body["_source"] == ["node_id", "level"]

    @pytest.mark.parametrize(
        ("query", "lucene", "sent"),
        [
            ("NOT apple", True, "-apple"),  # ES's fixNegativeQueryIfNeeded = embedded's all-but
            ("a OR b AND c", True, "a +b +c"),
            ('"apple pie"~2^3 level:1', True, '"apple pie"~2^3 level:1'),
            ("node_id:<x>", True, 'node_id:"<x>"'),
            ("apple AND (pie", False, r"apple \AND \(pie"),
            ("who wrote Hamlet?", False, r"who wrote Hamlet\?"),
            ("x>5 <tag>", False, "x5 tag"),
        ],
    )
    def test_normalised_strings(self, query: str, lucene: bool, sent: str) -> None:
        body = es_search_body(query, lucene=lucene)
        assert body is not None and body["query"]["bool"]["must"][0]["query_string"]["query"] == sent

    def test_nothing_to_send(self) -> None:
        assert es_search_body("") is None
        assert es_search_body("apple", k=0) is None
        assert es_search_body("apple", levels=[]) is None
        with pytest.raises(QueryError):
            es_search_body("(apple")

    def test_mapping(self) -> None:
        body = es_index_body("snap-1")
        settings_, mappings = body["settings"], body["mappings"]
        assert settings_["number_of_shards"] == 1  # exact BM25 statistics
        analyzer = settings_["analysis"]["analyzer"]["arborag_text"]
        assert analyzer["tokenizer"] == "standard"
        assert analyzer["filter"] == ["cjk_width", "lowercase", "cjk_bigram", "arborag_porter2"]
        assert settings_["analysis"]["filter"]["arborag_porter2"] == {"type": "stemmer", "language": "porter2"}
        props = mappings["properties"]
        assert mappings["dynamic"] == "strict"
        assert props["text"]["analyzer"] == "arborag_text" and props["text"]["similarity"] == "BM25"
        assert props["text"]["fields"]["en"]["analyzer"] == "english"
        assert props["text"]["fields"]["cjk"]["analyzer"] == "cjk"
        assert props["level"]["type"] == "integer"
        assert props["node_id"] == {"type": "keyword", "similarity": "boolean"}
        assert props["doc_ids"] == {"type": "keyword", "similarity": "boolean"}
        assert mappings["_meta"]["arborag"] == {"snapshot_id": "snap-1", "analyzer": ANALYZER_VERSION, "complete": False}

    def test_names(self) -> None:
        cfg = SparseConfig(backend="elasticsearch")
        assert es_index_name(cfg, "20261122-abc123") == "arborag-20261122-abc123"
        assert es_alias_name(cfg, "hotpot") == "arborag-corpus-hotpot"
        odd = es_alias_name(cfg, "/data/My Corpus")
        assert odd.startswith("arborag-corpus-data-my-corpus-") and odd == odd.lower()
        assert es_alias_name(cfg, "/data/My Corpus") != es_alias_name(cfg, "/data/my-corpus")

    def test_no_url_is_a_config_error(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        monkeypatch.delenv("ARBORAG_ES_URL", raising=False)
        with pytest.raises(ConfigError, match="ARBORAG_ES_URL"):
            open_sparse_index(tmp_path, SparseConfig(backend="elasticsearch"), corpus_name="c")

    def test_open_without_marker_or_alias_name(self, tmp_path: Path) -> None:
        with pytest.raises(NotBuiltError):
            open_sparse_index(tmp_path, SparseConfig(backend="elasticsearch", es_url="http://127.0.0.1:9"))

    def test_unreachable_names_the_url_and_never_the_secret(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import socket

        with socket.socket() as s:  # a port nobody listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        monkeypatch.setattr(es_connection, "ES_MAX_RETRIES", 0)
        cfg = SparseConfig(
            backend="elasticsearch",
            es_url=f"http://elastic:hunter2-url@127.0.0.1:{port}",
            es_username="elastic",
            es_password="hunter2-field",
        )
        with pytest.raises(BackendUnavailable) as info:
            open_sparse_index(Path("."), cfg, corpus_name="c")
        err = info.value
        message = str(err)
        assert err.backend == "elasticsearch"
        assert f"127.0.0.1:{port}" in message and "***@" in message
        assert "hunter2" not in message and "hunter2" not in repr(err.args)
        assert "running" in err.hint and "ARBORAG_ES_URL" in err.hint


@pytest.fixture
def fake_es(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeES]:
    monkeypatch.setattr(es_backend, "ES_BACKOFF_S", 0.01)
    with FakeES() as fake:
        yield fake


def _fake_cfg(fake: FakeES, **extra: Any) -> SparseConfig:
    return SparseConfig(backend="elasticsearch", es_url=fake.url, **extra)


class TestElasticsearchClientSide:
    def test_build_publish_open_search(self, fake_es: FakeES, tmp_path: Path) -> None:
        cfg = _fake_cfg(fake_es, es_api_key="key-never-shown")
        stats = build_sparse_index(nodes_table(), tmp_path / "sparse", cfg, snapshot_id="snap-1")
        assert stats == {**stats, "backend": "elasticsearch", "index": "arborag-snap-1", "count": len(DOCS), "reused": False}
        created = fake_es.indices["arborag-snap-1"]
        assert created["body"] == es_index_body("snap-1")
        assert set(created["docs"]) == {n for n, *_ in DOCS}
        assert created["docs"]["cherry-tree"] == {"node_id": "cherry-tree", "level": 1, "doc_ids": ["botany", "recipes"],
                                                  "text": DOCS[5][3]}
        assert created["meta"]["arborag"]["complete"] is True and created["meta"]["arborag"]["count"] == len(DOCS)
        assert created["aliases"] == set(), "a build does not publish"
        assert json.loads((tmp_path / "sparse" / "elasticsearch.json").read_text())["index"] == "arborag-snap-1"
        auth = {r["headers"].get("authorization") for r in fake_es.requests}
        assert auth == {"ApiKey key-never-shown"}

        publish_sparse_index(tmp_path / "sparse", cfg, snapshot_id="snap-1", corpus_name="hotpot")
        assert created["aliases"] == {"arborag-corpus-hotpot"}

        fake_es.search_hits = [{"_id": "apple-pie", "_score": 2.5, "_source": {"node_id": "apple-pie", "level": 0}},
                               {"_id": "fruit-summary", "_score": 1.25, "_source": {"node_id": "fruit-summary", "level": 2}}]
        index = open_sparse_index(tmp_path / "sparse", cfg, corpus_name="hotpot")
        hits = index.search("apple AND NOT banana", k=2, levels=[0, 2])
        assert hits == [SparseHit("apple-pie", 2.5, 0), SparseHit("fruit-summary", 1.25, 2)]
        search = [r for r in fake_es.requests if r["path"].startswith("/arborag-corpus-hotpot/_search")][-1]
        assert json.loads(search["body"]) == es_search_body("apple AND NOT banana", k=2, levels=[0, 2])
        # pinned to the snapshot when no corpus name is given
        assert open_sparse_index(tmp_path / "sparse", cfg).target == "arborag-snap-1"
        index.close()

    def test_alias_switch_is_one_atomic_request(self, fake_es: FakeES, tmp_path: Path) -> None:
        cfg = _fake_cfg(fake_es)
        for snap in ("snap-a", "snap-b"):
            build_sparse_index(nodes_table(DOCS[:3]), tmp_path / snap, cfg, snapshot_id=snap)
        publish_sparse_index(tmp_path / "snap-a", cfg, snapshot_id="snap-a", corpus_name="c")
        before = len(fake_es.requests)
        publish_sparse_index(tmp_path / "snap-b", cfg, snapshot_id="snap-b", corpus_name="c")
        alias_requests = [r for r in fake_es.requests[before:] if r["path"].startswith("/_aliases")]
        assert len(alias_requests) == 1
        assert json.loads(alias_requests[0]["body"])["actions"] == [
            {"remove": {"index": "arborag-snap-a", "alias": "arborag-corpus-c"}},
            {"add": {"index": "arborag-snap-b", "alias": "arborag-corpus-c"}},
        ]
        assert fake_es.indices["arborag-snap-a"]["aliases"] == set()
        assert fake_es.indices["arborag-snap-b"]["aliases"] == {"arborag-corpus-c"}

    def test_publish_refuses_incomplete_or_missing(self, fake_es: FakeES, tmp_path: Path) -> None:
        cfg = _fake_cfg(fake_es)
        with pytest.raises(SparseIndexError, match="does not exist"):
            publish_sparse_index(tmp_path, cfg, snapshot_id="nope", corpus_name="c")
        fake_es.reject_ids = {"banana-bread": (400, "mapper_parsing_exception")}
        with pytest.raises(SparseBulkError):
            build_sparse_index(nodes_table(), tmp_path / "s", cfg, snapshot_id="half")
        with pytest.raises(SparseIndexError, match="not completely built"):
            publish_sparse_index(tmp_path / "s", cfg, snapshot_id="half", corpus_name="c")
        assert fake_es.indices["arborag-half"]["aliases"] == set()

    def test_partial_bulk_failures_are_reported_per_node(self, fake_es: FakeES, tmp_path: Path) -> None:
        fake_es.reject_ids = {"tokyo": (400, "mapper_parsing_exception"), "runners": (400, "illegal_argument_exception")}
        with pytest.raises(SparseBulkError) as info:
            build_sparse_index(nodes_table(), tmp_path / "s", _fake_cfg(fake_es), snapshot_id="snap")
        err = info.value
        assert sorted(err.failures) == [("runners", 400, "illegal_argument_exception for runners"),
                                        ("tokyo", 400, "mapper_parsing_exception for tokyo")]
        assert err.total == len(DOCS) and err.index == "arborag-snap"
        assert "2 of 11" in str(err) and "'tokyo'" in str(err)
        assert not (tmp_path / "s" / "elasticsearch.json").exists()

    def test_429_is_retried_then_succeeds(self, fake_es: FakeES, tmp_path: Path) -> None:
        fake_es.throttle_once = {"tokyo", "mixed"}
        stats = build_sparse_index(nodes_table(), tmp_path / "s", _fake_cfg(fake_es), snapshot_id="snap")
        assert stats["count"] == len(DOCS)
        bulks = [r for r in fake_es.requests if r["path"].startswith("/_bulk")]
        assert len(bulks) == 2  # the second carries only the two throttled nodes
        assert bulks[1]["body"].count('"_id"') == 2

    def test_persistent_429_fails_after_bounded_retries(self, fake_es: FakeES, tmp_path: Path) -> None:
        fake_es.reject_ids = {"tokyo": (429, "es_rejected_execution_exception")}
        with pytest.raises(SparseBulkError) as info:
            build_sparse_index(nodes_table(), tmp_path / "s", _fake_cfg(fake_es), snapshot_id="snap")
        assert info.value.failures == [("tokyo", 429, "es_rejected_execution_exception for tokyo")]
        bulks = [r for r in fake_es.requests if r["path"].startswith("/_bulk")]
        assert len(bulks) == 1 + es_connection.ES_MAX_RETRIES

    def test_identical_complete_snapshot_is_reused(self, fake_es: FakeES, tmp_path: Path) -> None:
        cfg = _fake_cfg(fake_es)
        build_sparse_index(nodes_table(), tmp_path / "a", cfg, snapshot_id="same")
        stats = build_sparse_index(nodes_table(), tmp_path / "b", cfg, snapshot_id="same")
        assert stats["reused"] is True
        assert len([r for r in fake_es.requests if r["path"].startswith("/_bulk")]) == 1

    def test_incomplete_leftover_is_rebuilt(self, fake_es: FakeES, tmp_path: Path) -> None:
        cfg = _fake_cfg(fake_es)
        fake_es.reject_ids = {"tokyo": (400, "mapper_parsing_exception")}
        with pytest.raises(SparseBulkError):
            build_sparse_index(nodes_table(), tmp_path / "s", cfg, snapshot_id="snap")
        fake_es.reject_ids = {}
        stats = build_sparse_index(nodes_table(), tmp_path / "s", cfg, snapshot_id="snap")
        assert stats["reused"] is False and len(fake_es.indices["arborag-snap"]["docs"]) == len(DOCS)
        assert any(r["method"] == "DELETE" and r["path"].startswith("/arborag-snap") for r in fake_es.requests)

    def test_8x_server_switches_the_9x_client_to_compatible_with_8(self, fake_es: FakeES, tmp_path: Path) -> None:
        fake_es.only_compat8 = True
        cfg = _fake_cfg(fake_es)
        build_sparse_index(nodes_table(), tmp_path / "s", cfg, snapshot_id="snap")
        publish_sparse_index(tmp_path / "s", cfg, snapshot_id="snap", corpus_name="c")
        fake_es.search_hits = [{"_id": "tokyo", "_score": 1.0, "_source": {"node_id": "tokyo", "level": 0}}]
        assert ids(open_sparse_index(tmp_path / "s", cfg, corpus_name="c").search("東京")) == ["tokyo"]
        ok = [r for r in fake_es.requests if "compatible-with=8" in r["headers"].get("accept", "")]
        assert ok and all("compatible-with=9" not in r["headers"].get("content-type", "") for r in ok)

    def test_query_rejected_by_server_is_a_query_error(self, fake_es: FakeES, tmp_path: Path) -> None:
        cfg = _fake_cfg(fake_es)
        build_sparse_index(nodes_table(DOCS[:1]), tmp_path / "s", cfg, snapshot_id="snap")
        index = open_sparse_index(tmp_path / "s", cfg)
        fake_es.indices.pop("arborag-snap")
        with pytest.raises(NotBuiltError):
            index.search("apple")

    def test_auth_failure_is_backend_unavailable_without_secrets(self, tmp_path: Path) -> None:
        class Deny(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                body = b'{"error":{"type":"security_exception","reason":"unable to authenticate"},"status":401}'
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_HEAD = do_GET

        server = ThreadingHTTPServer(("127.0.0.1", 0), Deny)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            cfg = SparseConfig(backend="elasticsearch", es_url=f"http://127.0.0.1:{server.server_address[1]}",
                               es_username="elastic", es_password="s3cret-pw")
            with pytest.raises(BackendUnavailable) as info:
                open_sparse_index(tmp_path, cfg, corpus_name="c")
            assert "401" in str(info.value) and "s3cret-pw" not in str(info.value)
        finally:
            server.shutdown()
            server.server_close()


# ================================================================================================
# Elasticsearch: behaviour only a real server has (skips with the reason when none answers)
# ================================================================================================
PARITY_QUERIES = [
    "apple", "apple -pie", "+cherry pie", "apple AND NOT pie", "banana^10 OR cherry", '"apple tree"',
    '"apple sweet"~2', "level:1", "apple AND level:0", "doc_ids:zh", "NOT apple", "北京大学", '"交通大学"',
    "大学 -上海", "run", "(apple OR banana) AND sweet", "cherry AND (NOT tree)", "node_id:tokyo",
]


@pytest.mark.elasticsearch
@needs_es
class TestElasticsearchServer:
    def test_same_answers_as_embedded(self, elastic: SparseIndex, embedded: SparseIndex) -> None:
        for query in PARITY_QUERIES:
            es_hits, em_hits = elastic.search(query, k=20), embedded.search(query, k=20)
            assert set(ids(es_hits)) == set(ids(em_hits)), query
            # same ranking where scores differ (ES drops BM25's constant (k1+1) factor: x 1/2.2)
            distinct = [h.node_id for h in em_hits if sum(abs(h.score - o.score) < 1e-4 for o in em_hits) == 1]
            assert [n for n in ids(es_hits) if n in distinct] == distinct, query

    def test_analyzers(self, elastic: SparseIndex, es_cfg: SparseConfig) -> None:
        conn = EsConnection(es_cfg)
        index = es_index_name(es_cfg, "snap-1")
        try:
            for sample in ["The runners' Running RAN", "北京大学是中国著名的大学", "Python编程", "ＡＢＣ ｶﾞｷﾞ", "東京へ行く",
                           "U.S.A. don't 3.14 state-of-the-art"]:
                tokens = conn.call(lambda c: c.indices.analyze(index=index, field="text", text=sample))
                assert [t["token"] for t in tokens["tokens"]] == analyze(sample), sample
            cjk = conn.call(lambda c: c.indices.analyze(index=index, field="text.cjk", text="北京大学"))
            assert [t["token"] for t in cjk["tokens"]] == ["北京", "京大", "大学"]
            en = conn.call(lambda c: c.indices.analyze(index=index, field="text.en", text="the running dogs"))
            assert [t["token"] for t in en["tokens"]] == ["run", "dog"]
        finally:
            conn.close()

    def test_alias_switch_readers_never_see_a_partial_index(self, es_cfg: SparseConfig, tmp_path: Path) -> None:
        build_sparse_index(nodes_table(DOCS[:3]), tmp_path / "a", es_cfg, snapshot_id="alias-a")
        publish_sparse_index(tmp_path / "a", es_cfg, snapshot_id="alias-a", corpus_name="switch")
        reader = open_sparse_index(tmp_path / "a", es_cfg, corpus_name="switch")
        assert ids(reader.search("cherry")) == []
        build_sparse_index(nodes_table(), tmp_path / "b", es_cfg, snapshot_id="alias-b")
        assert ids(reader.search("cherry")) == [], "a built but unpublished index is invisible"
        publish_sparse_index(tmp_path / "b", es_cfg, snapshot_id="alias-b", corpus_name="switch")
        assert "cherry-tree" in ids(reader.search("cherry"))
        conn = EsConnection(es_cfg)
        try:
            holders = dict(conn.call(lambda c: c.indices.get_alias(name=es_alias_name(es_cfg, "switch"))))
            assert list(holders) == [es_index_name(es_cfg, "alias-b")]
        finally:
            conn.close()
        reader.close()

    def test_bulk_failure_per_document(self, es_cfg: SparseConfig, tmp_path: Path) -> None:
        rows = DOCS[:2] + [("x" * 600, 0, ["d"], "an _id longer than 512 bytes is rejected")]
        with pytest.raises(SparseBulkError) as info:
            build_sparse_index(nodes_table(rows), tmp_path / "s", es_cfg, snapshot_id="bulk-bad")
        assert [f[0] for f in info.value.failures] == ["x" * 600]
        with pytest.raises(SparseIndexError):
            publish_sparse_index(tmp_path / "s", es_cfg, snapshot_id="bulk-bad", corpus_name="bad")

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(query=st.lists(st.sampled_from(FUZZ_TOKENS), max_size=20).map(" ".join))
    def test_every_normalised_query_is_accepted(self, elastic: SparseIndex, query: str) -> None:
        try:
            elastic.search(query)
        except QueryError as err:
            assert err.position is not None, f"Elasticsearch rejected a normalised query: {err}"
