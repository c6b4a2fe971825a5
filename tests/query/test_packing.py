"""Segment packing (``query/packing.py``) on hand-made rankings: a table split over adjacent
leaves of a long document enters the context whole, trimmed at its weaker end when the budget is
short; short documents and runs that are not there leave the best-first fill as it was."""

from __future__ import annotations

import numpy as np
import pytest

from arborag.query.packing import pack_rows, relevance
from arborag.query.rse import RSEParams

PARAMS = RSEParams(max_length=8, overall_max_length=30, minimum_value=0.5, irrelevant_chunk_penalty=0.18, decay_rate=30)
LONG = np.arange(100, 120, dtype=np.int64)  # a filing: 20 leaves, rows 100..119 in document order
SIZES = np.full(200, 10, dtype=np.int64)  # every leaf 10 tokens


def _rank(rows: list[int], scores: list[float]):
    position = [("long", int(r) - 100) if 100 <= r < 120 else None for r in rows]
    return np.asarray(rows, dtype=np.int64), np.asarray(scores, dtype=np.float64), position


def test_the_rows_beside_the_best_leaf_come_with_it() -> None:
    # the table's header row (105) ranks first, its figures (106, 107) below two other leaves
    rows, scores, position = _rank([105, 7, 8, 106, 107, 9], [3.0, 2.0, 1.9, 1.6, 1.5, 0.0])
    got = pack_rows(rows, scores, position, {"long": LONG}, SIZES, 30, params=PARAMS)
    assert got == [105, 106, 107]


def test_without_room_for_the_whole_run_its_weaker_end_is_dropped() -> None:
    rows, scores, position = _rank([105, 7, 8, 106, 107, 9], [3.0, 2.0, 1.9, 1.6, 1.5, 0.0])
    assert pack_rows(rows, scores, position, {"long": LONG}, SIZES, 20, params=PARAMS) == [105, 106]


def test_the_budget_left_after_the_runs_is_filled_best_first() -> None:
    rows, scores, position = _rank([105, 7, 8, 106, 107, 9], [3.0, 2.0, 1.9, 1.6, 1.5, 0.0])
    assert pack_rows(rows, scores, position, {"long": LONG}, SIZES, 50, params=PARAMS) == [105, 106, 107, 7, 8]


def test_a_short_document_forms_no_run() -> None:
    short = np.arange(100, 110, dtype=np.int64)  # 10 leaves < 2 x max_length: the document itself, not a part of it
    rows, scores, _ = _rank([105, 7, 8, 106, 107, 9], [3.0, 2.0, 1.9, 1.6, 1.5, 0.0])
    position = [("short", int(r) - 100) if 100 <= r < 110 else None for r in rows.tolist()]
    assert pack_rows(rows, scores, position, {"short": short}, SIZES, 30, params=PARAMS) is None


def test_leaves_without_a_place_leave_the_fill_to_the_caller() -> None:
    rows = np.asarray([7, 8, 9], dtype=np.int64)
    assert pack_rows(rows, np.asarray([3.0, 2.0, 1.0]), [None, None, None], {}, SIZES, 30, params=PARAMS) is None


def test_relevance_is_scaled_to_the_unit_interval() -> None:
    assert relevance(np.array([2.0, 0.0, 1.0])).tolist() == [1.0, 0.0, 0.5]
    assert relevance(np.array([4.0, 4.0])).tolist() == [1.0, 1.0]
    assert relevance(np.zeros(0)).size == 0


@pytest.mark.parametrize("budget", [10, 25])
def test_a_run_never_overflows_the_budget(budget: int) -> None:
    rows, scores, position = _rank([105, 106, 107, 108, 7], [3.0, 2.9, 2.8, 2.7, 0.0])
    got = pack_rows(rows, scores, position, {"long": LONG}, SIZES, budget, params=PARAMS)
    assert got is not None and sum(int(SIZES[r]) for r in got) <= budget and got[0] == 105


def test_a_run_carries_only_leaves_of_the_ranking() -> None:
    # 106 is not a candidate (a filter or an earlier fill left it out): the run bridges it but does not bring it back
    rows, scores, position = _rank([105, 7, 8, 107, 9], [3.0, 2.0, 1.9, 1.6, 0.0])
    got = pack_rows(rows, scores, position, {"long": LONG}, SIZES, 30, params=PARAMS)
    assert got == [105, 107, 7]


class FakePackVectors:
    """Test double of an index's vector store: 20 leaves of a filing, then 3 leaves of a note."""

    bounded = False

    def __init__(self) -> None:
        self.node_ids = [f"long{i}" for i in range(20)] + ["note0", "note1", "note2"]
        self.levels = np.zeros(23, dtype=np.int64)
        self.n_tokens = np.full(23, 10, dtype=np.int64)
        self.row_of = {n: i for i, n in enumerate(self.node_ids)}


class FakePackIndex:
    """Test double of an index: the vector store above, its chunk layout, hits by row."""

    def __init__(self) -> None:
        self.vectors = FakePackVectors()

    def leaf_chunks(self):
        import pyarrow as pa

        ids = self.vectors.node_ids
        return pa.table({"chunk_id": ids, "doc_id": ["long"] * 20 + ["note"] * 3,
                         "ordinal": list(range(20)) + [0, 1, 2], "start_char": [i * 10 for i in range(23)],
                         "end_char": [i * 10 + 10 for i in range(23)]})

    def hit(self, row: int, score: float):
        from arborag.query.hits import Hit

        v = self.vectors
        return Hit(v.node_ids[row], 0, score, f"text of {v.node_ids[row]}", ("long" if row < 20 else "note",), int(v.n_tokens[row]))

    def fill(self, rows, scores, budget, k):  # the plain fill: best first while it fits
        order = np.lexsort((rows, -np.asarray(scores)))
        return [self.hit(int(rows[i]), float(scores[i])) for i in order[: k if budget is None else budget // 10]]


def test_the_default_modes_pack_the_run_of_the_filing() -> None:
    from arborag.query.packing import pack

    index = FakePackIndex()
    rows = np.arange(23, dtype=np.int64)
    scores = np.full(23, -1.0)
    scores[[5, 20, 21, 6, 7]] = [3.0, 2.0, 1.9, 1.6, 1.5]
    assert [h.node_id for h in pack(index, rows, scores, 30, 5)] == ["long5", "long6", "long7"]
    assert [h.node_id for h in index.fill(rows, scores, 30, 5)] == ["long5", "note0", "note1"]  # best-first
    assert [h.node_id for h in pack(index, rows, scores, None, 2)] == ["long5", "note0"]  # no budget: the k best
