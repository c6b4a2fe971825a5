"""The query index: collapsed-tree, traversal, sparse and hybrid retrieval (SPEC §6)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from arborag.config import ArboragConfig, EmbedConfig, SparseConfig, load_config
from arborag.errors import QueryError
from arborag.storage.corpus import Corpus
from arborag.storage.vectors import VectorStore

__all__ = ["Hit", "Index", "Mode", "open_index", "snapshot_embed_config", "snapshot_sparse_config"]

#: A retrieval mode: one of :func:`arborag.query.modes.available_modes` (core or plug-in).
Mode = str


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved node. ``score``: higher is better (cosine for dense modes, BM25 for
    sparse, fused RRF score for hybrid)."""

    node_id: str
    level: int
    score: float
    text: str
    doc_ids: tuple[str, ...]
    n_tokens: int


#: Embedder settings that change only speed, never the vectors: taken from the current config.
_RUNTIME_EMBED_KEYS = ("batch_size", "threads", "device")


def snapshot_embed_config(info: dict, config: ArboragConfig) -> EmbedConfig:
    """The embedder the snapshot was built with (``info.json`` "embed": model, dtype, ...);
    batch size, threads and device come from ``config`` (they do not change the vectors).
    A snapshot that records no embedder uses ``config.embed``.
    """
    recorded = info.get("embed")
    if not recorded:
        return config.embed
    runtime = config.embed.model_dump(include=set(_RUNTIME_EMBED_KEYS))
    known = {k: v for k, v in recorded.items() if k in EmbedConfig.model_fields}
    return EmbedConfig.model_validate({**known, **runtime})


def snapshot_sparse_config(info: dict, config: ArboragConfig) -> SparseConfig:
    """The sparse backend the snapshot was built with (``info.json`` "sparse_backend"); the
    connection settings (URL, credentials) come from ``config`` / ``ARBORAG_ES_*``.
    """
    backend = info.get("sparse_backend") or config.sparse.backend
    return config.sparse.model_copy(update={"backend": backend})


def open_index(corpus_dir: str | Path, *, config: ArboragConfig | None = None,
               embed_query: Callable[[list[str]], np.ndarray] | None = None, light: bool = False) -> "Index":
    """Open the published snapshot of ``corpus_dir`` for querying.

    Raises :class:`~arborag.errors.NotBuiltError` when nothing has been published yet.
    ``embed_query`` replaces the embedder (tests); by default the embedder the snapshot was
    built with is loaded lazily on the first text query. The sparse backend is also the one
    recorded in the snapshot (``info.json``), whatever ``config.sparse.backend`` says now.

    ``light=True`` (a one-off process such as ``arborag query``) embeds with
    :class:`~arborag.embedder_light.LightEmbedder` when the model allows it: the same vector
    for one text as the build embedder, without importing sentence-transformers (seconds).
    It embeds every text on its own; without ``light`` (the default, servers and evaluation)
    the build embedder is used, batches included.
    """
    corpus = Corpus(corpus_dir)
    snap = corpus.published_dir()
    info = json.loads((snap / "info.json").read_text(encoding="utf-8"))
    return Index(corpus, snap, info, config=config or load_config(), embed_query=embed_query, light=light)


