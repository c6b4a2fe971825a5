"""Packing the budget without repeats: query.hits.repeats, fill_hits and the index's fill.

The index's fill runs on a fake vector store (named FakeVectors: the arrays the fill reads,
no LanceDB), through the real ``Index.fill``."""

from __future__ import annotations

import numpy as np
import pytest

from arborag.query.hits import Hit, fill_hits, repeats
from arborag.query.index import Index

CERT = ("The registrant's other certifying officer and I have disclosed, based on our most recent evaluation of "
        "internal control over financial reporting, to the registrant's auditors and the audit committee.")
REVENUE = "In the second quarter we generated $9.6 billion in revenue, a decrease of 7.1% on a comparable basis."
STORES = "Domestic segment stores open at the end of the second quarter: 969 compared to 982 a year before."


# -- repeats -------------------------------------------------------------------------------------
def test_exact_repeats_after_case_and_whitespace_normalisation() -> None:
    assert repeats([CERT, REVENUE, CERT.upper(), "  " + CERT.replace(" ", "\n  "), STORES]) == [2, 3]


def test_near_repeat_one_word_changed_in_a_long_text() -> None:
    long = " ".join(f"word{i}" for i in range(200))
    changed = long.replace("word199", "other")  # 195 of 197 5-grams shared: Jaccard 0.98
    assert repeats([long, changed]) == [1]
    assert repeats([long, changed], threshold=0.99) == []


def test_overlapping_but_distinct_texts_are_kept() -> None:
    half = " ".join(REVENUE.split()[:9])  # a prefix: contained in REVENUE, but not near-equal to it
    assert repeats([REVENUE, half, STORES, CERT]) == []


def test_short_texts_compare_whole() -> None:
    assert repeats(["RECITALS", "Recitals", "SIGNATURES", "Pursuant to 18 U.S.C."]) == [1]
    assert repeats(["", "", "x"]) == [1]


# -- fill_hits (multi, level) ----------------------------------------------------------------------
def _hit(node_id: str, text: str, n_tokens: int) -> Hit:
    return Hit(node_id, 0, 1.0, text, ("d",), n_tokens)


def test_fill_hits_skips_a_repeat_and_gives_its_budget_to_the_next_hit() -> None:
    hits = [_hit("c1", CERT, 60), _hit("c2", CERT, 60), _hit("r", REVENUE, 30), _hit("s", STORES, 30)]
    assert [h.node_id for h in fill_hits(hits, 120, 5)] == ["c1", "r", "s"]
    assert [h.node_id for h in fill_hits(hits, None, 3)] == ["c1", "r", "s"]


# -- Index.fill (every mode that fills best-first through the index) -----------------------------------
class FakeVectors:
    """The arrays Index.fill and Index.hit read, for hand-made nodes."""

    def __init__(self, nodes: list[tuple[str, str, int]]) -> None:
        self.node_ids = [n for n, _, _ in nodes]
        self.texts = [t for _, t, _ in nodes]
        self.n_tokens = np.array([k for _, _, k in nodes], dtype=np.int64)
        self.levels = np.zeros(len(nodes), dtype=np.int32)
        self.doc_ids = [("d",)] * len(nodes)
        self.row_of = {n: i for i, n in enumerate(self.node_ids)}

    def __len__(self) -> int:
        return len(self.node_ids)


def _index(nodes: list[tuple[str, str, int]]) -> Index:
    index = object.__new__(Index)
    index.vectors = FakeVectors(nodes)  # type: ignore[assignment]
    return index


NODES = [("cert-10q", CERT, 60), ("cert-906", CERT.replace(" ", "  "), 60), ("revenue", REVENUE, 30), ("stores", STORES, 30),
         ("cert-near", CERT.replace("committee.", "committee"), 60)]


@pytest.mark.parametrize("ordered", [False, True])
def test_index_fill_packs_distinct_texts(ordered: bool) -> None:
    rows = np.arange(len(NODES))
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    hits = _index(NODES).fill(rows, scores, 120, 5, ordered=ordered)
    # without the check: cert-10q + cert-906 fill 120 tokens with one passage twice
    assert [h.node_id for h in hits] == ["cert-10q", "revenue", "stores"]
    assert sum(h.n_tokens for h in hits) == 120


def test_index_fill_k_best_are_distinct() -> None:
    hits = _index(NODES).fill(np.arange(len(NODES)), np.array([0.9, 0.8, 0.7, 0.6, 0.5]), None, 3)
    assert [h.node_id for h in hits] == ["cert-10q", "revenue", "stores"]


def test_index_fill_same_node_twice_among_candidates_is_kept_once() -> None:
    rows = np.array([2, 0, 2, 3])
    hits = _index(NODES).fill(rows, np.array([0.9, 0.8, 0.1, 0.7]), 200, 5)
    assert [h.node_id for h in hits] == ["revenue", "cert-10q", "stores"]
    assert hits[0].score == pytest.approx(0.9)


def test_index_fill_without_repeats_is_unchanged() -> None:
    nodes = [NODES[0], NODES[2], NODES[3]]
    hits = _index(nodes).fill(np.arange(3), np.array([0.5, 0.9, 0.7]), 100, 5)
    assert [h.node_id for h in hits] == ["revenue", "stores"]  # cert (60) no longer fits in 100 - 60
