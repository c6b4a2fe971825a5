"""Scoring: one RESULTS row per HITS row (arborag.tasks.evaluation.score)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from arborag.storage.schemas import HITS, QUERIES, RESULTS
from arborag.tasks.evaluation.score import score_hits, unresolved_gold


def _hit(**kw: object) -> dict:
    row = {"qid": "q", "strategy": "sentence", "system": "collapsed", "mode": "collapsed", "budget": 100, "latency_ms": 3.0,
           "embed_ms": 1.0, "node_ids": [], "levels": [], "scores": [], "n_tokens": [], "doc_ids": [], "texts": [], "error": None}
    return {**row, **kw}


def test_score_hits_by_hand() -> None:
    queries = pa.Table.from_pylist(
        [{"qid": "q", "question": "?", "answers": ["Seine"], "gold_ids": ["A", "B"], "gold_texts": ["a", "b: the Seine"], "type": "bridge"}],
        schema=QUERIES,
    )
    hits = pa.Table.from_pylist(
        [{"qid": "q", "strategy": "sentence", "system": "collapsed", "mode": "collapsed", "budget": 100, "latency_ms": 3.0,
          "node_ids": ["n1", "n2", "n3"], "levels": [1, 0, 0], "scores": [0.9, 0.8, 0.7], "n_tokens": [10, 5, 5],
          "doc_ids": [["dA", "dB"], ["dX"], ["dB"]], "texts": ["summary", "the Seine flows", "b text"], "error": None}],
        schema=HITS,
    )
    gold = {"sentence": {"A": frozenset({"dA"}), "B": frozenset({"dB"})}}
    res = score_hits(hits, queries, gold, dataset="t", match="doc").to_pylist()[0]
    assert res["answer_hit"] == 1.0
    # the summary descends from dA and dB but does not quote them: only the leaf at rank 3 counts
    assert res["recall_at_budget"] == 0.5 and res["full_support"] == 0.0
    assert res["mrr"] == pytest.approx(1 / 3)
    assert res["level_mix"] == pytest.approx(1 / 3)
    assert res["context_tokens"] == 20 and res["n_gold_resolved"] == 2
    assert res["f1"] is None



def test_score_hits_keeps_hit_order_skips_unknown_questions_and_fills_bookkeeping() -> None:
    queries = pa.Table.from_pylist(
        [{"qid": "q", "question": "?", "answers": ["yes"], "gold_ids": ["A"], "gold_texts": ["a"], "type": None},
         {"qid": "r", "question": "?", "answers": ["Paris"], "gold_ids": [], "gold_texts": [], "type": "bridge"}],
        schema=QUERIES,
    )
    hits = pa.Table.from_pylist(
        [_hit(qid="r", system="flat", levels=[0], n_tokens=[7], doc_ids=[["dA"]], texts=["Paris is big"]),
         _hit(qid="nobody"),
         _hit(qid="q", system="bm25", strategy="dds", error="QueryError: boom", latency_ms=None, embed_ms=None),
         _hit(qid="q", levels=[0, 0], n_tokens=[3, 4], doc_ids=[["dA"], None], texts=["a", "b"])],
        schema=HITS,
    )
    gold = {"sentence": {"A": frozenset({"dA"})}, "dds": {}}
    res = score_hits(hits, queries, gold, dataset="t", match="doc", config_hashes={"sentence": "h1"},
                     predictions={("q", "sentence", "collapsed", 100): "yes"})
    assert res.schema == RESULTS
    rows = res.to_pylist()
    assert [(r["qid"], r["system"]) for r in rows] == [("r", "flat"), ("q", "bm25"), ("q", "collapsed")]
    r, failed, ok = rows
    # no gold evidence: retrieval metrics are not applicable, the answer is scored
    assert r["answer_hit"] == 1.0 and r["recall_at_budget"] is None and r["n_gold"] == 0 and r["type"] == "bridge"
    assert r["n_hits"] == 1 and r["context_tokens"] == 7 and r["config_hash"] == "h1" and r["embed_ms"] == 1.0
    # a failed search has no metrics; its strategy has no config hash here
    assert failed["error"] == "QueryError: boom" and failed["mrr"] is None and failed["level_mix"] is None
    assert failed["n_hits"] == 0 and failed["context_tokens"] == 0 and failed["config_hash"] is None and failed["latency_ms"] is None
    # yes/no answers: no hit rate; the LLM prediction is scored
    assert ok["answer_hit"] is None and ok["recall_at_budget"] == 1.0 and ok["mrr"] == 1.0 and ok["n_gold_resolved"] == 1
    assert ok["prediction"] == "yes" and ok["em"] == 1.0 and ok["f1"] == 1.0 and r["prediction"] is None


def test_score_hits_on_no_hits() -> None:
    queries = pa.Table.from_pylist([], schema=QUERIES)
    res = score_hits(HITS.empty_table(), queries, {}, dataset="t", match="doc")
    assert res.schema == RESULTS and res.num_rows == 0


def test_unresolved_gold_counts_distinct_ids_without_documents() -> None:
    queries = pa.Table.from_pylist(
        [{"qid": "a", "question": "?", "answers": [], "gold_ids": ["A", "B"], "gold_texts": [], "type": None},
         {"qid": "b", "question": "?", "answers": [], "gold_ids": ["B", "C"], "gold_texts": [], "type": None},
         {"qid": "c", "question": "?", "answers": [], "gold_ids": None, "gold_texts": [], "type": None}],
        schema=QUERIES,
    )
    assert unresolved_gold(queries, {"A": frozenset({"d"}), "B": frozenset()}) == 2  # B (empty) and C (absent)
