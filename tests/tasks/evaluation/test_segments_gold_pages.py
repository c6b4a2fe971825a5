"""Page-level gold evidence (FinanceBench ``<doc>#page=<n>``): retrieved texts are matched against
the evidence *page*, cut from the ingested document by its ``page_starts`` metadata, so leaves
anywhere on the page and segments that contain it score; texts that only graze it do not."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa

from arborag.storage.schemas import DOCUMENTS, EVIDENCE
from arborag.tasks.evaluation import metrics as M
from arborag.tasks.evaluation.gold import evidence_page_texts, gold_items, page_of, resolve_gold

# three pages joined by "\n\n" as the PDF reader joins them; page 1 holds the evidence snippet
PAGES = [
    " ".join(f"cover word{i} of the filing" for i in range(40)),
    " ".join(f"quarter table row{i} shows revenue by segment" for i in range(30)) + " Entertainment grew 9% in the quarter.",
    " ".join(f"legal note{i} about forward looking statements" for i in range(40)),
]
TEXT = "\n\n".join(PAGES)
STARTS = [0, len(PAGES[0]) + 2, len(PAGES[0]) + len(PAGES[1]) + 4]


def _tables(meta: dict) -> tuple[pa.Table, pa.Table]:
    evidence = pa.Table.from_pylist(
        [{"gold_id": "FILING#page=1", "file": "FILING.pdf", "title": "FILING", "text": "Entertainment grew 9% in the quarter."}],
        schema=EVIDENCE,
    )
    docs = pa.Table.from_pylist(
        [{"doc_id": "d1", "uri": "/x/FILING.pdf", "title": "FILING", "mime": "application/pdf", "n_chars": len(TEXT), "text": TEXT,
          "metadata": json.dumps(meta), "ingested_at": datetime.now(timezone.utc), "status": "ok", "error": None}],
        schema=DOCUMENTS,
    )
    return evidence, docs


def _hit(golds, text: str) -> bool:
    return bool(M.evidence_matches([M.Retrieved(0, text, ("d1",))], golds, match="doc+text")[0])


def test_segments_gold_page_text_is_cut_by_page_starts_from_zero():
    evidence, docs = _tables({"n_pages": 3, "page_starts": STARTS})
    gold = resolve_gold(evidence, docs)
    pages = evidence_page_texts(evidence, docs, gold)
    assert page_of("FILING#page=1") == 1 and page_of("Some title") is None
    assert pages == {"FILING#page=1": PAGES[1]}
    golds = gold_items(["FILING#page=1"], ["Entertainment grew 9% in the quarter."], gold, pages)
    assert golds[0].text == PAGES[1] and golds[0].doc_ids == frozenset({"d1"})


def test_segments_gold_page_hits_leaves_on_the_page_and_segments_holding_it():
    evidence, docs = _tables({"n_pages": 3, "page_starts": STARTS})
    gold = resolve_gold(evidence, docs)
    by_page = gold_items(["FILING#page=1"], ["Entertainment grew 9% in the quarter."], gold, evidence_page_texts(evidence, docs, gold))
    by_snippet = gold_items(["FILING#page=1"], ["Entertainment grew 9% in the quarter."], gold)
    leaf_on_page = PAGES[1][:200]  # a leaf on the evidence page, not holding the snippet
    assert _hit(by_page, leaf_on_page) and not _hit(by_snippet, leaf_on_page)
    segment = TEXT[STARTS[1] - 300 : STARTS[2] + 300]  # the whole page plus a little on each side
    assert _hit(by_page, segment)
    assert not _hit(by_page, PAGES[0][:200]) and not _hit(by_page, PAGES[2])  # other pages
    grazing = TEXT[STARTS[2] - 120 : STARTS[2] + 1500]  # mostly page 2, a sliver of page 1
    assert not _hit(by_page, grazing)


def test_segments_gold_without_page_offsets_keeps_the_snippet():
    evidence, docs = _tables({})
    gold = resolve_gold(evidence, docs)
    assert evidence_page_texts(evidence, docs, gold) == {}
    evidence, docs = _tables({"page_starts": [0]})  # page 1 does not exist
    assert evidence_page_texts(evidence, docs, resolve_gold(evidence, docs)) == {}
