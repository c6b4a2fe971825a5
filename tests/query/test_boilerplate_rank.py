"""Candidates down-weighted by their boilerplate share (``query/boilerplate.py``) over a real
published snapshot: a repeated disclaimer and a unique relevant leaf with the same raw score."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers.query import FakeQueryEmbedder, publish_snapshot, unit

from arborag.config import SparseConfig
from arborag.query import open_index
from arborag.query.boilerplate import downweight
from arborag.storage.corpus import Corpus
from arborag.storage.schemas import BOILERPLATE
from arborag.storage.tables import write_table

# "disc" comes first, so with equal scores the fill takes it first when nothing down-weights it
SPEC = [
    ("disc", 0, unit(1, 0, 0, 0), 40, ["d1"]),
    ("rel", 0, unit(1, 0, 0, 0), 40, ["d2"]),
    ("far", 0, unit(0, 1, 0, 0), 40, ["d3"]),
]


def _open(tmp_path: Path, shares: dict[str, float] | None):
    corpus = Corpus(tmp_path / "c")
    corpus.ensure()
    snap = publish_snapshot(corpus, f"snap-{tmp_path.name}", spec=SPEC, edges_spec=[], text="alpha text of {}", sparse=SparseConfig())
    if shares is not None:
        write_table("boilerplate", pa.Table.from_pylist([{"node_id": n, "share": s} for n, s in shares.items()], schema=BOILERPLATE),
                    snap / "boilerplate.parquet")
    return open_index(corpus.root, embed_query=FakeQueryEmbedder())


@pytest.mark.parametrize("mode", ["collapsed", "sparse", "hybrid", "auto", "hop"])
def test_a_repeated_disclaimer_ranks_below_a_unique_leaf_with_the_same_score(tmp_path: Path, mode: str) -> None:
    plain = _open(tmp_path / "plain", None)
    weighted = _open(tmp_path / "weighted", {"disc": 1.0, "rel": 0.0, "far": 0.0})
    try:
        before = [h.node_id for h in plain.search("alpha", mode=mode, budget=40)]
        after = [h.node_id for h in weighted.search("alpha", mode=mode, budget=40)]
        assert before == ["disc"] and after == ["rel"]
    finally:
        plain.close()
        weighted.close()


def test_a_snapshot_without_the_file_answers_as_before(tmp_path: Path) -> None:
    idx = _open(tmp_path, None)
    try:
        rows, scores = np.array([0, 1, 2]), np.array([0.9, -0.4, 0.2])
        assert downweight(idx, rows, scores) is scores
        hits = idx.search("alpha", mode="collapsed", budget=120)
        assert [h.node_id for h in hits] == ["disc", "rel", "far"] and hits[0].score == hits[1].score
    finally:
        idx.close()


def test_the_penalty_lowers_positive_and_negative_scores_in_proportion(tmp_path: Path) -> None:
    idx = _open(tmp_path, {"disc": 1.0, "rel": 0.5, "far": 0.0})
    try:
        rows = np.array([0, 1, 2, 0])
        out = downweight(idx, rows, np.array([2.0, 2.0, 2.0, -1.0]), weight=0.5)
        assert out.tolist() == [1.0, 1.5, 2.0, -1.5]
    finally:
        idx.close()
