"""The API routes: search, ask, nodes, documents, health, stats.

Every route that reads the index takes a lease on the current snapshot (see
:mod:`arborag.serve.state`) and answers from it alone; the snapshot id is in the response.
"""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, status

from arborag.errors import QueryError
from arborag.query.modes import MODES
from arborag.serve.models import (
    AskRequest,
    ID_PATTERN, DocumentResponse, ErrorBody, Health, Limits, LuceneReport, NodeRef, NodeResponse, QueryDefaults,
    SearchHit, SearchRequest, SearchResponse, SnapshotEntry, Snapshots, Source, Stats, settings_of,
)

__all__ = ["make_router"]

PREVIEW_CHARS = 160
_NO_INDEX = "the corpus has no published index yet; run `arborag build SOURCE... --corpus DIR` (the server picks it up)"


def _unprocessable(field: str, msg: str) -> HTTPException:
    return HTTPException(422, detail=f"{field}: {msg}")


def _check_limits(req: SearchRequest, limits: Limits, settings: Any) -> None:
    """``settings``: the request's mode, budget and k with the config's defaults filled in."""
    if len(req.text) > limits.max_text_chars:
        raise _unprocessable("text", f"longer than the limit of {limits.max_text_chars} characters")
    if settings.k > limits.max_k:
        raise _unprocessable("k", f"must be <= {limits.max_k}")
    if settings.budget is not None and settings.budget > limits.max_budget:
        raise _unprocessable("budget", f"must be <= {limits.max_budget}")
    if req.doc_ids is not None and len(req.doc_ids) > limits.max_filter_ids:
        raise _unprocessable("doc_ids", f"at most {limits.max_filter_ids} ids")
    spec = MODES.get(settings.mode)
    if spec is None:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail=(
            f"the server's query.mode {settings.mode!r} is not a mode; use one of {', '.join(MODES)}"))
    if req.vector is not None and not spec.uses_vector:
        dense = ", ".join(n for n, m in MODES.items() if m.uses_vector)
        raise _unprocessable("vector", f"mode {settings.mode} embeds nothing; a query vector is for the modes {dense}")


def _sources(doc_ids: Any, docs: dict[str, tuple[str | None, str]]) -> list[Source]:
    out = []
    for d in doc_ids:
        title, uri = docs.get(d, (None, None))
        out.append(Source(doc_id=d, title=title, uri=uri))
    return out


