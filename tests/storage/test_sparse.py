"""arborag.storage.sparse: the contract suite over both backends, analysis, embedded specifics.

* The contract suite (``backend`` fixture, tests/storage/conftest.py) runs on the embedded engine
  always, and on Elasticsearch when ``ARBORAG_ES_URL`` answers (``-m elasticsearch`` selects only
  those); otherwise the ES parameters skip and say why.
* Elasticsearch specifics (request bodies, the client against a stand-in server, a real server)
  are in test_sparse_es.py.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from helpers.sparse import DOCS, FUZZ_TOKENS, ids, nodes_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborag.config import SparseConfig
from arborag.errors import NotBuiltError, QueryError, SchemaError
from arborag.storage.lucene import plain_query
from arborag.storage.sparse import (
    ANALYZER_VERSION,
    ES_MARKER_FILE,
    META_FILE,
    SparseHit,
    SparseIndex,
    SparseIndexError,
    analyze,
    build_sparse_index,
    open_sparse_index,
    prepare_text,
    publish_sparse_index,
    search_or_plain,
)
from arborag.storage.sparse import es_backend


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
        meta = json.loads((directory / META_FILE).read_text())
        assert meta["analyzer"] == ANALYZER_VERSION and meta["count"] == 2 and meta["snapshot_id"] == "s"
        meta["analyzer"] = "something-older"
        (directory / META_FILE).write_text(json.dumps(meta))
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

    def test_publish_is_a_noop(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        # embedded: the snapshot folder is published by the manifest; publishing touches no file
        # and never reaches for Elasticsearch
        directory = tmp_path / "sparse"
        build_sparse_index(nodes_table(DOCS[:2]), directory, SparseConfig(), snapshot_id="s")
        before = {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*") if p.is_file()}

        def no_es(*args: object, **kwargs: object) -> None:
            raise AssertionError("embedded publish must not call Elasticsearch")

        monkeypatch.setattr(es_backend, "publish_elasticsearch", no_es)
        monkeypatch.setattr(es_backend, "EsConnection", no_es)
        assert publish_sparse_index(directory, SparseConfig(), snapshot_id="s", corpus_name="c") is None
        after = {p.relative_to(directory): p.read_bytes() for p in directory.rglob("*") if p.is_file()}
        assert after == before and not (directory / ES_MARKER_FILE).exists()
        assert ids(open_sparse_index(directory, SparseConfig()).search("apple")) == ["apple-tree", "apple-pie"]

    # -- fuzzing: only QueryError, never a crash; a deadline per example catches hangs --------
    FUZZ_ALPHABET = list('apple pie cherry 北京大学 AND OR NOT && || ! + - ( ) " : ^ 2 ~ * ? \\ / [ ] { } < > level: '
                         'node_id: doc_ids: text: 0 1')
    FUZZ_TOKENS = FUZZ_TOKENS

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
