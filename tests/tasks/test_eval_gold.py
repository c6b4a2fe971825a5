"""Gold evidence -> doc_ids of a built corpus (arborag.tasks.evaluation.gold)."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa

from arborag.storage.schemas import DOCUMENTS, EVIDENCE
from arborag.tasks.evaluation.gold import gold_items, resolve_gold


def _documents(rows: list[dict]) -> pa.Table:
    now = datetime.now(timezone.utc)
    full = [
        {"doc_id": r["doc_id"], "uri": r["uri"], "title": r.get("title"), "mime": "text/plain", "n_chars": len(r.get("text", "")),
         "text": r.get("text", ""), "metadata": "{}", "ingested_at": now, "status": r.get("status", "ok"), "error": None}
        for r in rows
    ]
    return pa.Table.from_pylist(full, schema=DOCUMENTS)


def test_resolve_gold_by_uri_title_and_text() -> None:
    evidence = pa.Table.from_pylist(
        [
            {"gold_id": "Alû", "file": "Alu.txt", "title": "Alû", "text": "Alû\nAlû is a demon."},
            {"gold_id": "T", "file": "missing.txt", "title": "Title Only", "text": "t"},
            {"gold_id": "P#page=2", "file": "gone.pdf", "title": "gone", "text": "Net sales rose 9%."},
            {"gold_id": "none", "file": "none.txt", "title": "none", "text": "never ingested"},
        ],
        schema=EVIDENCE,
    )
    docs = _documents(
        [
            {"doc_id": "d1", "uri": "file:///data/corpus/Alu.txt", "title": "Alû", "text": "Alû\nAlû is a demon."},
            {"doc_id": "d2", "uri": "/x/other.txt", "title": "Title Only", "text": "t"},
            {"doc_id": "d3", "uri": "/x/report.pdf", "title": "report", "text": "Highlights. Net sales rose 9%. More."},
            {"doc_id": "d4", "uri": "/x/none.txt", "title": "none", "text": "x", "status": "error"},
        ]
    )
    gold = resolve_gold(evidence, docs)
    assert gold == {"Alû": frozenset({"d1"}), "T": frozenset({"d2"}), "P#page=2": frozenset({"d3"}), "none": frozenset()}
    items = gold_items(["Alû", "none"], ["Alû\nAlû is a demon."], gold)
    assert items[0].doc_ids == frozenset({"d1"}) and items[0].text.startswith("Alû")
    assert items[1].doc_ids == frozenset() and items[1].text == ""


def test_resolve_gold_title_and_stem_fallbacks_and_union_of_documents() -> None:
    evidence = pa.Table.from_pylist(
        [
            {"gold_id": "two", "file": "dup.txt", "title": None, "text": None},
            {"gold_id": "stem", "file": "sub/Report 2020.pdf", "title": "  ", "text": None},
            {"gold_id": "spaced", "file": "x.txt", "title": " Spaced Title ", "text": ""},
        ],
        schema=EVIDENCE,
    )
    docs = _documents(
        [
            {"doc_id": "d1", "uri": "/a/dup.txt", "title": "one"},
            {"doc_id": "d2", "uri": "file:///b/dup.txt", "title": "two"},
            {"doc_id": "d3", "uri": "/c/r.pdf", "title": "Report 2020"},
            {"doc_id": "d4", "uri": "/c/s.txt", "title": "Spaced Title  "},
            {"doc_id": "d5", "uri": "/c/t.txt", "title": None},
        ]
    )
    gold = resolve_gold(evidence, docs)
    assert list(gold) == ["two", "stem", "spaced"]
    assert gold == {"two": frozenset({"d1", "d2"}), "stem": frozenset({"d3"}), "spaced": frozenset({"d4"})}
