"""``tasks/links.build_links``: leaves linked through document titles and capitalised names."""

from __future__ import annotations

import math

import pyarrow as pa

from arborag.storage.schemas import CHUNKS, DOCUMENTS, LINKS
from arborag.tasks.links import build_links, title_keys


def _docs(rows: list[tuple[str, str, str]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"doc_id": d, "uri": f"/src/{t}.txt", "title": t, "mime": "text/plain", "n_chars": len(x), "text": x, "metadata": None,
          "ingested_at": None, "status": "ok", "error": None} for d, t, x in rows], schema=DOCUMENTS)


def _leaves(rows: list[tuple[str, str, str]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"chunk_id": c, "doc_id": d, "section_id": None, "ordinal": i, "start_char": 0, "end_char": len(x), "n_tokens": 10,
          "text": x, "header": "", "strategy": "sentence"} for i, (c, d, x) in enumerate(rows)], schema=CHUNKS)


FERRY = "Lowmere Ferry\nThe ferryman of Lowmere rowed to the Quillon Lighthouse every dawn."
LIGHT = "Quillon Lighthouse (Marsh)\nThe lighthouse stands on the salt marsh. It was built by Ada Brimble."
MILL = "Brimble Mill\nAda Brimble's mill ground the wheat of the valley."
OTHER = "Tern Island\nSeabirds nest on the island all summer."
DOCS = _docs([("dF", "Lowmere_Ferry", FERRY), ("dL", "Quillon_Lighthouse_(Marsh)", LIGHT), ("dM", "Brimble_Mill", MILL),
              ("dT", "Tern_Island", OTHER)])
LEAVES = _leaves([
    ("f1", "dF", "The ferryman of Lowmere rowed to the Quillon Lighthouse every dawn."),
    ("l1", "dL", "The lighthouse stands on the salt marsh."),
    ("l2", "dL", "It was built by Ada Brimble."),
    ("m1", "dM", "Ada Brimble's mill ground the wheat of the valley."),
    ("t1", "dT", "Seabirds nest on the island all summer."),
])


def _rows(table: pa.Table) -> set[tuple[str, str, str]]:
    return {(r["node_id"], r["entity"], r["kind"]) for r in table.to_pylist()}


def test_titles_come_from_the_title_and_the_heading_line_without_parenthetical() -> None:
    keys = {(r["doc_id"], r["entity"]) for r in title_keys(DOCS).to_dicts()}
    assert ("dL", "quillon lighthouse") in keys  # file stem: '_' read as spaces, "(Marsh)" dropped
    assert ("dF", "lowmere ferry") in keys
    assert not any(e.endswith("marsh)") for _, e in keys)


def test_a_mention_links_a_leaf_to_every_leaf_of_the_named_document() -> None:
    links = build_links(LEAVES, DOCS)
    assert links.schema.equals(LINKS)
    rows = _rows(links)
    # the ferry leaf names the lighthouse; every lighthouse leaf carries its title
    assert ("f1", "quillon lighthouse", "mention") in rows
    assert {("l1", "quillon lighthouse", "title"), ("l2", "quillon lighthouse", "title")} <= rows
    # a person named in two documents links them (possessive stripped)
    assert {("l2", "ada brimble", "mention"), ("m1", "ada brimble", "mention")} <= rows
    # IDF over documents: the lighthouse reaches 2 of 4 documents
    w = {r["entity"]: (r["df"], r["weight"]) for r in links.to_pylist()}
    assert w["quillon lighthouse"] == (2, math.log(4 / 2))


def test_names_reaching_one_document_or_function_words_link_nothing() -> None:
    rows = _rows(build_links(LEAVES, DOCS))
    entities = {e for _, e, _ in rows}
    assert "tern island" not in entities  # named by its own document only
    assert "the" not in entities and "it" not in entities  # capitalised at a sentence start
    assert not any(n == "t1" for n, _, _ in rows)


def test_a_name_in_too_many_documents_is_left_out() -> None:
    leaves = _leaves([(f"c{i}", f"d{i}", f"Every town fears the Grey Wolf, said story {i}.") for i in range(4)]
                     + [("c8", "d8", "The valley is quiet."), ("c9", "d9", "The Grey Wolf slept.")])
    docs = _docs([(f"d{i}", f"Town_{i}", "x") for i in range(4)] + [("d8", "Valley", "x"), ("d9", "Wolf", "x")])
    assert "grey wolf" in {e for _, e, _ in _rows(build_links(leaves, docs))}  # 5 of 6 documents: a small corpus keeps it
    assert "grey wolf" not in {e for _, e, _ in _rows(build_links(leaves, docs, max_doc_share=0.5, min_docs_cap=2))}
    only_named = _leaves([(f"c{i}", f"d{i}", f"The Grey Wolf came to town {i}.") for i in range(3)])
    assert "grey wolf" not in {e for _, e, _ in _rows(build_links(only_named, docs))}  # in every document: IDF 0


def test_no_leaves_no_links() -> None:
    out = build_links(CHUNKS.empty_table(), DOCS)
    assert out.num_rows == 0 and out.schema.equals(LINKS)
