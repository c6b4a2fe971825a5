"""One leaf per repeated text (tasks/build/repeats.py): what counts as a repeat, which occurrence
is kept, and the provenance kept for the others."""

from __future__ import annotations

import pyarrow as pa
import pytest

from arborag.storage.schemas import CHUNKS, REPEATS
from arborag.tasks.build.leaves import leaves_for, strategy_chunks
from arborag.tasks.build.repeats import (
    collapse_repeats,
    occurrence_keys,
    published_occurrence_keys,
    repeat_key,
    repeats_table,
)
from arborag.tasks.stages.publish import snapshot_provenance


def _chunks(rows: list[tuple[str, str, int, str]], strategy: str = "sentence") -> pa.Table:
    return pa.Table.from_pylist([
        {"chunk_id": c, "doc_id": d, "section_id": None, "ordinal": o, "start_char": 10 * o, "end_char": 10 * o + 9,
         "n_tokens": 3, "text": t, "header": f"head {d}", "strategy": strategy}
        for c, d, o, t in rows], schema=CHUNKS)


def _ids(table: pa.Table) -> list[str]:
    return table.column("chunk_id").to_pylist()


def test_exact_repeats_become_one_leaf_listing_every_document() -> None:
    leaves = collapse_repeats(_chunks([
        ("a0", "dA", 0, "Signed by the Chief Executive Officer."), ("a1", "dA", 1, "Revenue grew."),
        ("b0", "dB", 0, "Signed by the Chief Executive Officer."), ("c0", "dC", 0, "Signed by the Chief Executive Officer."),
    ]))
    assert _ids(leaves) == ["a0", "a1"]
    assert leaves.column("doc_ids").to_pylist() == [["dA", "dB", "dC"], ["dA"]]
    assert leaves.column("repeats").to_pylist() == [[{"chunk_id": "b0", "doc_id": "dB"}, {"chunk_id": "c0", "doc_id": "dC"}], []]
    assert repeats_table(leaves).to_pylist() == [{"chunk_id": "b0", "node_id": "a0"}, {"chunk_id": "c0", "node_id": "a0"}]


def test_whitespace_case_punctuation_and_width_variants_are_repeats() -> None:
    base = "Page 4 of 10 -- ACME Corp, Annual Report"
    variants = ["page 4 of 10 ACME corp annual report", "PAGE  4\nof 10 — Acme Corp. Annual   Report!", "Ｐａｇｅ ４ of 10 acme corp: annual report"]
    assert {repeat_key(v) for v in variants} == {repeat_key(base)}
    leaves = collapse_repeats(_chunks([("x", "d1", 0, base)] + [(f"v{i}", f"d{i + 2}", 0, v) for i, v in enumerate(variants)]))
    assert _ids(leaves) == ["x"]
    assert leaves.column("text").to_pylist() == [base]  # the kept occurrence keeps its own text


def test_digits_keep_table_rows_apart() -> None:
    leaves = collapse_repeats(_chunks([("r1", "d1", 0, "Net sales | 1,204 | 1,100"), ("r2", "d2", 0, "Net sales | 1,305 | 1,204"),
                                       ("r3", "d3", 0, "Net sales | 1,204 | 1,100")]))
    assert repeat_key("Net sales | 1,204") != repeat_key("Net sales | 1,305")
    assert _ids(leaves) == ["r1", "r2"]  # r3 repeats r1 exactly; r2's figures differ
    assert repeats_table(leaves).to_pylist() == [{"chunk_id": "r3", "node_id": "r1"}]


def test_the_first_occurrence_in_document_order_is_kept() -> None:
    # given out of order: the kept one is the first by (doc_id, ordinal), not the first row
    leaves = collapse_repeats(_chunks([("late", "dB", 0, "Same text."), ("mid", "dA", 5, "Same text."), ("early", "dA", 2, "Same  text")]))
    assert _ids(leaves) == ["early"]
    assert [r["chunk_id"] for r in leaves.column("repeats").to_pylist()[0]] == ["mid", "late"]
    assert leaves.column("doc_ids").to_pylist() == [["dA", "dB"]]


def test_within_document_keeps_one_leaf_per_document() -> None:
    chunks = _chunks([("a0", "dA", 0, "Footer line"), ("a1", "dA", 1, "Body A"), ("a2", "dA", 2, "footer line."),
                      ("b0", "dB", 0, "Footer line")])
    leaves = collapse_repeats(chunks, within_document=True)
    assert _ids(leaves) == ["a0", "a1", "b0"]  # each document keeps its own text
    assert leaves.column("doc_ids").to_pylist() == [["dA"], ["dA"], ["dB"]]
    assert repeats_table(leaves).to_pylist() == [{"chunk_id": "a2", "node_id": "a0"}]
    assert _ids(leaves_for(chunks, "sentence", scope="document")) == ["a0", "a1", "b0"]
    assert _ids(leaves_for(chunks, "sentence")) == ["a0", "a1"]


