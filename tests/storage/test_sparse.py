"""arborag.storage.sparse: one contract suite over both backends, plus backend-specific tests.

* The contract suite (``backend`` fixture) runs on the embedded engine always, and on
  Elasticsearch when ``ARBORAG_ES_URL`` answers (``-m elasticsearch`` selects only those);
  otherwise the ES parameters skip and say why.
* ``TestElasticsearchClientSide`` runs the real elasticsearch-py client against a tiny local
  HTTP stand-in that records requests: request bodies, bulk error reporting, 429 retries, the
  8.x compatibility switch, alias switching and secret hygiene — everything that does not need
  Elasticsearch's own behaviour. ``TestElasticsearchServer`` needs the real server.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborag.config import SparseConfig
from arborag.errors import BackendUnavailable, ConfigError, NotBuiltError, QueryError, SchemaError
from arborag.storage import sparse as sparse_mod
from arborag.storage.lucene import normalize_query, plain_query
from arborag.storage.schemas import NODES
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
    prepare_text,
    publish_sparse_index,
    search_or_plain,
)

# ------------------------------------------------------------------------------------------------
# A small corpus designed so every behaviour is visible in the ranking
# ------------------------------------------------------------------------------------------------
DOCS = [
    # node_id, level, doc_ids, text
    ("apple-pie", 0, ["recipes"], "Apple pie is a baked dessert. The apple filling is sweet."),
    ("apple-tree", 0, ["botany"], "The apple tree grows apples in orchards; apple trees need pollination."),
    ("banana-bread", 0, ["recipes"], "Banana bread is a sweet bread made with mashed bananas."),
    ("pie-crust", 0, ["recipes"], "A pie crust holds the filling; apple and cherry are classic pie fillings."),
    ("runners", 0, ["sport"], "Marathon runners were running through the city while a runner rested."),
    ("cherry-tree", 1, ["botany", "recipes"], "Cherry trees blossom in spring; the cherry is a stone fruit."),
    ("fruit-summary", 2, ["botany", "recipes"], "Summary: fruit trees such as apple and cherry, and desserts made from fruit."),
    ("beijing-univ", 0, ["zh"], "北京大学是中国著名的综合性大学，位于北京市海淀区。"),
    ("shanghai-jt", 0, ["zh"], "上海交通大学位于上海，是一所研究型大学。"),
    ("tokyo", 0, ["ja"], "東京大学は日本の国立大学です。"),
    ("mixed", 1, ["zh", "sport"], "Python编程 and running: 跑步 is running in Chinese."),
]


def nodes_table(rows: list[tuple[str, int, list[str], str]] = DOCS) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "node_id": nid,
                "level": level,
                "text": text,
                "n_tokens": len(text.split()),
                "doc_ids": docs,
                "summary_of": None,
                "summarizer": "leaf",
                "summary_status": "leaf",
                "created_by_run": "test",
            }
            for nid, level, docs, text in rows
        ],
        schema=NODES,
    )


def ids(hits: list[SparseHit]) -> list[str]:
    return [h.node_id for h in hits]


# ------------------------------------------------------------------------------------------------
# Elasticsearch availability
# ------------------------------------------------------------------------------------------------
def _es_reason() -> str | None:
    """None when a real Elasticsearch answers at ARBORAG_ES_URL, else why the ES tests skip."""
    url = os.environ.get("ARBORAG_ES_URL")
    if not url:
        return "ARBORAG_ES_URL is not set (start one with deploy/docker-compose.yml; see docs/SPARSE.md)"
    try:
        from arborag.storage.sparse import _EsConnection

        conn = _EsConnection(SparseConfig(backend="elasticsearch"), request_timeout=3.0)
        try:
            conn.call(lambda c: c.options(max_retries=0).info())
        finally:
            conn.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        return f"Elasticsearch at ARBORAG_ES_URL is not reachable: {exc}"
    return None


ES_SKIP = _es_reason()
needs_es = pytest.mark.skipif(ES_SKIP is not None, reason=str(ES_SKIP))


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


def _es_cleanup(cfg: SparseConfig) -> None:
    from arborag.storage.sparse import _EsConnection

    conn = _EsConnection(cfg)
    try:  # by name: 8.x refuses wildcard deletes (action.destructive_requires_name)
        names = list(conn.call(lambda c: c.indices.get(index=f"{cfg.es_index_prefix}-*", allow_no_indices=True)))
        for name in names:
            conn.call(lambda c: c.indices.delete(index=name, ignore_unavailable=True))
    finally:
        conn.close()


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
        _es_cleanup(es_cfg)


@pytest.fixture(params=["embedded", pytest.param("elasticsearch", marks=[pytest.mark.elasticsearch, needs_es])])
def backend(request: pytest.FixtureRequest) -> SparseIndex:
    return request.getfixturevalue("embedded" if request.param == "embedded" else "elastic")


# ================================================================================================
# Contract suite: both backends
# ================================================================================================
class TestContract:
    def test_protocol_and_frozen_hits(self, backend: SparseIndex) -> None:
        assert isinstance(backend, SparseIndex)
        hits = backend.search("apple")
        assert hits and all(isinstance(h, SparseHit) for h in hits)
        with pytest.raises(AttributeError):
            hits[0].score = 0.0  # type: ignore[misc]
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True), "higher score is better, best first"
        assert {h.node_id: h.level for h in hits}["fruit-summary"] == 2

    def test_plain_terms_and_k(self, backend: SparseIndex) -> None:
        hits = backend.search("apple", k=10)
        assert set(ids(hits)) == {"apple-pie", "apple-tree", "pie-crust", "fruit-summary"}
        assert ids(backend.search("apple", k=2)) == ids(hits)[:2]
        assert backend.search("apple", k=0) == []
        assert backend.search("zyzzyva") == []
        assert backend.search("") == [] and backend.search("   ") == []

    def test_english_stemming(self, backend: SparseIndex) -> None:
        # Porter2 at index and query time: running/runs -> run, runners/runner -> runner
        assert set(ids(backend.search("run"))) == {"runners", "mixed"}
        assert ids(backend.search("runs")) == ids(backend.search("running"))
        assert ids(backend.search("runner")) == ["runners"]
        assert "apple-tree" in ids(backend.search("orchard"))

    def test_minus_excludes(self, backend: SparseIndex) -> None:
        with_pie = set(ids(backend.search("apple")))
        assert "apple-pie" in with_pie and "pie-crust" in with_pie
        without = set(ids(backend.search("apple -pie")))
        assert without == with_pie - {"apple-pie", "pie-crust"}
        assert set(ids(backend.search('apple -"pie crust"'))) == with_pie - {"pie-crust"}

    def test_plus_requires(self, backend: SparseIndex) -> None:
        assert set(ids(backend.search("+cherry pie"))) == {"cherry-tree", "pie-crust", "fruit-summary"}
        assert set(ids(backend.search("+cherry +pie"))) == {"pie-crust"}

    def test_boost_changes_order(self, backend: SparseIndex) -> None:
        # banana-bread and cherry-tree both hold their word twice: the boost decides the order
        assert ids(backend.search("banana^10 OR cherry"))[:2] == ["banana-bread", "cherry-tree"]
        assert ids(backend.search("banana OR cherry^10"))[0] == "cherry-tree"
        assert ids(backend.search("banana OR cherry^10")).index("banana-bread") > 1
        boosted = backend.search("banana^4 OR cherry")
        plain = {h.node_id: h.score for h in backend.search("banana OR cherry")}
        assert boosted[0].score == pytest.approx(4 * plain["banana-bread"], rel=1e-5)
        # phrase and group boosts too
        assert ids(backend.search('"pie crust"^10 apple'))[0] == "pie-crust"
        assert ids(backend.search("(bread bananas)^10 cherry"))[0] == "banana-bread"

    def test_phrases(self, backend: SparseIndex) -> None:
        assert ids(backend.search('"apple tree"')) == ["apple-tree"]
        assert ids(backend.search('"apple trees"')) == ["apple-tree"]  # stemmed inside phrases
        assert backend.search('"tree apple"') == []
        assert backend.search('"apple sweet"~1') == []  # "apple filling is sweet": 2 moves apart
        assert ids(backend.search('"apple sweet"~2')) == ["apple-pie"]
        assert backend.search('"pie apple"') == []

    def test_field_queries(self, backend: SparseIndex) -> None:
        assert ids(backend.search("level:2")) == ["fruit-summary"]
        assert set(ids(backend.search("level:1"))) == {"cherry-tree", "mixed"}
        assert set(ids(backend.search("apple AND level:0"))) == {"apple-pie", "apple-tree", "pie-crust"}
        assert ids(backend.search("node_id:banana-bread")) == ["banana-bread"]
        assert set(ids(backend.search("doc_ids:zh"))) == {"beijing-univ", "shanghai-jt", "mixed"}
        assert set(ids(backend.search("text:cherry -level:1"))) == {"pie-crust", "fruit-summary"}
        # field clauses score a constant 1 (times the boost)
        assert [h.score for h in backend.search("level:1")] == [1.0, 1.0]

    def test_and_or_not_normalisation(self, backend: SparseIndex) -> None:
        same = [("apple AND NOT pie", "+apple -pie"), ("apple && !pie", "+apple -pie"),
                ("apple AND tree", "+apple +tree"), ("apple OR banana", "apple banana"),
                ("(apple OR banana) AND sweet", "+(apple banana) +sweet")]
        for lucene, explicit in same:
            assert ids(backend.search(lucene)) == ids(backend.search(explicit)), lucene
        assert set(ids(backend.search("apple AND NOT pie"))) == {"apple-tree", "fruit-summary"}
        assert set(ids(backend.search("(apple OR banana) AND sweet"))) == {"apple-pie", "banana-bread"}
        # bare NOT: everything except the excluded (tantivy alone would raise here)
        everything_but = set(ids(backend.search("NOT apple", k=50)))
        assert everything_but == {n for n, *_ in DOCS} - {"apple-pie", "apple-tree", "pie-crust", "fruit-summary"}
        assert set(ids(backend.search("cherry AND (NOT tree)"))) == {"pie-crust"}  # "trees" stems to tree

    def test_chinese_and_japanese(self, backend: SparseIndex) -> None:
        assert ids(backend.search("北京")) == ["beijing-univ"]
        assert set(ids(backend.search("大学"))) == {"beijing-univ", "shanghai-jt", "tokyo"}
        assert ids(backend.search("北京大学"))[0] == "beijing-univ"  # bigrams 北京 京大 大学, ranked
        assert ids(backend.search('"交通大学"')) == ["shanghai-jt"]
        assert backend.search('"北京交通"') == []  # a phrase needs the bigrams adjacent
        assert set(ids(backend.search("大学 -上海"))) == {"beijing-univ", "tokyo"}
        assert ids(backend.search("东京 OR 東京")) == ["tokyo"]
        assert ids(backend.search("编程")) == ["mixed"]  # CJK glued to Latin text

    def test_filters(self, backend: SparseIndex) -> None:
        assert set(ids(backend.search("apple OR cherry", levels=[1, 2]))) == {"cherry-tree", "fruit-summary"}
        assert set(ids(backend.search("apple OR cherry", doc_ids=["botany"]))) == {"apple-tree", "cherry-tree", "fruit-summary"}
        assert ids(backend.search("apple OR cherry", levels=[2], doc_ids=["botany"])) == ["fruit-summary"]
        assert backend.search("apple", levels=[]) == [] and backend.search("apple", doc_ids=[]) == []
        # filters do not change scores
        unfiltered = {h.node_id: h.score for h in backend.search("apple OR cherry")}
        for h in backend.search("apple OR cherry", levels=[1, 2]):
            assert h.score == pytest.approx(unfiltered[h.node_id])

    def test_query_errors_carry_positions(self, backend: SparseIndex) -> None:
        for query, position in [('"apple pie', 0), ("(apple", 0), ("apple)", 5), ("AND apple", 0),
                                ("apple AND", 6), ("colour:red", 0), ("apple^", 5), ("app*", 3)]:
            with pytest.raises(QueryError) as info:
                backend.search(query)
            assert info.value.position == position, query

    def test_plain_fallback(self, backend: SparseIndex) -> None:
        broken = 'apple AND (pie "crust'
        with pytest.raises(QueryError):
            backend.search(broken)
        plain = backend.search(broken, lucene=False)
        assert ids(plain)[0] == "pie-crust"
        assert ids(backend.search(plain_query(broken))) == ids(backend.search("apple pie crust"))
        # lucene=False: operators are words, syntax characters are literal
        assert ids(backend.search("apple -pie", lucene=False)) == ids(backend.search("apple pie"))

    def test_search_or_plain_reports_and_retries(self, backend: SparseIndex) -> None:
        hits, err = search_or_plain(backend, "+apple -pie")
        assert err is None and set(ids(hits)) == {"apple-tree", "fruit-summary"}
        hits, err = search_or_plain(backend, 'apple AND (pie "crust', k=3)
        assert err is not None and err.position == 15 and "unterminated phrase" in err.reason
        assert ids(hits) == ids(backend.search('apple AND (pie "crust', k=3, lucene=False))

    def test_too_long_query(self, backend: SparseIndex) -> None:
        with pytest.raises(QueryError):
            backend.search("北" * 1100)


# ================================================================================================
# Analysis
# ================================================================================================
def test_analysis_english_and_cjk() -> None:
    assert analyze("The runners' Running RAN") == ["the", "runner", "run", "ran"]
    assert analyze("北京大学") == ["北京", "京大", "大学"]
    assert analyze("学") == ["学"]  # a lone CJK character stays a unigram (as cjk_bigram does)
    assert analyze("Python编程") == ["python", "编程"]
    assert analyze("ＡＢＣ ｶﾞｷﾞ") == ["abc", "ガギ"]  # cjk_width folding
    assert analyze("U.S.A. don't 3.14 1,000 foo_bar state-of-the-art") == [
        "u.s.a", "don't", "3.14", "1,000", "foo_bar", "state", "of", "the", "art"
    ]
    assert analyze("!!! ... <> ") == []
    assert prepare_text("plain English") == "plain English"


# ================================================================================================
# Embedded backend specifics
# ================================================================================================
class TestEmbedded:
    def test_open_missing_or_incomplete_is_not_built(self, tmp_path: Path) -> None:
        with pytest.raises(NotBuiltError):
            open_sparse_index(tmp_path / "nothing", SparseConfig())
        with pytest.raises(NotBuiltError):
            open_sparse_index(tmp_path, SparseConfig())  # exists but has no meta file

    def test_incompatible_meta_is_refused(self, tmp_path: Path) -> None:
        directory = tmp_path / "sparse"
        build_sparse_index(nodes_table(DOCS[:2]), directory, SparseConfig(), snapshot_id="s")
        meta = json.loads((directory / sparse_mod.META_FILE).read_text())
        assert meta["analyzer"] == ANALYZER_VERSION and meta["count"] == 2 and meta["snapshot_id"] == "s"
        meta["analyzer"] = "something-older"
        (directory / sparse_mod.META_FILE).write_text(json.dumps(meta))
        with pytest.raises(SparseIndexError, match="rebuild"):
            open_sparse_index(directory, SparseConfig())

    def test_rebuild_replaces_and_foreign_directory_is_refused(self, tmp_path: Path) -> None:
        directory = tmp_path / "sparse"
        build_sparse_index(nodes_table(DOCS[:2]), directory, SparseConfig(), snapshot_id="a")
        build_sparse_index(nodes_table(DOCS[2:4]), directory, SparseConfig(), snapshot_id="b")
        index = open_sparse_index(directory, SparseConfig())
        assert len(index) == 2 and ids(index.search("banana")) == ["banana-bread"]
        foreign = tmp_path / "mine"
        foreign.mkdir()
        (foreign / "notes.txt").write_text("keep me")
        with pytest.raises(SparseIndexError, match="refusing"):
            build_sparse_index(nodes_table(), foreign, SparseConfig(), snapshot_id="c")
        assert (foreign / "notes.txt").read_text() == "keep me"

    def test_bad_nodes_table(self, tmp_path: Path) -> None:
        dup = nodes_table(DOCS[:2] + DOCS[:1])
        with pytest.raises(SchemaError, match="unique"):
            build_sparse_index(dup, tmp_path / "a", SparseConfig(), snapshot_id="s")
        with pytest.raises(SchemaError, match="missing"):
            build_sparse_index(nodes_table().drop_columns(["doc_ids"]), tmp_path / "b", SparseConfig(), snapshot_id="s")

    def test_header_column_is_indexed(self, tmp_path: Path) -> None:
        table = nodes_table(DOCS[:2]).append_column("header", pa.array(["Document context: Grandma's cookbook", ""]))
        build_sparse_index(table, tmp_path / "s", SparseConfig(), snapshot_id="s")
        assert ids(open_sparse_index(tmp_path / "s", SparseConfig()).search("grandma cookbook")) == ["apple-pie"]

    def test_empty_corpus(self, tmp_path: Path) -> None:
        build_sparse_index(nodes_table([]), tmp_path / "s", SparseConfig(), snapshot_id="s")
        assert open_sparse_index(tmp_path / "s", SparseConfig()).search("apple") == []

    def test_index_survives_being_moved(self, tmp_path: Path) -> None:
        # the build writes into <snapshot>.partial/sparse, which is then renamed on publish
        partial = tmp_path / "snap.partial" / "sparse"
        build_sparse_index(nodes_table(), partial, SparseConfig(), snapshot_id="s")
        (tmp_path / "snap.partial").rename(tmp_path / "snap")
        assert ids(open_sparse_index(tmp_path / "snap" / "sparse", SparseConfig()).search('"apple tree"')) == ["apple-tree"]

    def test_publish_is_a_noop(self, tmp_path: Path) -> None:
        publish_sparse_index(tmp_path, SparseConfig(), snapshot_id="s", corpus_name="c")

    # -- fuzzing: only QueryError, never a crash; a deadline per example catches hangs --------
    FUZZ_ALPHABET = list('apple pie cherry 北京大学 AND OR NOT && || ! + - ( ) " : ^ 2 ~ * ? \\ / [ ] { } < > level: '
                         'node_id: doc_ids: text: 0 1')
    FUZZ_TOKENS = ["apple", "pie", "cherry", "北京大学", "AND", "OR", "NOT", "&&", "||", "!", "+", "-", "(", ")",
                   '"', '"apple pie"', "^2", "^0.5", "^", "~2", "level:", "level:1", "level:x", "text:", "node_id:",
                   "doc_ids:recipes", "foo:", ":", "*", "?", "\\", "\\(", "*:*", "[", "{", "/", "<", ">", ""]

    @settings(max_examples=300, deadline=timedelta(milliseconds=500), suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        query=st.one_of(
            st.text(max_size=80),
            st.text(alphabet=st.sampled_from(FUZZ_ALPHABET), max_size=60),
            st.lists(st.sampled_from(FUZZ_TOKENS), max_size=30).map(" ".join),
            st.lists(st.sampled_from(FUZZ_TOKENS), max_size=30).map("".join),
        ),
        lucene=st.booleans(),
        k=st.integers(min_value=0, max_value=20),
        levels=st.one_of(st.none(), st.lists(st.integers(min_value=-1, max_value=3), max_size=3)),
    )
    def test_fuzz_never_crashes_never_hangs(self, embedded: SparseIndex, query: str, lucene: bool, k: int,
                                            levels: list[int] | None) -> None:
        try:
            hits = embedded.search(query, k=k, levels=levels, lucene=lucene)
        except QueryError as err:
            assert lucene, "plain mode never fails on syntax (these queries are far below the size limit)"
            assert err.position is not None and 0 <= err.position <= len(query) and err.reason
            # both documented fallbacks always work
            embedded.search(plain_query(query), k=k, levels=levels)
            embedded.search(query, k=k, levels=levels, lucene=False)
            return
        assert len(hits) <= k
        assert all(isinstance(h, SparseHit) for h in hits)
        if levels is not None:
            assert all(h.level in levels for h in hits)


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
        monkeypatch.setattr(sparse_mod, "ES_MAX_RETRIES", 0)
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


# ================================================================================================
# Elasticsearch: the real client against a recording stand-in server
# ================================================================================================
class FakeES:
    """Just enough of the Elasticsearch REST API for the client-side paths we own."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.indices: dict[str, dict[str, Any]] = {}  # name -> {"meta", "docs", "aliases"}
        self.reject_ids: dict[str, tuple[int, str]] = {}  # _id -> (status, error type), every time
        self.throttle_once: set[str] = set()  # _id -> 429 the first time
        self.only_compat8 = False  # behave like an 8.x server
        self.search_hits: list[dict[str, Any]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("X-Elastic-Product", "Elasticsearch")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode() if length else ""
                fake.requests.append({"method": self.command, "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": raw})
                accept = self.headers.get("Accept", "")
                if fake.only_compat8 and "compatible-with=9" in accept:
                    return self._reply(400, {"error": {
                        "root_cause": [{"type": "media_type_header_exception", "reason": "Invalid media-type value on headers [Accept, Content-Type]"}],
                        "type": "media_type_header_exception", "reason": "Invalid media-type value on headers [Accept, Content-Type]",
                        "caused_by": {"type": "status_exception", "reason": "Accept version must be either version 8 or 7, but found 9."}},
                        "status": 400})
                status, body = fake.route(self.command, self.path.split("?")[0], raw)
                self._reply(status, body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        return Handler

    def route(self, method: str, path: str, raw: str) -> tuple[int, Any]:
        parts = [p for p in path.split("/") if p]
        missing = {"error": {"type": "index_not_found_exception", "reason": "no such index"}, "status": 404}
        if parts == ["_bulk"] and method in ("POST", "PUT"):
            lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
            items = []
            for action, source in zip(lines[::2], lines[1::2]):
                meta = action["index"]
                _id = meta["_id"]
                if _id in self.reject_ids:
                    status, etype = self.reject_ids[_id]
                    items.append({"index": {"_index": meta["_index"], "_id": _id, "status": status,
                                            "error": {"type": etype, "reason": f"{etype} for {_id}"}}})
                elif _id in self.throttle_once:
                    self.throttle_once.discard(_id)
                    items.append({"index": {"_index": meta["_index"], "_id": _id, "status": 429,
                                            "error": {"type": "es_rejected_execution_exception", "reason": "queue full"}}})
                else:
                    self.indices[meta["_index"]]["docs"][_id] = source
                    items.append({"index": {"_index": meta["_index"], "_id": _id, "status": 201, "result": "created"}})
            return 200, {"took": 1, "errors": any(i["index"]["status"] >= 300 for i in items), "items": items}
        if parts == ["_aliases"] and method == "POST":
            for act in json.loads(raw)["actions"]:
                (kind, spec), = act.items()
                aliases = self.indices[spec["index"]]["aliases"]
                aliases.add(spec["alias"]) if kind == "add" else aliases.discard(spec["alias"])
            return 200, {"acknowledged": True}
        if len(parts) == 2 and parts[0] == "_alias" and method == "GET":
            found = {n: {"aliases": {parts[1]: {}}} for n, i in self.indices.items() if parts[1] in i["aliases"]}
            return (200, found) if found else (404, {"error": "alias not found", "status": 404})
        name = parts[0] if parts else ""
        if name not in self.indices and method != "PUT":  # resolve an alias to its index
            name = next((n for n, i in self.indices.items() if name in i["aliases"]), name)
        if len(parts) == 1 and method == "PUT":
            body = json.loads(raw)
            self.indices[name] = {"meta": body["mappings"]["_meta"], "docs": {}, "aliases": set(), "body": body}
            return 200, {"acknowledged": True, "index": name}
        if name not in self.indices:
            return 404, missing
        index = self.indices[name]
        if len(parts) == 1 and method == "DELETE":
            del self.indices[name]
            return 200, {"acknowledged": True}
        sub = parts[1] if len(parts) > 1 else ""
        if sub == "_mapping" and method == "GET":
            return 200, {name: {"mappings": {"_meta": index["meta"]}}}
        if sub == "_mapping" and method in ("PUT", "POST"):
            index["meta"] = json.loads(raw)["_meta"]
            return 200, {"acknowledged": True}
        if sub == "_alias" and method == "GET":
            return 200, {name: {"aliases": {a: {} for a in index["aliases"]}}}
        if sub == "_settings":
            return 200, {"acknowledged": True}
        if sub == "_refresh":
            return 200, {"_shards": {"total": 1, "successful": 1, "failed": 0}}
        if sub == "_count":
            return 200, {"count": len(index["docs"])}
        if sub == "_search":
            return 200, {"took": 1, "timed_out": False, "hits": {"hits": self.search_hits}}
        return 400, {"error": {"type": "illegal_argument_exception", "reason": f"fake: {method} {path}"}, "status": 400}

    def __enter__(self) -> "FakeES":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_es(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeES]:
    monkeypatch.setattr(sparse_mod, "ES_BACKOFF_S", 0.01)
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
        assert len(bulks) == 1 + sparse_mod.ES_MAX_RETRIES

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
        from arborag.storage.sparse import _EsConnection

        conn = _EsConnection(es_cfg)
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
        from arborag.storage.sparse import _EsConnection

        conn = _EsConnection(es_cfg)
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
    @given(query=st.lists(st.sampled_from(TestEmbedded.FUZZ_TOKENS), max_size=20).map(" ".join))
    def test_every_normalised_query_is_accepted(self, elastic: SparseIndex, query: str) -> None:
        try:
            elastic.search(query)
        except QueryError as err:
            assert err.position is not None, f"Elasticsearch rejected a normalised query: {err}"