def _labels(snap: Any, node_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{node_id: {"title", "keywords"}}`` of summary hits, from the snapshot's nodes table (loaded
    once per snapshot; a snapshot written before labels has null ones)."""
    if not node_ids:
        return {}
    import polars as pl

    nodes, _ = snap.tables()
    rows = nodes.filter(pl.col("node_id").is_in(node_ids)).select("node_id", "title", "keywords")
    return {r["node_id"]: {"title": r["title"], "keywords": r["keywords"]} for r in rows.iter_rows(named=True)}


def make_router(holder: Any, limits: Limits, guard: Any) -> APIRouter:
    api = APIRouter()
    protected = [Depends(guard)]
    errors: dict[int | str, dict[str, Any]] = {400: {"model": ErrorBody}, 401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody},
              413: {"model": ErrorBody}, 422: {"model": ErrorBody}, 503: {"model": ErrorBody}}

    def _need(snap: Any) -> Any:
        if snap is None:
            why = getattr(holder, "open_error", None)
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail=_NO_INDEX if not why else (
                f"the published snapshot cannot be opened ({why}); check it with `arborag snapshots show published "
                "--corpus DIR`, roll back with `arborag snapshots rollback ID`, or rebuild (the server retries on its own)"))
        return snap

    @api.post("/search", response_model=SearchResponse, dependencies=protected, responses=errors, tags=["search"],
              summary="Retrieve context for a question from the published snapshot (or a retained earlier one)")
    def search(req: SearchRequest) -> SearchResponse:
        settings = settings_of(req, holder.config.query)
        _check_limits(req, limits, settings)
        import numpy as np

        with holder.lease(req.snapshot) as snap:
            index = _need(snap).index
            vector = None
            if req.vector is not None:
                vector = np.asarray(req.vector, dtype=np.float32)
                dim = snap.dim
                if (dim is not None and vector.shape != (dim,)) or not np.isfinite(vector).all():
                    raise _unprocessable("vector", f"must be {dim} finite numbers (the snapshot's embedding size)")
            t0 = time.perf_counter()
            embedded = vector is None and MODES[settings.mode].uses_vector
            if embedded:  # once, even when a malformed Lucene query is retried below
                vector = index.embed_queries([req.text])[0]
            embed_ms = (time.perf_counter() - t0) * 1000 if embedded else None
            args = dict(mode=settings.mode, budget=settings.budget, k=settings.k, levels=req.levels, doc_ids=req.doc_ids, vector=vector)
            report = None
            try:
                hits = index.search(req.text, lucene=req.lucene, **args)
            except QueryError as exc:
                if not req.lucene or req.strict_lucene:
                    raise
                # docs/METHODS.md §6.4: a malformed Lucene query is reported and retried as a plain match of its words
                hits = index.search(req.text, lucene=False, **args)
                report = LuceneReport(error=exc.reason, position=exc.position)
            took = (time.perf_counter() - t0) * 1000
            docs = snap.documents()
            labels = _labels(snap, [h.node_id for h in hits if h.level > 0])
            return SearchResponse(
                snapshot=snap.id, mode=settings.mode, budget=settings.budget, tokens=sum(h.n_tokens for h in hits),
                took_ms=round(took, 3), embedded=embedded, embed_ms=None if embed_ms is None else round(embed_ms, 3), lucene=report,
                hits=[SearchHit(node_id=h.node_id, level=h.level, score=h.score, text=h.text, tokens=h.n_tokens,
                                sources=_sources(h.doc_ids, docs), **labels.get(h.node_id, {})) for h in hits],
            )

    @api.post("/ask", dependencies=protected, responses=errors, tags=["search"],
              summary="Answer a question with citations (needs a configured LLM; without one, the context and how to configure it)")
    def ask(req: AskRequest) -> dict[str, Any]:
        """Retrieve like POST /search, then answer with the LLM configured for the server
        (``summarize.base_url`` / ``ARBORAG_SUMMARIZE__*``), citing passages [1], [2] that map to
        node ids and sources. ``status`` is answered | refused | no_llm | failed; with no LLM the
        retrieved passages come back with the answer saying how to configure one (never an error)."""
        settings = settings_of(req, holder.config.query)
        _check_limits(SearchRequest(text=req.text, levels=req.levels), limits, settings)
        from arborag.llm.configured import llm_from_config
        from arborag.query.answer import ask as ask_question

        with holder.lease() as snap:
            index = _need(snap).index
            llm = llm_from_config(index.config, cache_dir=index.corpus.cache_dir / "llm")
            try:
                answer = ask_question(index, req.text, llm=llm, mode=settings.mode, budget=settings.budget, k=settings.k,
                                      levels=req.levels, max_tokens=req.max_tokens)
            finally:
                if llm is not None:
                    llm.close()
            return {"snapshot": snap.id, **answer.to_dict()}

    @api.get("/nodes/{node_id}", response_model=NodeResponse, dependencies=protected, responses=errors, tags=["tree"],
             summary="A node of the published tree with its parents and children")
    def node(node_id: str = Path(..., pattern=ID_PATTERN),
             snapshot: str | None = Query(None, pattern=ID_PATTERN, description="A retained snapshot (default: the published one).")) -> NodeResponse:
        import polars as pl

        with holder.lease(snapshot) as snap:
            nodes, edges = _need(snap).tables()
            row = nodes.filter(pl.col("node_id") == node_id)
            if row.height == 0:
                raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no node {node_id!r} in snapshot {snap.id}")
            r = row.row(0, named=True)
            brief = nodes.select("node_id", "level", pl.col("n_tokens").alias("tokens"),
                                 pl.col("text").str.slice(0, PREVIEW_CHARS).alias("preview"), "title")

            def refs(key: str, other: str) -> list[NodeRef]:
                linked = (edges.filter(pl.col(key) == node_id).select(pl.col(other).alias("node_id"), "probability")
                          .join(brief, on="node_id", how="inner").sort(["level", "probability", "node_id"], descending=[True, True, False]))
                return [NodeRef(**x) for x in linked.to_dicts()]

            return NodeResponse(
                snapshot=snap.id, node_id=r["node_id"], level=r["level"], text=r["text"], tokens=r["n_tokens"],
                sources=_sources(r["doc_ids"], snap.documents()), summarizer=r["summarizer"],
                summary_status=r["summary_status"], title=r.get("title"), keywords=r.get("keywords"), parents=refs("child_id", "parent_id"), children=refs("parent_id", "child_id"),
            )

    @api.get("/documents/{doc_id}", response_model=DocumentResponse, dependencies=protected, responses=errors,
             tags=["tree"], summary="A document of the published snapshot (metadata and text)")
    def document(doc_id: str = Path(..., pattern=ID_PATTERN),
                 max_chars: int = Query(20000, ge=0, description="Characters of the text to return (0 = none)."),
                 snapshot: str | None = Query(None, pattern=ID_PATTERN, description="A retained snapshot (default: the published one).")) -> DocumentResponse:
        if max_chars > limits.max_document_chars:
            raise _unprocessable("max_chars", f"must be <= {limits.max_document_chars}")
        import pyarrow.parquet as pq

        with holder.lease(snapshot) as snap:
            path = _need(snap).dir / "documents.parquet"  # the snapshot's documents, never the working tables
            rows = pq.read_table(path, filters=[("doc_id", "=", doc_id)]).to_pylist() if path.exists() else []
            served = snap.id
        if not rows:
            raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no document {doc_id!r} in snapshot {served}" + (
                "" if path.exists() else " (it was written before snapshots kept their documents; rebuild to record them)"))
        d = rows[0]
        text = d.get("text") or ""
        try:
            meta = json.loads(d["metadata"]) if d.get("metadata") else None
        except ValueError:
            meta = {"raw": d["metadata"]}
        return DocumentResponse(
            snapshot=served, doc_id=d["doc_id"], uri=d["uri"], title=d.get("title"), mime=d.get("mime"), n_chars=d.get("n_chars"),
            status=d["status"], error=d.get("error"), metadata=meta if isinstance(meta, dict) else {"value": meta},
            ingested_at=d["ingested_at"].isoformat() if d.get("ingested_at") else None,
            text=text[:max_chars] if max_chars else None, truncated=len(text) > max_chars,
        )

    @api.get("/snapshots", response_model=Snapshots, dependencies=protected, responses=errors, tags=["tree"],
             summary="The retained snapshots a request can name in `snapshot` (newest first)")
    def snapshots() -> Snapshots:
        from arborag.storage.snapshots import list_snapshots

        current = holder.refresh()
        open_ids = {s.id for s in holder.open_snapshots()}
        return Snapshots(serving=current.id if current else None, snapshots=[
            SnapshotEntry(id=s.id, published_at=s.published_at.isoformat() if s.published_at else None, published=s.published,
                          pinned=s.pinned, open=s.id in open_ids, nodes=s.nodes, documents=s.documents)
            for s in list_snapshots(holder.corpus, sizes=False)])

    @api.get("/health", response_model=Health, tags=["server"], summary="Liveness and the snapshot served (no token needed)")
    def health() -> Health:
        snap = holder.refresh()
        q = holder.config.query
        return Health(status="ok" if snap else "no_index", snapshot=snap.id if snap else None, auth=guard.required,
                      defaults=QueryDefaults(mode=q.mode, budget=q.budget, k=q.k))

    @api.get("/stats", response_model=Stats, dependencies=protected, responses=errors, tags=["server"],
             summary="The snapshot served: id, node counts per level, build time")
    def stats() -> Stats:
        with holder.lease() as snap:
            _need(snap)
            return Stats(
                snapshot=snap.id, published_at=snap.info.get("published_at"), run_id=snap.info.get("run_id"),
                build_seconds=_build_seconds(holder.corpus, snap.info.get("run_id")), nodes=snap.n_nodes,
                levels=snap.levels, documents=len(snap.documents()), embedder_loaded=holder.embedders.loaded,
                swaps=holder.swaps, released=list(holder.released), limits=limits,
            )

    return api


def _build_seconds(corpus: Any, run_id: str | None) -> float | None:
    """Wall time of the build run that published the snapshot, from the runs table."""
    if not run_id or not corpus.table_path("runs").exists():
        return None
    import polars as pl

    runs = pl.DataFrame(corpus.read("runs")).filter(pl.col("run_id") == run_id)
    if runs.height == 0 or runs["started_at"][0] is None or runs["finished_at"][0] is None:
        return None
    return round((runs["finished_at"][0] - runs["started_at"][0]).total_seconds(), 3)