def test_nothing_repeats_keeps_every_chunk_with_its_own_document() -> None:
    chunks = _chunks([("a0", "dA", 0, "one"), ("b0", "dB", 0, "two")])
    leaves = collapse_repeats(chunks)
    assert _ids(leaves) == ["a0", "b0"]
    assert leaves.column("doc_ids").to_pylist() == [["dA"], ["dB"]]
    assert repeats_table(leaves).equals(REPEATS.empty_table())


def test_leaves_for_collapses_only_its_strategys_chunks() -> None:
    chunks = pa.concat_tables([_chunks([("s0", "d1", 0, "Same."), ("s1", "d2", 0, "Same.")]),
                               _chunks([("f0", "d1", 0, "Same.")], strategy="ffs")])
    assert _ids(leaves_for(chunks, "sentence")) == ["s0"]
    assert _ids(strategy_chunks(chunks, "sentence")) == ["s0", "s1"]


def test_bad_scope_and_collapsed_input_are_refused() -> None:
    chunks = _chunks([("a0", "dA", 0, "x")])
    with pytest.raises(ValueError, match="scope must be"):
        leaves_for(chunks, "sentence", scope="page")
    with pytest.raises(ValueError, match="pass the chunks table"):
        collapse_repeats(collapse_repeats(chunks))


def test_the_snapshot_provenance_keeps_every_occurrence_and_reads_back_as_the_same_occurrences() -> None:
    from arborag.storage.schemas import DOCUMENTS, NODES

    chunks = _chunks([("a0", "dA", 0, "Shared notice."), ("a1", "dA", 1, "Own text."), ("b0", "dB", 0, "shared notice")])
    leaves = collapse_repeats(chunks)
    nodes = pa.Table.from_pylist([{"node_id": c, "level": 0, "text": "t", "n_tokens": 1, "doc_ids": ["dA"], "summary_of": None,
                                   "summarizer": "leaf", "summary_status": "leaf", "created_by_run": "r"} for c in _ids(leaves)], schema=NODES)
    documents = pa.Table.from_pylist([{"doc_id": d, "uri": f"/{d}", "title": d, "mime": "text/plain", "n_chars": 1, "text": "x",
                                       "metadata": "{}", "ingested_at": None, "status": "ok", "error": None} for d in ("dA", "dB")],
                                     schema=DOCUMENTS)
    repeats = repeats_table(leaves)
    snap_chunks, snap_docs = snapshot_provenance(nodes, chunks, documents, repeats)
    assert _ids(snap_chunks) == ["a0", "a1", "b0"]  # the occurrence not kept stays in chunks
    assert snap_docs.column("doc_id").to_pylist() == ["dA", "dB"]
    assert _ids(snapshot_provenance(nodes, chunks, documents)[0]) == ["a0", "a1"]  # without repeats: leaves only
    published = published_occurrence_keys(snap_chunks, repeats).sort("chunk_id")
    assert published.equals(occurrence_keys(leaves).sort("chunk_id"))
    assert published.filter(published["chunk_id"] == "b0").row(0, named=True) == {"doc_id": "dB", "chunk_id": "b0", "header": "", "stands_for": "a0"}


def test_texts_that_differ_only_where_words_split_are_not_repeats() -> None:
    # the same letters with separators elsewhere: "net sales" is not "nets ales" (ASCII and not)
    leaves = collapse_repeats(_chunks([("a", "d1", 0, "Net sales, 2024."), ("b", "d2", 0, "Nets ales 2024"), ("c", "d3", 0, "net SALES 2024"),
                                       ("d", "d4", 0, "Ｎｅｔｓ ａｌｅｓ 2024"), ("e", "d5", 0, "Straße 5"), ("f", "d6", 0, "STRASSE 5")]))
    assert repeats_table(leaves).to_pylist() == [{"chunk_id": "c", "node_id": "a"}, {"chunk_id": "d", "node_id": "b"},
                                                 {"chunk_id": "f", "node_id": "e"}]


def test_the_build_key_changes_with_where_a_text_occurs_and_only_then() -> None:
    from arborag.config import ArboragConfig
    from arborag.tasks.build.key import build_key

    cfg = ArboragConfig()
    two = collapse_repeats(_chunks([("a0", "dA", 0, "Shared notice."), ("a1", "dA", 1, "Own text."), ("b0", "dB", 0, "shared notice")]))
    one = collapse_repeats(_chunks([("a0", "dA", 0, "Shared notice."), ("a1", "dA", 1, "Own text.")]))
    assert _ids(two) == _ids(one)  # the same leaves...
    assert build_key(two, cfg, "c") != build_key(one, cfg, "c")  # ...but the text occurs in another document
    plain = _chunks([("a0", "dA", 0, "Shared notice."), ("a1", "dA", 1, "Own text.")])
    assert build_key(one, cfg, "c") == build_key(plain, cfg, "c")  # nothing repeats: the key a build had before
