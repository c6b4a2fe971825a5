"""The query index over a published snapshot, and the public API every retrieval mode uses (docs/METHODS.md §6).

:meth:`Index.search` looks the mode up in :mod:`arborag.query.modes` (the one registry) and
calls it; the modes themselves (``query/raptor.py``: collapsed, traversal, sparse, hybrid;
``query/auto.py``, ``multi``, ``level``, ``segments``, ``rerank``) drive the index through its
public methods only: :meth:`~Index.dense_scores`, :meth:`~Index.sparse_ranked`,
:meth:`~Index.fused_scores`, :meth:`~Index.fill`, :meth:`~Index.hit`, :attr:`~Index.edge_rows`,
:meth:`~Index.roots`, :meth:`~Index.children_of`, :meth:`~Index.embed_queries`,
:meth:`~Index.leaf_chunks`, :meth:`~Index.documents`.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from arborag.config import ArboragConfig, EmbedConfig, SparseConfig, load_config
from arborag.errors import BackendUnavailable, QueryError, SparseNotBuiltError
from arborag.query.boilerplate import downweight
from arborag.query.fusion import adaptive_weight, fuse, normalize
from arborag.query.hits import Hit, distinct_fill, fill_hits, greedy_fill, top_order
from arborag.query.options import FROM_CONFIG, FromConfig, query_settings
from arborag.storage.corpus import Corpus
from arborag.storage.vectors import VectorStore

#: Dense candidates a bounded (ANN-searched) index gives a fused mode: its ANN top list, at least
#: as long as the BM25 list (2 x ``query.fusion_depth``) beside it.
ANN_CANDIDATES = 200

__all__ = ["Hit", "Index", "Mode", "fill_hits", "greedy_fill", "open_index", "parse_as_of", "snapshot_embed_config", "snapshot_sparse_config", "top_order"]

#: A retrieval mode: one of :func:`arborag.query.modes.available_modes` (core or plug-in).
Mode = str


def snapshot_embed_config(info: dict, config: ArboragConfig) -> EmbedConfig:
    """The embedder the snapshot was built with (``info.json`` "embed"), with the runtime settings
    (batch size, threads, device, endpoint) of ``config``; a clear error instead of mixing vector
    spaces (:func:`arborag.embed.model.snapshot_embedder`). A snapshot that records none uses ``config.embed``.
    """
    from arborag.embed.model import snapshot_embedder

    return snapshot_embedder(info.get("embed"), config.embed, snapshot=f"snapshot {info.get('snapshot', '')}".strip())


def snapshot_sparse_config(info: dict, config: ArboragConfig) -> SparseConfig:
    """The sparse backend the snapshot was built with (``info.json`` "sparse_backend"); the
    connection settings (URL, credentials) come from ``config`` / ``ARBORAG_ES_*``.
    """
    backend = info.get("sparse_backend") or config.sparse.backend
    return config.sparse.model_copy(update={"backend": backend})


def open_index(corpus_dir: str | Path, *, config: ArboragConfig | None = None,
               embed_query: Callable[[list[str]], np.ndarray] | None = None, light: bool = False,
               snapshot: str | None = None, as_of: "datetime | str | None" = None,
               lease_holder: str = "query", lease_ttl_s: float = 600.0) -> "Index":
    """Open the published snapshot of ``corpus_dir`` — or, for time travel, an earlier retained
    one — for querying.

    Raises :class:`~arborag.errors.NotBuiltError` when nothing has been published yet.
    ``embed_query`` replaces the embedder (tests); by default the embedder the snapshot was
    built with is loaded lazily on the first text query. The sparse backend is also the one
    recorded in the snapshot (``info.json``), whatever ``config.sparse.backend`` says now.

    ``snapshot`` names a retained snapshot (a full id, a unique prefix, or ``"published"``);
    ``as_of`` (a ``datetime`` or ISO-8601 text; naive = UTC) picks the one that was published at
    that time. Either raises :class:`~arborag.errors.SnapshotNotFound` (listing what is retained)
    when nothing matches. An index opened with either holds a reader lease on its snapshot
    (:func:`arborag.storage.leases.acquire_lease`, ``lease_holder``) so retention cannot remove
    the files under it; :meth:`Index.close` releases it (and a dead process's lease stops
    counting at once on its host). The lease lasts ``lease_ttl_s``; a reader that keeps the index
    open longer calls ``index.lease.renew()`` now and then (``arborag serve`` does, on a timer).

    ``light=True`` (a one-off process such as ``arborag query``) embeds with
    :class:`~arborag.embed.light.LightEmbedder` when the model allows it: the same vector
    for one text as the build embedder, without importing sentence-transformers (seconds).
    It embeds every text on its own; without ``light`` (the default, servers and evaluation)
    the build embedder is used, batches included.
    """
    corpus = Corpus(corpus_dir)
    lease = None
    if snapshot is None and as_of is None:
        snap = corpus.published_dir()
    else:
        from arborag.storage.leases import acquire_lease
        from arborag.storage.snapshots import resolve_snapshot, snapshot_dir

        when = parse_as_of(as_of) if as_of is not None else None
        sid = resolve_snapshot(corpus, snapshot, as_of=when)
        lease = acquire_lease(corpus, sid, holder=lease_holder, ttl_s=lease_ttl_s)  # before reading a file of it
        try:
            snap = snapshot_dir(corpus, sid)
        except BaseException:
            lease.release()
            raise
    try:
        info = json.loads((snap / "info.json").read_text(encoding="utf-8"))
        index = Index(corpus, snap, info, config=config or load_config(), embed_query=embed_query, light=light)
    except BaseException:
        if lease is not None:
            lease.release()
        raise
    index.lease = lease
    return index


def parse_as_of(value: "datetime | str") -> "datetime":
    """An ``--as-of`` time: a ``datetime`` or ISO-8601 text (``2026-11-26``, ``2026-11-26T10:00``,
    ``...Z`` or an offset); a time without a zone is UTC."""
    from datetime import datetime, timezone

    if isinstance(value, datetime):
        when = value
    else:
        text = str(value).strip()
        try:
            when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            raise QueryError(text, "--as-of takes an ISO-8601 time, e.g. 2026-11-26T09:30 or 2026-11-26T09:30:00+01:00 "
                             "(no zone = UTC)") from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


class Index:
    def __init__(self, corpus: Corpus, snapshot_dir: Path, info: dict, *, config: ArboragConfig,
                 embed_query: Callable[[list[str]], np.ndarray] | None = None, light: bool = False) -> None:
        self.corpus = corpus
        self.snapshot_dir = snapshot_dir
        self.info = info
        self.config = config
        self.vectors = VectorStore.open(snapshot_dir / "vectors.lance", ann_min_rows=config.query.ann_min_rows)
        self._edge_rows: tuple[np.ndarray, np.ndarray] | None = None  # read on the first traversal
        self._embed_query = embed_query
        self._light = light
        self._embedder: Any = None  # Embedder or LightEmbedder, loaded on the first text query
        self._sparse = None
        self._documents = None  # provenance tables, read on first use
        self._leaf_chunks = None
        self.lease: Any = None  # a reader lease on an explicitly opened snapshot (open_index(snapshot=/as_of=))

    def close(self) -> None:
        """Release the sparse index (its files and any private copy) and the reader lease of a
        time-travel snapshot; the index can still be used afterwards and reopens what it needs
        (without a lease then)."""
        sparse, self._sparse = self._sparse, None
        close = getattr(sparse, "close", None)
        if close is not None:
            close()
        lease, self.lease = self.lease, None
        if lease is not None:  # retention may remove a time-travel snapshot from now on
            lease.release()

    # -- provenance ------------------------------------------------------------------------
    def _snapshot_table(self, name: str):
        """Table ``name`` (chunks | documents) as the snapshot recorded it; empty for a snapshot
        published before snapshots carried provenance (the working tables describe another state:
        a later build, a dry run, what a rollback left behind)."""
        from arborag.storage.tables import read_table

        return read_table(name, self.snapshot_dir / f"{name}.parquet")

    def documents(self):
        """The snapshot's documents (``DOCUMENTS`` schema, text included), read once."""
        if self._documents is None:
            self._documents = self._snapshot_table("documents")
        return self._documents

    def leaf_chunks(self):
        """The snapshot's leaf chunks (``CHUNKS`` schema: doc_id, section_id, ordinal,
        start_char, end_char, header; ``chunk_id`` = the leaf's ``node_id``), read once."""
        if self._leaf_chunks is None:
            self._leaf_chunks = self._snapshot_table("chunks")
        return self._leaf_chunks

    def doc_titles(self) -> dict[str, str]:
        """doc_id -> title (or the file name of its uri when it has none)."""
        t = self.documents()
        return {d: (ti or Path(u).name) for d, ti, u in zip(t.column("doc_id").to_pylist(), t.column("title").to_pylist(), t.column("uri").to_pylist())}

    # -- properties ------------------------------------------------------------------------
    @property
    def snapshot(self) -> str:
        return str(self.info.get("snapshot"))

    @property
    def top_level(self) -> int:
        return int(self.vectors.levels.max()) if len(self.vectors) else 0

    def __len__(self) -> int:
        return len(self.vectors)

    # -- embedding -------------------------------------------------------------------------
    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed query texts with the model the snapshot was built with."""
        if self._embed_query is not None:
            return np.asarray(self._embed_query(list(texts)), dtype=np.float32)
        if self._embedder is None:
            cfg = snapshot_embed_config(self.info, self.config)
            self._embedder = _light_embedder(cfg) if self._light else None
            if self._embedder is None:
                from arborag.embed.model import Embedder

                self._embedder = Embedder(cfg)
        return self._embedder.embed(list(texts))

    # -- search ----------------------------------------------------------------------------
    def search(
        self,
        text: str,
        *,
        mode: Mode | None = None,
        budget: "int | None | FromConfig" = FROM_CONFIG,
        k: int | None = None,
        levels: Sequence[int] | None = None,
        doc_ids: Sequence[str] | None = None,
        lucene: bool = False,
        vector: np.ndarray | None = None,
        **options: Any,
    ) -> list[Hit]:
        """Retrieve nodes for ``text``.

        ``mode``, ``budget`` and ``k`` not given are ``query.mode``, ``query.budget`` and
        ``query.k`` of the index's config (:func:`arborag.query.options.query_settings`, the
        defaults of every front door). ``text`` is plain words unless ``lucene=True``.

        - ``hop`` (the shipped ``query.mode``; :mod:`arborag.query.hop`): ``auto`` plus one hop through the links
          between leaves (docs/METHODS.md §9.2); without links it is ``auto``.
        - ``auto`` (:mod:`arborag.query.auto`): dense and BM25 scores of the leaves
          fused (``query.fusion``), filled best-first — the best configuration measured on the
          shared sets (docs/EVALUATION.md).
        - ``collapsed``: every node of every level scored by cosine, added best-first until
          ``budget`` tokens are full (a node that would overflow is skipped, later smaller
          ones may still fit).
        - ``traversal``: top-``k`` of the top level, then top-``k`` among their children,
          level by level to the leaves; the selected set is returned best-first, capped at
          ``budget`` tokens.
        - ``sparse``: BM25 best-first until the budget; ``lucene=True`` runs ``text`` as
          Lucene syntax, otherwise it is matched as plain terms.
        - ``hybrid``: dense and sparse scores of every node of the allowed levels fused
          (``config.query.fusion``: z-score normalized convex combination by default, or
          ``rrf`` with k = ``query.rrf_k``), then filled best-first to the budget. Options:
          ``fusion=``, ``dense_weight=``, ``depth=`` override the config.

        Every mode is an entry of :mod:`arborag.query.modes` (its options model names what
        ``options`` it takes; anything else is a :class:`QueryError`).

        ``levels`` restricts every mode to those tree levels (``[0]`` is the flat, no-tree
        baseline); ``doc_ids`` to nodes drawing on those documents. ``budget=None`` means
        no token cap (traversal) or ``k`` hits (other modes).
        """
        from arborag.query.modes import available_modes, check_options, get_mode

        mode, budget, k = query_settings(self.config.query, mode=mode, budget=budget, k=k)
        if not text.strip() and vector is None:
            raise QueryError(text, "the query is empty")
        spec = get_mode(mode)
        if spec is None or not spec.installed():
            raise QueryError(text, f"unknown mode {mode!r}; use one of {', '.join(available_modes())}")
        problem = check_options(spec, options)
        if problem:
            raise QueryError(text, problem)
        return spec.load()(self, text, budget=budget, k=k, levels=levels, doc_ids=doc_ids, vector=vector, lucene=lucene,  # type: ignore[no-any-return]
                           **options)

    # -- the public API of the modes -----------------------------------------------------------------------------
    def hit(self, row: int, score: float) -> Hit:
        """The hit of vector row ``row`` with ``score``."""
        v = self.vectors
        return Hit(v.node_ids[row], int(v.levels[row]), float(score), v.texts[row], v.doc_ids[row], int(v.n_tokens[row]))

    @distinct_fill
    def fill(self, rows: np.ndarray, scores: np.ndarray, budget: int | None, k: int, *, ordered: bool = False) -> list[Hit]:
        """The hits of a best-first fill: ``rows`` by ``scores`` (higher first; ties by row),
        each taken when it still fits in ``budget`` tokens, over *every* candidate until the
        remaining budget is smaller than the smallest candidate not yet seen. ``budget=None``:
        the ``k`` best. ``ordered=True``: ``rows`` are already best first."""
        rows = np.asarray(rows, dtype=np.int64)
        scores = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-np.inf)
        if rows.size == 0:
            return []
        scores = scores if ordered else downweight(self, rows, scores)  # boilerplate share (query/boilerplate.py)
        if budget is None:
            order = np.arange(min(k, rows.size)) if ordered else top_order(rows, scores, min(k, rows.size))
            return [self.hit(int(rows[i]), float(scores[i])) for i in order]
        sizes = self.vectors.n_tokens[rows]
        if ordered:
            return [self.hit(int(rows[i]), float(scores[i])) for i in greedy_fill(sizes, budget)]
        # rank lazily: a window of the best candidates, grown x4 only while the budget is open
        # and some candidate not yet seen could still fit
        taken: list[np.ndarray] = []
        remaining = int(budget)
        done = 0
        window = min(256, rows.size)
        while True:
            top = top_order(rows, scores, window)
            chunk = top[done:]
            pos = chunk[greedy_fill(sizes[chunk], remaining)]
            taken.append(pos)
            remaining -= int(sizes[pos].sum())
            done = window
            if done >= rows.size or remaining <= 0:
                break
            unseen = np.ones(rows.size, dtype=bool)
            unseen[top] = False
            if remaining < int(sizes[unseen].min()):
                break
            window = min(window * 4, rows.size)
        picked = np.concatenate(taken)
        return [self.hit(int(rows[i]), float(scores[i])) for i in picked]

    def dense_scores(self, vector, *, levels=None, doc_ids=None, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(rows, cosine) of every node the filters allow (exact, one matrix product). A bounded
        store (``query.ann_min_rows`` rows or more) gives the ``n`` best (default
        :data:`ANN_CANDIDATES`) that its ANN index finds instead, with their exact cosines."""
        v = self.vectors
        if v.bounded:
            found = v.search(vector, k=max(1, n or ANN_CANDIDATES), levels=levels, doc_ids=doc_ids)
            return (np.fromiter((r for r, _ in found), dtype=np.int64, count=len(found)),
                    np.fromiter((s for _, s in found), dtype=np.float64, count=len(found)))
        m = v.mask(levels=levels, doc_ids=doc_ids)
        q = np.asarray(vector, dtype=np.float32)
        if m is None:
            return np.arange(len(v), dtype=np.int64), (v.matrix @ q).astype(np.float64)
        rows = np.flatnonzero(m).astype(np.int64)
        if rows.size * 4 >= len(v):  # most rows (levels=[0]): one product over the matrix beats copying the selected rows
            return rows, (v.matrix @ q)[rows].astype(np.float64)
        return rows, (v.matrix[rows] @ q).astype(np.float64)

    @property
    def edge_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(parent rows, child rows) of every edge of the tree (read once from edges.parquet)."""
        if self._edge_rows is None:
            import pyarrow.parquet as pq

            edges = pq.read_table(self.snapshot_dir / "edges.parquet", columns=["parent_id", "child_id"])
            if self.vectors.bounded:  # one columnar join per side, no dict of every id
                self._edge_rows = (self.vectors.row_of.rows(edges.column("parent_id")), self.vectors.row_of.rows(edges.column("child_id")))
                return self._edge_rows
            row_of = self.vectors.row_of
            p = np.fromiter((row_of[x] for x in edges.column("parent_id").to_pylist()), dtype=np.int64, count=edges.num_rows)
            c = np.fromiter((row_of[x] for x in edges.column("child_id").to_pylist()), dtype=np.int64, count=edges.num_rows)
            self._edge_rows = (p, c)
        return self._edge_rows

    def roots(self, allowed: np.ndarray | None = None) -> np.ndarray:
        """Rows with no parent (among ``allowed`` rows when given): the top of every tree of the
        forest, whatever its level (a short document's tree tops out lower than a long one's)."""
        p, c = self.edge_rows
        n = len(self.vectors)
        ok = np.ones(n, dtype=bool) if allowed is None else allowed
        has_parent = np.zeros(n, dtype=bool)
        has_parent[c[ok[p]]] = True
        return np.flatnonzero(ok & ~has_parent)

    def children_of(self, rows: np.ndarray) -> np.ndarray:
        """The distinct child rows of ``rows``, sorted."""
        p, c = self.edge_rows
        return np.unique(c[np.isin(p, rows)])

    def sparse_index(self):
        if self._sparse is None:
            from arborag.storage.sparse import open_sparse_index

            self._sparse = open_sparse_index(
                self.snapshot_dir / "sparse", snapshot_sparse_config(self.info, self.config), corpus_name=None
            )
        return self._sparse

    def sparse_ranked(self, text: str, *, n: int, levels: Sequence[int] | None = None, doc_ids: Sequence[str] | None = None,
                      lucene: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(rows, BM25 scores) of the ``n`` best sparse matches, best first (NaN scores as 0).
        Raises :class:`~arborag.errors.SparseNotBuiltError` / ``BackendUnavailable`` as the
        sparse index does, and ``QueryError`` (with a position) for a malformed Lucene query."""
        hits = self._sparse_hits(text, n=n, levels=levels, doc_ids=doc_ids, lucene=lucene)
        rows = self.vectors.rows_of([h.node_id for h in hits])
        scores = np.fromiter((float(h.score) for h in hits), dtype=np.float64, count=len(hits))
        kept = rows >= 0
        return rows[kept], np.nan_to_num(scores[kept], nan=0.0)

    def _sparse_hits(self, text: str, *, n: int, levels: Sequence[int] | None, doc_ids: Sequence[str] | None, lucene: bool) -> list:
        """The ``n`` best BM25 hits. On a bounded index a levels-only filter that keeps most rows
        (the leaves) is applied to a slightly longer unfiltered list instead of inside the engine
        (tantivy intersects the filter's postings, ~1M at 10^6 leaves: 33 vs 20 ms measured); BM25
        scores do not depend on the filter, so the hits are the same unless the longer list holds
        fewer than ``n`` of them, and then the filtered search runs."""
        sparse = self.sparse_index()
        v = self.vectors
        if not v.bounded or levels is None or doc_ids is not None or not len(v):
            return sparse.search(text, k=n, levels=levels, doc_ids=doc_ids, lucene=lucene)  # type: ignore[no-any-return]
        share = v.level_share(levels)
        if share < 0.5:
            return sparse.search(text, k=n, levels=levels, doc_ids=doc_ids, lucene=lucene)  # type: ignore[no-any-return]
        m = int(np.ceil(n / share * 1.1))
        wide = sparse.search(text, k=m, levels=None, doc_ids=None, lucene=lucene)
        allowed = {int(x) for x in levels}
        kept = [h for h in wide if int(h.level) in allowed]
        if len(kept) >= n or len(wide) < m:
            return kept[:n]
        return sparse.search(text, k=n, levels=levels, doc_ids=doc_ids, lucene=lucene)  # type: ignore[no-any-return]

    def fused_scores(self, text: str, vector: np.ndarray, *, levels: Sequence[int] | None, doc_ids: Sequence[str] | None,
                     lucene: bool, fusion: str, dense_weight: float | str, depth: int, sparse: bool, rrf_k: int,
                     fallback: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(rows, fused score) of every node the filters allow: dense ⊕ BM25
        (:func:`arborag.query.fusion.fuse`; ``dense_weight`` a number or ``"adaptive"``).
        The scores are on ``fusion``'s one scale whether BM25 contributes or not (``sparse=False``,
        no BM25 hit, no sparse index): reciprocal-rank sums for ``rrf``, normalized scores for
        ``minmax``/``zscore``; without BM25 the dense list is fused alone (weight 1).
        ``fallback``: with no sparse index (or its backend down), fuse the dense list alone
        (logged once) instead of raising."""
        pending = None
        if sparse and self.vectors.bounded:  # BM25 in tantivy while LanceDB searches: both release the GIL
            pending = _search_pool().submit(self.sparse_ranked, text, n=2 * depth, levels=levels, doc_ids=doc_ids, lucene=lucene)
        d_rows, d_scores = self.dense_scores(vector, levels=levels, doc_ids=doc_ids, n=max(2 * depth, ANN_CANDIDATES))
        if not sparse or d_rows.size == 0:
            return _dense_alone(d_rows, d_scores, fusion, depth=depth, rrf_k=rrf_k)
        try:
            if pending is not None:
                s_rows, s_scores = pending.result()
            else:
                s_rows, s_scores = self.sparse_ranked(text, n=2 * depth, levels=levels, doc_ids=doc_ids, lucene=lucene)
        except (SparseNotBuiltError, BackendUnavailable) as exc:  # the default mode still answers, dense only
            if not fallback:
                raise
            _warn_once(f"auto: no BM25 list ({exc}); fusing the dense list only. Rebuild the corpus or start the sparse backend.")
            s_rows, s_scores = np.zeros(0, dtype=np.int64), np.zeros(0)
        if s_rows.size == 0:  # no BM25 hit: the dense list on the same scale as the dense-only path
            return _dense_alone(d_rows, d_scores, fusion, depth=depth, rrf_k=rrf_k)
        w = adaptive_weight(d_scores, s_scores, depth) if dense_weight == "adaptive" else float(dense_weight)
        return fuse([(d_rows, d_scores), (s_rows, s_scores)], method=fusion, weights=[w, 1.0 - w], k=rrf_k, depth=depth,  # type: ignore[arg-type]
                    absent=[None, 0.0])


_POOL: Any = None


def _search_pool() -> Any:
    """The threads a bounded index runs its BM25 search on while the ANN search runs in the caller
    (created on first use; shared by every index of the process)."""
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="arborag-bm25")
    return _POOL


def _dense_alone(rows: np.ndarray, scores: np.ndarray, fusion: str, *, depth: int, rrf_k: int) -> tuple[np.ndarray, np.ndarray]:
    """The dense list fused on its own: ``1 / (rrf_k + rank)`` for ``rrf``, else its normalized scores."""
    if fusion == "rrf":
        return fuse([(rows, scores)], method="rrf", k=rrf_k)
    return rows, normalize(scores, fusion, depth=depth)[0]  # type: ignore[arg-type]


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        logging.getLogger("arborag.query.auto").warning(message)


def _light_embedder(cfg: EmbedConfig):
    """A :class:`~arborag.embed.light.LightEmbedder` when the model is one it reproduces, else None."""
    if cfg.backend != "local":
        return None
    from arborag.embed.light import LightEmbedder, light_supported

    light = LightEmbedder(cfg)
    return light if light_supported(light.path) else None
