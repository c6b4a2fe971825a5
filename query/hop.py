"""``hop``: multi-hop retrieval through the links between leaves (docs/METHODS.md §9.2), offline.

A bridge question ("Who directed the film shot in Leland in 1986?") names the first paragraph
but not the second: the second is reached through the first, which names it. The ``links``
table of the snapshot (``tasks/links.py``: leaves linked to their document's title and to the
capitalised names they mention, weighted by IDF) is that path. This mode:

1. scores every leaf as ``auto`` does (dense cosine ⊕ BM25, z-score fusion, document routing:
   :mod:`arborag.query.routing`; ``f``);
2. takes the ``seeds`` best leaves as the first hop, each weighted ``exp(f_s − f_best)``;
3. walks the links from them (``walk``):

   - ``hop`` — one explicit hop: entity activation ``a_e = Σ_s w_s · idf_e`` over the seeds'
     links, then every leaf ``t`` linked to an activated entity scores ``h_t = Σ_e a_e``; leaves
     of the seeds' own documents get nothing from the walk (they are there already);
   - ``tree`` — co-membership instead of links: every leaf sharing a level-1 cluster with a seed
     scores the summed weight of the seeds in its clusters (the tree's clusters as the links;
     the structure we already pay for);
   - ``ppr`` — Personalized PageRank over leaves + entities (HippoRAG 2's recipe, with our
     graph): restart on the seeds with probability ``1 − damping``, leaf → entity by IDF,
     entity → leaf uniformly, ``iterations`` steps; ``h`` is the leaves' visiting probability
     (seeds' documents excluded as above);

4. adds the walk to the first-hop ranking: ``f + hop_weight · h / max(h)`` and fills the budget:
   runs of adjacent leaves of long documents first, then best-first (``pack="segments"``,
   :mod:`arborag.query.packing`), or best-first only (``pack="best"``, :meth:`Index.fill`). With no links (a snapshot built before the stage, or a
   corpus whose names link nothing) it is exactly ``auto``.

``kinds`` picks the link kinds a walk may arrive through (``all``, or ``title``: only into the
document a seed names). The graph is read once per snapshot and kept with the index
(:func:`link_graph`). A bounded index (``query.ann_min_rows`` rows or more) never builds that
graph for ``walk="hop"``: the walk is computed from the candidates' links alone, read from a
copy of the links by row in the corpus cache, by positioned reads (:func:`candidate_hop_scores`, :func:`link_rows`) —
the same scores, since the walk's score is only read at the candidates.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from arborag.errors import QueryError
from arborag.query.fusion import FUSIONS
from arborag.query.options import HopOptions
from arborag.query.packing import pack
from arborag.query.routing import route

if TYPE_CHECKING:  # pragma: no cover
    from arborag.query.hits import Hit
    from arborag.storage.link_rows import LinkRows
    from arborag.query.index import Index

__all__ = ["DEFAULTS", "LinkGraph", "hop_scores", "link_graph", "load_link_graph", "search", "tree_scores"]

DEFAULTS: dict[str, Any] = HopOptions().model_dump()


@dataclass(frozen=True)
class LinkGraph:
    """The links of one snapshot as arrays over vector rows: edge ``i`` joins leaf row
    ``row[i]`` to entity ``ent[i]`` (weight ``weight[i]`` = the entity's IDF, ``title[i]``: a
    title link). ``by_row`` / ``by_ent``: edge positions sorted by row / by entity, with
    ``row_ptr`` / ``ent_ptr`` the start of each row's / entity's run (CSR)."""

    row: np.ndarray
    ent: np.ndarray
    weight: np.ndarray
    title: np.ndarray
    doc: np.ndarray  # per vector row: a document code (-1 for summaries)
    n_rows: int
    n_ents: int
    by_row: np.ndarray
    row_ptr: np.ndarray
    by_ent: np.ndarray
    ent_ptr: np.ndarray

    @property
    def n_edges(self) -> int:
        return int(self.row.size)


_GRAPHS: "weakref.WeakKeyDictionary[Any, dict[bool, LinkGraph]]" = weakref.WeakKeyDictionary()
_LINK_ROWS: "weakref.WeakKeyDictionary[Any, LinkRows]" = weakref.WeakKeyDictionary()


def load_link_graph(path: Path, node_ids: Sequence[str], doc_ids: Sequence[Sequence[str]], *, titled_only: bool = False) -> LinkGraph:
    """The :class:`LinkGraph` of the links table at ``path`` over vector rows ``node_ids``
    (a node not among them is dropped); an absent file is a graph with no edges.
    ``titled_only``: only the entities some document is titled by (all a ``kinds="title"`` hop
    can arrive through; the same scores from a fraction of the rows)."""
    n = len(node_ids)
    if not path.exists():  # a snapshot built before the links stage: no walk, exactly auto
        empty = np.zeros(0, dtype=np.int64)
        return LinkGraph(row=empty, ent=empty, weight=np.zeros(0), title=np.zeros(0, dtype=bool), doc=np.full(n, -1, dtype=np.int64),
                         n_rows=n, n_ents=0, by_row=empty, row_ptr=np.zeros(n + 1, dtype=np.int64), by_ent=empty,
                         ent_ptr=np.zeros(1, dtype=np.int64))
    import polars as pl

    nodes = pl.DataFrame({"node_id": list(node_ids), "doc": [d[0] if d else "" for d in doc_ids]}).with_row_index("row")
    doc_code = nodes.get_column("doc").rank("dense").cast(pl.Int64).to_numpy() - 1
    links = pl.scan_parquet(path).select("node_id", "entity", "kind", "weight")
    if titled_only:
        links = links.join(links.filter(pl.col("kind") == "title").select("entity").unique(), on="entity", how="semi")
    edges = (
        links.join(nodes.lazy().select("node_id", "row"), on="node_id", how="inner")
        .select(pl.col("row").cast(pl.Int64), (pl.col("entity").rank("dense").cast(pl.Int64) - 1).alias("ent"),
                pl.col("weight").cast(pl.Float64), (pl.col("kind") == "title").alias("title"))
        .collect()
    )
    row = edges.get_column("row").to_numpy()
    ent = edges.get_column("ent").to_numpy()
    n_ents = int(ent.max()) + 1 if ent.size else 0
    by_row = np.argsort(row, kind="stable")
    by_ent = np.argsort(ent, kind="stable")
    return LinkGraph(
        row=row, ent=ent, weight=edges.get_column("weight").to_numpy(), title=edges.get_column("title").to_numpy(),
        doc=doc_code, n_rows=n, n_ents=n_ents,
        by_row=by_row, row_ptr=np.searchsorted(row[by_row], np.arange(n + 1)),
        by_ent=by_ent, ent_ptr=np.searchsorted(ent[by_ent], np.arange(n_ents + 1)),
    )


def link_graph(index: Index, *, titled_only: bool = False) -> LinkGraph:
    """The link graph of ``index``'s snapshot (``links.parquet``), read once per index (and form)."""
    graphs = _GRAPHS.setdefault(index, {})
    if titled_only not in graphs:
        v = index.vectors
        graphs[titled_only] = load_link_graph(index.snapshot_dir / "links.parquet", v.node_ids, v.doc_ids, titled_only=titled_only)
    return graphs[titled_only]


