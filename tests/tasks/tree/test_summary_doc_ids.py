"""A summary's doc_ids are the union of its children's, recomputed after an update (tasks/tree/frames.py)."""

from __future__ import annotations

import pyarrow as pa

from arborag.storage.schemas import EDGES, NODES
from arborag.tasks.tree.frames import summary_doc_ids


def _nodes(rows: list[tuple[str, int, list[str]]]) -> pa.Table:
    return pa.Table.from_pylist([{"node_id": i, "level": lv, "text": f"text {i}", "n_tokens": 2, "doc_ids": d, "summary_of": None,
                                  "summarizer": "x", "summary_status": "ok", "created_by_run": "r"} for i, lv, d in rows], schema=NODES)


def test_a_leafs_new_documents_reach_every_summary_above_it() -> None:
    # leaf "a" now stands for a text that also occurs in d3; s and t were kept with the old doc ids
    nodes = _nodes([("a", 0, ["d1", "d3"]), ("b", 0, ["d2"]), ("c", 0, ["d4"]), ("s", 1, ["d1", "d2"]), ("r", 1, ["d4"]),
                    ("t", 2, ["d1", "d2", "d4"])])
    edges = pa.Table.from_pylist([
        {"parent_id": "s", "child_id": "a", "probability": 1.0, "level": 1}, {"parent_id": "s", "child_id": "b", "probability": 0.4, "level": 1},
        {"parent_id": "r", "child_id": "c", "probability": 1.0, "level": 1},
        {"parent_id": "t", "child_id": "s", "probability": 1.0, "level": 2}, {"parent_id": "t", "child_id": "r", "probability": 1.0, "level": 2},
    ], schema=EDGES)
    out = summary_doc_ids(nodes, edges)
    assert out.schema == NODES
    assert dict(zip(out.column("node_id").to_pylist(), out.column("doc_ids").to_pylist())) == {
        "a": ["d1", "d3"], "b": ["d2"], "c": ["d4"], "s": ["d1", "d2", "d3"], "r": ["d4"], "t": ["d1", "d2", "d3", "d4"]}
    assert out.drop_columns(["doc_ids"]).equals(nodes.drop_columns(["doc_ids"]))  # nothing else moves


def test_a_tree_already_consistent_is_unchanged() -> None:
    nodes = _nodes([("a", 0, ["d1"]), ("b", 0, ["d2"]), ("s", 1, ["d1", "d2"])])
    edges = pa.Table.from_pylist([{"parent_id": "s", "child_id": c, "probability": 1.0, "level": 1} for c in ("a", "b")], schema=EDGES)
    assert summary_doc_ids(nodes, edges).equals(nodes)