class Index:
    def __init__(self, corpus: Corpus, snapshot_dir: Path, info: dict, *, config: ArboragConfig,
                 embed_query: Callable[[list[str]], np.ndarray] | None = None, light: bool = False) -> None:
        self.corpus = corpus
        self.snapshot_dir = snapshot_dir
        self.info = info
        self.config = config
        self.vectors = VectorStore.open(snapshot_dir / "vectors.lance")
        self._children_rows: dict[int, list[int]] | None = None  # read on the first traversal
        self._embed_query = embed_query
        self._light = light
        self._embedder = None
        self._sparse = None
        self._documents = None  # provenance tables, read on first use
        self._leaf_chunks = None

    @property
    def _children(self) -> dict[int, list[int]]:
        """Parent row -> child rows (from edges.parquet; only traversal needs it)."""
        if self._children_rows is None:
            import pyarrow.parquet as pq

            edges = pq.read_table(self.snapshot_dir / "edges.parquet", columns=["parent_id", "child_id"])
            children: dict[int, list[int]] = {}
            row_of = self.vectors.row_of
            for p, c in zip(edges.column("parent_id").to_pylist(), edges.column("child_id").to_pylist()):
                children.setdefault(row_of[p], []).append(row_of[c])
            self._children_rows = children
        return self._children_rows

    def close(self) -> None:
        """Release the sparse index (its files and any private copy); the index can still be
        used afterwards and reopens what it needs."""
        sparse, self._sparse = self._sparse, None
        close = getattr(sparse, "close", None)
        if close is not None:
            close()

    # -- provenance ------------------------------------------------------------------------
    def _snapshot_or_working(self, name: str):
        """Table ``name`` (chunks | documents) as the snapshot recorded it; a snapshot published
        before snapshots carried provenance falls back to the corpus's working table."""
        from arborag.storage.tables import read_table

        path = self.snapshot_dir / f"{name}.parquet"
        return read_table(name, path if path.exists() else self.corpus.table_path(name))

    def documents(self):
        """The snapshot's documents (``DOCUMENTS`` schema, text included), read once."""
        if self._documents is None:
            self._documents = self._snapshot_or_working("documents")
        return self._documents

    def leaf_chunks(self):
        """The snapshot's leaf chunks (``CHUNKS`` schema: doc_id, section_id, ordinal,
        start_char, end_char, header; ``chunk_id`` = the leaf's ``node_id``), read once."""
        if self._leaf_chunks is None:
            self._leaf_chunks = self._snapshot_or_working("chunks")
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
                from arborag.embedder import Embedder

                self._embedder = Embedder(cfg)
        return self._embedder.embed(list(texts))

    # -- search ----------------------------------------------------------------------------
    def search(
        self,
        text: str,
        *,
        mode: Mode = "collapsed",
        budget: int | None = 2000,
        k: int = 5,
        levels: Sequence[int] | None = None,
        doc_ids: Sequence[str] | None = None,
        lucene: bool = False,
        vector: np.ndarray | None = None,
        **options: Any,
    ) -> list[Hit]:
        """Retrieve nodes for ``text``.

        - ``collapsed``: every node of every level scored by cosine, added best-first until
          ``budget`` tokens are full (a node that would overflow is skipped, later smaller
          ones may still fit).
        - ``traversal``: top-``k`` of the top level, then top-``k`` among their children,
          level by level to the leaves; the selected set is returned best-first, capped at
          ``budget`` tokens.
        - ``sparse``: BM25 best-first until the budget; ``lucene=True`` runs ``text`` as
          Lucene syntax, otherwise it is matched as plain terms.
        - ``hybrid``: dense collapsed candidates and sparse candidates fused by reciprocal
          rank fusion (k = config.query.rrf_k), then filled to the budget.

        - any other mode is a plug-in module (:mod:`arborag.query.modes`); ``options`` go to it.

        ``levels`` restricts every mode to those tree levels (``[0]`` is the flat, no-tree
        baseline); ``doc_ids`` to nodes drawing on those documents. ``budget=None`` means
        no token cap (traversal) or ``k`` hits (other modes).
        """
        from arborag.query.modes import CORE_MODES, available_modes, plugin_module

        if not text.strip() and vector is None:
            raise QueryError(text, "the query is empty")
        if mode not in CORE_MODES:
            plugin = plugin_module(mode)
            if plugin is None:
                raise QueryError(text, f"unknown mode {mode!r}; use one of {', '.join(available_modes())}")
            return plugin.search(self, text, budget=budget, k=k, levels=levels, doc_ids=doc_ids,
                                 vector=vector, lucene=lucene, **options)
        if options:
            raise QueryError(text, f"mode {mode!r} takes no options ({', '.join(sorted(options))})")
        if mode in ("collapsed", "traversal", "hybrid") and vector is None:
            vector = self.embed_queries([text])[0]
        if mode == "collapsed":
            return self._collapsed(vector, budget=budget, k=k, levels=levels, doc_ids=doc_ids)
        if mode == "traversal":
            return self._traversal(vector, budget=budget, k=k, levels=levels, doc_ids=doc_ids)
        if mode == "sparse":
            return self._sparse_search(text, budget=budget, k=k, levels=levels, doc_ids=doc_ids, lucene=lucene)
        return self._hybrid(text, vector, budget=budget, k=k, levels=levels, doc_ids=doc_ids, lucene=lucene)

    # -- modes -----------------------------------------------------------------------------
    def _hit(self, row: int, score: float) -> Hit:
        v = self.vectors
        return Hit(v.node_ids[row], int(v.levels[row]), float(score), v.texts[row], v.doc_ids[row], int(v.n_tokens[row]))

    def _fill(self, ranked: Sequence[tuple[int, float]], budget: int | None, k: int) -> list[Hit]:
        if budget is None:
            return [self._hit(r, s) for r, s in ranked[:k]]
        out: list[Hit] = []
        used = 0
        for row, score in ranked:
            n = int(self.vectors.n_tokens[row])
            if used + n > budget:
                continue
            out.append(self._hit(row, score))
            used += n
            if used >= budget:
                break
        return out

    def _dense_ranked(self, vector, *, budget, k, levels, doc_ids) -> list[tuple[int, float]]:
        # Enough candidates to fill the budget even with the smallest nodes; grow if needed.
        n = len(self.vectors)
        want = k if budget is None else max(k, 64)
        while True:
            ranked = self.vectors.search(vector, k=min(want, n), levels=levels, doc_ids=doc_ids)
            if budget is None or want >= n or sum(int(self.vectors.n_tokens[r]) for r, _ in ranked) >= 2 * budget:
                return ranked
            want *= 4

    def _collapsed(self, vector, *, budget, k, levels, doc_ids) -> list[Hit]:
        return self._fill(self._dense_ranked(vector, budget=budget, k=k, levels=levels, doc_ids=doc_ids), budget, k)

    def _traversal(self, vector, *, budget, k, levels, doc_ids) -> list[Hit]:
        v = self.vectors
        allowed = v.mask(levels=levels, doc_ids=doc_ids)
        top = self.top_level if allowed is None else int(v.levels[allowed].max()) if allowed.any() else -1
        if top < 0:
            return []
        frontier = np.flatnonzero(v.levels == top)
        selected: dict[int, float] = {}
        while frontier.size:
            picked = v.search(vector, k=k, rows=frontier)
            for row, score in picked:
                if allowed is None or allowed[row]:
                    selected[row] = score
            children = sorted({c for row, _ in picked for c in self._children.get(row, ())})
            frontier = np.asarray(children, dtype=np.int64)
        ranked = sorted(selected.items(), key=lambda rs: (-rs[1], rs[0]))
        if budget is None:
            return [self._hit(r, s) for r, s in ranked]
        return self._fill(ranked, budget, k)

    def sparse_index(self):
        if self._sparse is None:
            from arborag.storage.sparse import open_sparse_index

            self._sparse = open_sparse_index(
                self.snapshot_dir / "sparse", snapshot_sparse_config(self.info, self.config), corpus_name=None
            )
        return self._sparse

    def _sparse_ranked(self, text, *, budget, k, levels, doc_ids, lucene) -> list[tuple[int, float]]:
        want = k if budget is None else max(k, 64)
        hits = self.sparse_index().search(text, k=want, levels=levels, doc_ids=doc_ids, lucene=lucene)
        row_of = self.vectors.row_of
        return [(row_of[h.node_id], float(h.score)) for h in hits if h.node_id in row_of]

    def _sparse_search(self, text, *, budget, k, levels, doc_ids, lucene) -> list[Hit]:
        return self._fill(self._sparse_ranked(text, budget=budget, k=k, levels=levels, doc_ids=doc_ids, lucene=lucene), budget, k)

    def _hybrid(self, text, vector, *, budget, k, levels, doc_ids, lucene) -> list[Hit]:
        from arborag.query.fusion import rrf

        dense = self._dense_ranked(vector, budget=budget, k=k, levels=levels, doc_ids=doc_ids)
        sparse = self._sparse_ranked(text, budget=budget, k=k, levels=levels, doc_ids=doc_ids, lucene=lucene)
        fused = rrf([[r for r, _ in dense], [r for r, _ in sparse]], k=self.config.query.rrf_k)
        return self._fill([(int(r), float(s)) for r, s in fused], budget, k)


def _light_embedder(cfg: EmbedConfig):
    """A :class:`~arborag.embedder_light.LightEmbedder` when the model is one it reproduces, else None."""
    from arborag.embedder_light import LightEmbedder, light_supported

    light = LightEmbedder(cfg)
    return light if light_supported(light.path) else None