def link_rows(index: Index) -> "LinkRows":
    """The links of ``index``'s snapshot by vector row (:mod:`arborag.storage.link_rows`;
    written into the corpus cache on first use), kept with the index."""
    from arborag.storage.link_rows import LinkRows, link_rows_path

    got = _LINK_ROWS.get(index)
    if got is None:
        path = link_rows_path(index.corpus.cache_dir, index.snapshot)
        got = LinkRows.open_or_write(index.snapshot_dir / "links.parquet", path, index.vectors.node_id_column)
        _LINK_ROWS[index] = got
    return got


def candidate_hop_scores(links: "LinkRows", index: Index, rows: np.ndarray, scores: np.ndarray, *, seeds: int,
                         kinds: str = "title") -> np.ndarray:
    """The ``hop`` walk of :func:`hop_scores` computed from the links of the candidates alone:
    the seeds' links activate entities, and a candidate scores the activation of the entities it
    is linked to (through a title link for ``kinds="title"``). The walk's score is only ever read
    at the candidates, so this is the same score without the graph of every link (a bounded
    index: :meth:`LinkRows.links_of` reads the candidates' links from the file by positioned reads)."""
    h = np.zeros(rows.size, dtype=np.float64)
    if links.n_edges == 0 or rows.size == 0 or seeds <= 0:
        return h
    m = min(seeds, rows.size)
    top = np.argpartition(-scores, m - 1)[:m]
    w = np.exp(scores[top] - scores[top].max())
    seed = links.links_of(rows[top])
    if seed.ent.size == 0:
        return h
    ents, inverse = np.unique(seed.ent, return_inverse=True)
    act = np.bincount(inverse, weights=w[seed.pos] * seed.weight, minlength=ents.size)
    cand = links.links_of(rows)
    t_pos, t_ent = cand.pos, cand.ent
    if kinds == "title":
        t_pos, t_ent = t_pos[cand.title], t_ent[cand.title]
    at = np.searchsorted(ents, t_ent)
    at_ok = at < ents.size
    found = np.zeros(t_ent.size, dtype=bool)
    found[at_ok] = ents[at[at_ok]] == t_ent[at_ok]
    h = np.bincount(t_pos[found], weights=act[at[found]], minlength=rows.size).astype(np.float64)
    docs = index.vectors.doc_ids
    seed_docs = {docs[int(r)][0] for r in rows[top] if docs[int(r)]}
    if seed_docs:
        for i in np.flatnonzero(h):  # the seeds' own documents get nothing from the walk
            d = docs[int(rows[i])]
            if d and d[0] in seed_docs:
                h[i] = 0.0
    top_h = h.max()
    return h / top_h if top_h > 0 else h


