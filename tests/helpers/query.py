"""A hand-made snapshot for the query tests: nine nodes in a three-level tree, real storage
functions (Parquet + LanceDB + the sparse index), and a fake query embedder.

Every expected hit can be worked out by hand: the query embedder maps a query word to a fixed
unit vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from arborag.config import SparseConfig
from arborag.storage.corpus import Corpus
from arborag.storage.schemas import EDGES, LINKS, NODES
from arborag.storage.sparse import build_sparse_index
from arborag.storage.tables import write_table
from arborag.storage.vectors import write_vectors

DIM = 4


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


# leaves a..f, two summaries s1 (a,b,c) and s2 (d,e,f), one root r (s1, s2)
NODES_SPEC = [
    ("a", 0, unit(1, 0, 0, 0), 40, ["d1"]),
    ("b", 0, unit(0.9, 0.1, 0, 0), 40, ["d1"]),
    ("c", 0, unit(0.7, 0.3, 0, 0), 40, ["d1"]),
    ("d", 0, unit(0, 1, 0, 0), 40, ["d2"]),
    ("e", 0, unit(0, 0.9, 0.1, 0), 40, ["d2"]),
    ("f", 0, unit(0, 0, 1, 0), 40, ["d2"]),
    ("s1", 1, unit(0.95, 0.05, 0, 0), 60, ["d1"]),
    ("s2", 1, unit(0, 0.7, 0.3, 0), 60, ["d2"]),
    ("r", 2, unit(0.5, 0.5, 0.2, 0), 80, ["d1", "d2"]),
]
EDGES_SPEC = [("s1", c, 1.0, 1) for c in "abc"] + [("s2", c, 1.0, 1) for c in "def"] + [("r", "s1", 1.0, 2), ("r", "s2", 1.0, 2)]


class FakeQueryEmbedder:
    """Test double: maps known query words to fixed vectors."""

    table = {"alpha": unit(1, 0, 0, 0), "beta": unit(0, 1, 0, 0), "gamma": unit(0, 0, 1, 0)}

    def __call__(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


def nodes_table(spec: list[tuple[str, int, np.ndarray, int, list[str]]] = NODES_SPEC, text: str = "text of {}") -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"node_id": i, "level": lvl, "text": text.format(i), "n_tokens": nt, "doc_ids": docs,
             "summary_of": None, "summarizer": "leaf" if lvl == 0 else "fake", "summary_status": "leaf" if lvl == 0 else "ok",
             "created_by_run": "t"}
            for i, lvl, _, nt, docs in spec
        ],
        schema=NODES,
    )


def publish_snapshot(
    corpus: Corpus,
    snapshot_id: str,
    *,
    spec: list[tuple[str, int, np.ndarray, int, list[str]]] = NODES_SPEC,
    edges_spec: list[tuple[str, str, float, int]] = EDGES_SPEC,
    text: str = "text of {}",
    info: dict[str, Any] | None = None,
    sparse: SparseConfig | None = None,
) -> Path:
    """Write nodes, edges, vectors (and a sparse index when ``sparse`` is given) and publish."""
    nodes = nodes_table(spec, text)
    edges = pa.Table.from_pylist([{"parent_id": p, "child_id": c, "probability": pr, "level": lv} for p, c, pr, lv in edges_spec], schema=EDGES)
    partial = corpus.partial_dir(snapshot_id)
    write_table("nodes", nodes, partial / "nodes.parquet")
    write_table("edges", edges, partial / "edges.parquet")
    write_vectors(partial / "vectors.lance", nodes, np.stack([v for _, _, v, _, _ in spec]))
    if sparse is not None:
        build_sparse_index(nodes, partial / "sparse", sparse, snapshot_id=snapshot_id)
    return corpus.publish(partial, snapshot_id, {"build_key": "k", "corpus_name": "c", **(info or {})})


LABELLED_TEXTS = {"a": "apple orchards", "b": "apples and pears", "c": "the apple harvest", "d": "a ship in harbour", "e": "the ship sails",
                  "f": "harbour lights", "s1": "About fruit.", "s2": "About ships.", "r": "Fruit and ships."}


def publish_labelled(corpus: Corpus, sid: str) -> None:
    """Publish the nine-node tree of NODES_SPEC/EDGES_SPEC as snapshot ``sid``, labelled by
    :func:`label_nodes` over word texts (fruit under s1, ships under s2)."""
    from arborag.tasks.summarize.labels import label_nodes

    nodes = pa.Table.from_pylist(
        [{"node_id": i, "level": lvl, "text": LABELLED_TEXTS[i], "n_tokens": nt, "doc_ids": docs, "summarizer": "leaf" if lvl == 0 else "x",
          "summary_status": "leaf" if lvl == 0 else "ok", "created_by_run": "t"} for i, lvl, _, nt, docs in NODES_SPEC], schema=NODES)
    edges = pa.Table.from_pylist([{"parent_id": p, "child_id": c, "probability": pr, "level": lv} for p, c, pr, lv in EDGES_SPEC], schema=EDGES)
    nodes = label_nodes(nodes, edges)
    partial = corpus.partial_dir(sid)
    write_table("nodes", nodes, partial / "nodes.parquet")
    write_table("edges", edges, partial / "edges.parquet")
    write_vectors(partial / "vectors.lance", nodes, np.stack([v for _, _, v, _, _ in NODES_SPEC]))
    corpus.publish(partial, sid, {"build_key": "k", "corpus_name": "c"})


#: The hop tests' snapshot: leaf a (document d1) names "delta works", the title of d2 (leaves d, e).
HOP_SPEC = [
    ("a", 0, unit(1, 0, 0, 0), 40, ["d1"]),
    ("b", 0, unit(0.99, 0.1, 0, 0), 40, ["d1"]),
    ("c", 0, unit(0.6, 0, 0.8, 0), 40, ["d3"]),
    ("d", 0, unit(0, 0.1, 0, 1), 40, ["d2"]),
    ("e", 0, unit(0, 0, 0.1, 1), 40, ["d2"]),
]
HOP_LINK_ROWS = [("a", "d1", "delta works", "mention"), ("d", "d2", "delta works", "title"), ("e", "d2", "delta works", "title")]


def links_table(rows: Sequence[tuple[Any, ...]]) -> pa.Table:
    """A ``links`` table of (node_id, doc_id, entity, kind[, weight]) rows, every entity in 2 documents
    (weight ln(3/2), the IDF of 2 of 3 documents, unless the row gives one)."""
    return pa.Table.from_pylist([{"node_id": r[0], "doc_id": r[1], "entity": r[2], "kind": r[3], "df": 2,
                                  "weight": r[4] if len(r) > 4 else float(np.log(3 / 2))} for r in rows], schema=LINKS)

