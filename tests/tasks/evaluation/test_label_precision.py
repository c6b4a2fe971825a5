"""Label precision (tasks/evaluation/labels.py) worked out by hand on a small tree."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest

from arborag.storage.schemas import EDGES, NODES
from arborag.tasks.evaluation.labels import label_precision, sibling_pairs

LEAVES = {"a": "apples and pears", "b": "apples again", "c": "a ship of pears", "d": "the ship sails", "e": "harbour and ship", "f": "nothing here"}
EDGES_SPEC = [("s1", "a"), ("s1", "b"), ("s1", "c"), ("s2", "d"), ("s2", "e"), ("s2", "f"), ("r", "s1"), ("r", "s2")]


def frames(keywords: dict[str, list[str] | None]) -> tuple[pl.DataFrame, pl.DataFrame]:
    rows = [{"node_id": i, "level": 0, "text": t, "n_tokens": 3, "doc_ids": ["d"], "summarizer": "leaf", "summary_status": "leaf"} for i, t in LEAVES.items()]
    rows += [{"node_id": i, "level": lv, "text": "summary", "n_tokens": 1, "doc_ids": ["d"], "summarizer": "x", "summary_status": "ok",
              "keywords": keywords.get(i)} for i, lv in (("s1", 1), ("s2", 1), ("r", 2))]
    edges = [{"parent_id": p, "child_id": c, "probability": 1.0, "level": 2 if p == "r" else 1} for p, c in EDGES_SPEC]
    return pl.from_arrow(pa.Table.from_pylist(rows, schema=NODES)), pl.from_arrow(pa.Table.from_pylist(edges, schema=EDGES))  # type: ignore[return-value]


def test_own_and_sibling_shares_by_hand() -> None:
    nodes, edges = frames({"s1": ["apple", "pear"], "s2": ["ship", "harbour"], "r": ["apple", "ship"]})
    got = label_precision(nodes, edges)
    # s1: own = a, b, c contain apple|pear -> 3/3; s2's keywords (ship|harbour) on s1's leaves: c -> 1/3
    # s2: own = d, e -> 2/3; s1's keywords on s2's leaves: none -> 0
    assert got["clusters"] == 2  # r has no sibling
    assert got["own"] == pytest.approx((1 + 2 / 3) / 2, abs=1e-4)
    assert got["siblings"] == pytest.approx((1 / 3 + 0) / 2, abs=1e-4)
    assert got["margin"] == pytest.approx(got["own"] - got["siblings"], abs=1e-4)
    assert got["wins"] == 1.0 and set(got["by_level"]) == {1}


def test_swapped_keywords_give_a_negative_margin_and_no_labels_give_none() -> None:
    nodes, edges = frames({"s1": ["ship", "harbour"], "s2": ["apple", "pear"]})
    assert label_precision(nodes, edges)["margin"] < 0
    nodes, edges = frames({})
    assert label_precision(nodes, edges) == {"clusters": 0, "own": None, "siblings": None, "margin": None, "wins": None, "by_level": {}}


def test_parentless_nodes_of_a_level_are_siblings() -> None:
    nodes, edges = frames({})
    pairs = sibling_pairs(nodes, edges.filter(pl.col("parent_id") != "r"))
    assert sorted(pairs.iter_rows()) == [("s1", "s2"), ("s2", "s1")]


def test_eval_chunk_stats_carry_label_precision_and_the_report_shows_it(tmp_path) -> None:
    from helpers.query import publish_labelled

    from arborag.storage.corpus import Corpus
    from arborag.tasks.evaluation.report import _label_text
    from arborag.tasks.evaluation.stats import chunk_stats

    corpus = Corpus(tmp_path / "c").ensure()
    publish_labelled(corpus, "snap-l")
    p = chunk_stats(corpus.root, "sentence")["label_precision"]
    assert p["clusters"] == 2 and p["own"] == 1.0 and p["margin"] > 0.5 and "by_level" not in p
    assert _label_text(p) == f"1.00 / {p['siblings']:.2f} ({p['margin']:+.2f}, 2 clusters)"
    assert _label_text(None) == "–" and _label_text({"clusters": 0}) == "–"