def _in_docs(doc: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Rows whose document code is one of ``docs`` (codes are small ints; -1 = no document)."""
    lookup = np.zeros(int(doc.max(initial=-1)) + 2, dtype=bool)
    lookup[docs[docs >= 0] + 1] = True
    return lookup[doc + 1]


def _edges_of(ptr: np.ndarray, order: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Edge positions of every id in ``ids`` (CSR runs concatenated)."""
    starts, ends = ptr[ids], ptr[ids + 1]
    lengths = ends - starts
    if lengths.sum() == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
    return order[offsets + np.arange(int(lengths.sum()))]


def hop_scores(graph: LinkGraph, rows: np.ndarray, scores: np.ndarray, *, seeds: int, walk: str = "hop",
               kinds: str = "all", damping: float = 0.5, iterations: int = 10) -> np.ndarray:
    """The walk's score of every candidate in ``rows`` (aligned), in [0, 1] (the best is 1;
    0 with no links reached). ``scores`` rank the candidates (the first hop)."""
    h = np.zeros(rows.size, dtype=np.float64)
    if graph.n_edges == 0 or rows.size == 0 or seeds <= 0:
        return h
    m = min(seeds, rows.size)
    top = np.argpartition(-scores, m - 1)[:m]
    seed_rows = rows[top]
    w = np.exp(scores[top] - scores[top].max())
    seed_docs = np.unique(graph.doc[seed_rows])
    if walk == "ppr":
        by_row = _ppr(graph, seed_rows, w, damping=damping, iterations=iterations, kinds=kinds)
    else:
        e = _edges_of(graph.row_ptr, graph.by_row, seed_rows)
        wt = np.repeat(w, graph.row_ptr[seed_rows + 1] - graph.row_ptr[seed_rows])
        act = np.bincount(graph.ent[e], weights=wt * graph.weight[e], minlength=graph.n_ents)
        ents = np.flatnonzero(act)
        t = _edges_of(graph.ent_ptr, graph.by_ent, ents)
        if kinds == "title":
            t = t[graph.title[t]]
        by_row = np.bincount(graph.row[t], weights=act[graph.ent[t]], minlength=graph.n_rows)
    by_row[_in_docs(graph.doc, seed_docs)] = 0.0
    h = by_row[rows]
    top_h = h.max() if h.size else 0.0
    return h / top_h if top_h > 0 else h


def _ppr(graph: LinkGraph, seed_rows: np.ndarray, w: np.ndarray, *, damping: float, iterations: int, kinds: str) -> np.ndarray:
    """Personalized PageRank over the bipartite leaf-entity graph; the leaves' visit mass."""
    out_w = np.bincount(graph.row, weights=graph.weight, minlength=graph.n_rows)  # leaf -> entity by IDF
    arrive = graph.title if kinds == "title" else np.ones(graph.n_edges, dtype=bool)
    ent_deg = np.bincount(graph.ent[arrive], minlength=graph.n_ents).astype(np.float64)  # entity -> leaf uniform
    restart = np.zeros(graph.n_rows)
    np.add.at(restart, seed_rows, w / w.sum())
    p = restart.copy()
    visits = np.zeros(graph.n_rows)
    with np.errstate(divide="ignore", invalid="ignore"):
        step_w = np.where(out_w[graph.row] > 0, graph.weight / out_w[graph.row], 0.0)
        arrive_w = np.where(arrive, 1.0 / np.maximum(ent_deg[graph.ent], 1.0), 0.0)
    for _ in range(iterations):
        ent_mass = np.bincount(graph.ent, weights=p[graph.row] * step_w, minlength=graph.n_ents)
        leaf = np.bincount(graph.row, weights=ent_mass[graph.ent] * arrive_w, minlength=graph.n_rows)
        p = (1 - damping) * restart + damping * leaf
        visits += leaf
    return visits


def tree_scores(index: Index, rows: np.ndarray, scores: np.ndarray, *, seeds: int) -> np.ndarray:
    """The ``tree`` walk: per candidate, the seeds' weight reaching it through a shared
    level-1 cluster (0..1; the seeds' own documents get 0)."""
    parents, children = index.edge_rows
    v = index.vectors
    h = np.zeros(rows.size)
    if parents.size == 0 or rows.size == 0 or seeds <= 0:
        return h
    m = min(seeds, rows.size)
    top = np.argpartition(-scores, m - 1)[:m]
    w_row = np.zeros(len(v))
    w_row[rows[top]] = np.exp(scores[top] - scores[top].max())
    first = v.levels[parents] == 1
    p, c = parents[first], children[first]
    act = np.bincount(p, weights=w_row[c], minlength=len(v))
    by_row = np.bincount(c, weights=act[p], minlength=len(v))
    graph = link_graph(index, titled_only=True)  # for the document codes
    seed_docs = np.unique(graph.doc[rows[top]])
    by_row[_in_docs(graph.doc, seed_docs)] = 0.0
    h = by_row[rows]
    return h / h.max() if h.max() > 0 else h


def search(index: Index, text: str, *, budget: int | None, k: int, levels: Sequence[int] | None, doc_ids: Sequence[str] | None,
           vector: np.ndarray | None, lucene: bool, **options: Any) -> list[Hit]:
    o = {**DEFAULTS, **options}  # names and values already checked by Index.search (modes.check_options, HopOptions)
    q = index.config.query
    fusion = o["fusion"] or q.fusion
    if fusion not in FUSIONS or fusion == "rrf":
        raise QueryError(text, f"hop: fusion must be zscore or minmax, not {fusion!r}")
    if levels is not None and 0 not in levels:
        raise QueryError(text, "hop walks between leaves: levels must include 0 (or be left out)")
    if vector is None:
        vector = index.embed_queries([text])[0]
    dense_weight = q.dense_weight if o["dense_weight"] is None else o["dense_weight"]

    def fused(sparse_text: str) -> tuple[np.ndarray, np.ndarray]:
        return index.fused_scores(sparse_text, vector, levels=[0], doc_ids=doc_ids, lucene=lucene, fusion=fusion,
                                  dense_weight=dense_weight, depth=o["depth"] or q.fusion_depth, sparse=True,
                                  rrf_k=q.rrf_k, fallback=True)

    rows, scores = route(index, text, fused, lucene=lucene)  # the documents the question points to (query/routing.py)
    if o["walk"] == "tree" and o["hop_weight"] > 0 and rows.size:
        scores = scores + o["hop_weight"] * tree_scores(index, rows, scores, seeds=o["seeds"])
    elif o["walk"] == "hop" and o["hop_weight"] > 0 and rows.size and index.vectors.bounded:
        h = candidate_hop_scores(link_rows(index), index, rows, scores, seeds=o["seeds"], kinds=o["kinds"])
        scores = scores + o["hop_weight"] * h
    elif o["walk"] != "none" and o["hop_weight"] > 0 and rows.size:
        graph = link_graph(index, titled_only=o["walk"] == "hop" and o["kinds"] == "title")
        h = hop_scores(graph, rows, scores, seeds=o["seeds"], walk=o["walk"], kinds=o["kinds"],
                       damping=o["damping"], iterations=o["iterations"])
        scores = scores + o["hop_weight"] * h
    if o["pack"] == "segments":
        return pack(index, rows, scores, budget, k)
    return index.fill(rows, scores, budget, k)
