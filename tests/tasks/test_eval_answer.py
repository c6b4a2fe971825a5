"""Answers with an LLM: prompt and the hits that get one (arborag.tasks.evaluation.answer)."""

from __future__ import annotations

import pyarrow as pa

from arborag.storage.schemas import HITS, QUERIES
from arborag.tasks.evaluation.answer import answer_items, answer_messages, collect_answers


def _hits(rows: list[dict]) -> pa.Table:
    base = {"strategy": "sentence", "mode": "collapsed", "latency_ms": 1.0, "embed_ms": 0.0, "node_ids": [], "levels": [],
            "scores": [], "n_tokens": [], "doc_ids": []}
    return pa.Table.from_pylist([{**base, **r} for r in rows], schema=HITS)


def test_answer_messages_hold_context_and_question() -> None:
    (msg,) = answer_messages("Who?", ["one", "two"])
    assert msg["role"] == "user"
    assert "Context:\none\n\ntwo\n\nQuestion: Who?\nAnswer:" in msg["content"]


def test_answer_items_take_one_budget_without_failures_in_order() -> None:
    queries = pa.Table.from_pylist(
        [{"qid": "q1", "question": "Q one?", "answers": [], "gold_ids": [], "gold_texts": [], "type": None},
         {"qid": "q2", "question": "Q two?", "answers": [], "gold_ids": [], "gold_texts": [], "type": None}],
        schema=QUERIES,
    )
    a = _hits([
        {"qid": "q2", "system": "flat", "budget": 40, "texts": ["t2"], "error": None},
        {"qid": "q1", "system": "flat", "budget": 10, "texts": ["short"], "error": None},
        {"qid": "q1", "system": "hybrid", "budget": 40, "texts": [], "error": "QueryError: x"},
    ])
    b = _hits([{"qid": "q1", "system": "flat", "budget": 40, "texts": ["t1", "t1b"], "error": None}])
    keys, items = answer_items([a, b], queries, 40)
    assert keys == [("q2", "sentence", "flat", 40), ("q1", "sentence", "flat", 40)]
    assert items == [("Q two?", ["t2"]), ("Q one?", ["t1", "t1b"])]
    seen: list[list[tuple[str, list[str]]]] = []

    def answer_many(batch: list[tuple[str, list[str]]]) -> list[str]:
        seen.append(batch)
        return [q.upper() for q, _ in batch]

    assert collect_answers([a, b], queries, 40, answer_many) == {("q2", "sentence", "flat", 40): "Q TWO?", ("q1", "sentence", "flat", 40): "Q ONE?"}
    assert len(seen) == 1
    assert collect_answers([a], queries, 999, answer_many) == {} and len(seen) == 1  # nothing to answer: no call
    assert answer_items([], queries, 40) == ([], [])
