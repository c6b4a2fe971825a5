"""What the MCP tools do, as plain functions over the published snapshot (no MCP types here).

Every function takes the :class:`~arborag.serve.state.SnapshotHolder` of the server (the same
mechanism as ``arborag serve``: a lease on the current snapshot per call, a newly published
snapshot picked up between calls, the query embedder resident) and returns JSON-ready data.
Bad input raises the SDK's ``ToolError`` (the agent reads it as a tool error, the server goes
on) with a message that says what is allowed; errors of arborag (an unreachable endpoint, an
embedder mismatch) pass through, and the server turns them into tool errors too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from arborag.extras import extra

with extra("mcp", "arborag mcp"):
    from mcp.server.mcpserver.exceptions import ToolError as ToolInputError

__all__ = ["Limits", "ToolInputError", "ask", "get_chunk", "get_node", "search", "snapshot_info", "tree_top"]

PREVIEW_CHARS = 300
_NO_INDEX = "the corpus has no published index yet: run `arborag build SOURCE... --corpus DIR` (the server picks it up)"


@dataclass(frozen=True)
class Limits:
    """Bounds of what one tool call may ask for (as ``arborag serve``'s)."""

    max_budget: int = 20_000
    max_k: int = 100
    max_text_chars: int = 4_000
    max_chunk_chars: int = 20_000
    max_filter_ids: int = 1_000
    max_top: int = 200


def _need(snap: Any, holder: Any = None) -> Any:
    """``snap``, or the reason there is none: nothing published, or a published snapshot this
    server cannot query (e.g. built with an embedder that is not configured here)."""
    if snap is not None:
        return snap
    manifest = holder.corpus.manifest() if holder is not None else None
    if manifest and manifest.get("snapshot"):
        import json

        from arborag.query import snapshot_embed_config

        info = json.loads((holder.corpus.published_dir() / "info.json").read_text(encoding="utf-8"))
        snapshot_embed_config(info, holder.config)  # raises the reason a query cannot use its embedder
        raise ToolInputError(f"the published snapshot {manifest['snapshot']} cannot be opened; the server's log says why")
    raise ToolInputError(_NO_INDEX)


def _check_text(text: str, limits: Limits, what: str = "text") -> str:
    if not text or not text.strip():
        raise ToolInputError(f"{what} is empty: give the question or keywords to search for")
    if len(text) > limits.max_text_chars:
        raise ToolInputError(f"{what} is {len(text)} characters, over the limit of {limits.max_text_chars}")
    return text


def _check_search_args(mode: str, budget: int, k: int, doc_ids: Sequence[str] | None, levels: Sequence[int] | None,
                       limits: Limits) -> None:
    from arborag.query.modes import available_modes

    modes = available_modes()
    if mode not in modes:
        raise ToolInputError(f"unknown mode {mode!r}: use one of {', '.join(modes)} (or leave mode out for the server's configured query.mode)")
    if not 1 <= budget <= limits.max_budget:
        raise ToolInputError(f"budget {budget} is out of range: a token budget from 1 to {limits.max_budget}")
    if not 1 <= k <= limits.max_k:
        raise ToolInputError(f"k {k} is out of range: from 1 to {limits.max_k}")
    if doc_ids is not None and len(doc_ids) > limits.max_filter_ids:
        raise ToolInputError(f"doc_ids has {len(doc_ids)} ids, over the limit of {limits.max_filter_ids}")
    if levels is not None and any(lv < 0 for lv in levels):
        raise ToolInputError("levels are tree levels: 0 (leaf chunks) and up")


def _sources(doc_ids: Sequence[str], docs: dict[str, tuple[str | None, str]]) -> list[dict[str, Any]]:
    return [{"doc_id": d, "title": docs.get(d, (None, None))[0], "uri": docs.get(d, (None, None))[1]} for d in doc_ids]


def search(holder: Any, text: str, *, mode: str | None = None, budget: int | None = None, k: int | None = None,
           lucene: bool = False, strict_lucene: bool = False, doc_ids: Sequence[str] | None = None,
           levels: Sequence[int] | None = None, limits: Limits) -> dict[str, Any]:
    """Hits of ``text`` in the current snapshot, best first, within ``budget`` tokens. ``mode``,
    ``budget``, ``k`` not given: ``query.*`` of the server's config (as every front door);
    ``text`` is plain words unless ``lucene``."""
    from arborag.errors import QueryError
    from arborag.query.modes import MODES
    from arborag.query.options import FROM_CONFIG, query_settings

    mode, budget, k = query_settings(holder.config.query, mode=mode, budget=FROM_CONFIG if budget is None else budget, k=k)
    assert budget is not None  # a tool call always has a token budget: the config's is a number
    _check_text(text, limits)
    _check_search_args(mode, budget, k, doc_ids, levels, limits)
    with holder.lease() as snap:
        index = _need(snap, holder).index
        args: dict[str, Any] = dict(mode=mode, budget=budget, k=k, levels=list(levels) if levels else None,
                                    doc_ids=list(doc_ids) if doc_ids else None)
        if MODES[mode].uses_vector:
            args["vector"] = index.embed_queries([text])[0]  # once, even when a Lucene retry follows
        lucene_error = None
        try:
            hits = index.search(text, lucene=lucene, **args)
        except QueryError as exc:
            if not lucene or strict_lucene:
                raise ToolInputError(f"{exc}; fix the query (Lucene syntax: field:term, \"a phrase\", AND/OR/NOT, "
                                     "(groups), term^2), or call again with lucene=false to match its words") from None
            hits = index.search(text, lucene=False, **args)
            lucene_error = {"error": exc.reason, "position": exc.position, "retried_as": "plain words"}
        docs = snap.documents()
        out = []
        for h in hits:
            hit = {"node_id": h.node_id, "level": h.level, "score": round(float(h.score), 6), "tokens": h.n_tokens,
                   "text": h.text, "sources": _sources(h.doc_ids, docs)}
            if h.start_char is not None:
                hit.update(start_char=h.start_char, end_char=h.end_char)
            out.append(hit)
        return {"snapshot": snap.id, "mode": mode, "budget": budget, "tokens": sum(h.n_tokens for h in hits),
                "lucene": lucene_error, "hits": out}


def get_node(holder: Any, node_id: str) -> dict[str, Any]:
    """A node of the tree with its parents and children (previews)."""
    import polars as pl

    if not node_id or len(node_id) > 200:
        raise ToolInputError("node_id must be a node id from search or tree_top (e.g. the 'node_id' of a hit)")
    with holder.lease() as snap:
        nodes, edges = _need(snap, holder).tables()
        row = nodes.filter(pl.col("node_id") == node_id)
        if row.height == 0:
            raise ToolInputError(f"no node {node_id!r} in snapshot {snap.id}: use a node_id from search or tree_top")
        r = row.row(0, named=True)
        brief = nodes.select("node_id", "level", pl.col("n_tokens").alias("tokens"),
                             pl.col("text").str.slice(0, PREVIEW_CHARS).alias("preview"))

        def refs(key: str, other: str) -> list[dict[str, Any]]:
            linked = (edges.filter(pl.col(key) == node_id).select(pl.col(other).alias("node_id"), "probability")
                      .join(brief, on="node_id", how="inner").sort(["level", "probability", "node_id"], descending=[True, True, False]))
            return linked.to_dicts()

        return {"snapshot": snap.id, "node_id": r["node_id"], "level": r["level"], "tokens": r["n_tokens"], "text": r["text"],
                "sources": _sources(r["doc_ids"], snap.documents()), "summary_status": r["summary_status"],
                "parents": refs("child_id", "parent_id"), "children": refs("parent_id", "child_id")}


def get_chunk(holder: Any, doc_id: str, start_char: int, end_char: int, *, limits: Limits) -> dict[str, Any]:
    """Characters ``[start_char, end_char)`` of a document of the snapshot (offsets as in hits)."""
    import polars as pl

    if start_char < 0 or end_char <= start_char:
        raise ToolInputError(f"offsets [{start_char}, {end_char}) are not a span: need 0 <= start_char < end_char")
    if end_char - start_char > limits.max_chunk_chars:
        raise ToolInputError(f"the span is {end_char - start_char} characters, over the limit of {limits.max_chunk_chars}: "
                             "ask for a shorter one")
    with holder.lease() as snap:
        docs = pl.DataFrame(_need(snap, holder).index.documents().select(["doc_id", "title", "uri", "text"]))
        row = docs.filter(pl.col("doc_id") == doc_id)
        if row.height == 0:
            raise ToolInputError(f"no document {doc_id!r} in snapshot {snap.id}: use a doc_id from the sources of a hit")
        d = row.row(0, named=True)
        text = d["text"] or ""
        if start_char >= len(text):
            raise ToolInputError(f"start_char {start_char} is past the end of the document ({len(text)} characters)")
        end = min(end_char, len(text))
        return {"snapshot": snap.id, "doc_id": doc_id, "title": d["title"], "uri": d["uri"], "start_char": start_char,
                "end_char": end, "doc_chars": len(text), "text": text[start_char:end]}


def tree_top(holder: Any, *, max_nodes: int, limits: Limits) -> dict[str, Any]:
    """The top of the tree: nodes with no parent, highest level first, with summary previews."""
    import polars as pl

    if not 1 <= max_nodes <= limits.max_top:
        raise ToolInputError(f"max_nodes {max_nodes} is out of range: from 1 to {limits.max_top}")
    with holder.lease() as snap:
        nodes, edges = _need(snap, holder).tables()
        children = edges.group_by("parent_id").len().rename({"parent_id": "node_id", "len": "children"})
        roots = (nodes.join(edges.select(pl.col("child_id").alias("node_id")).unique(), on="node_id", how="anti")
                 .join(children, on="node_id", how="left").with_columns(pl.col("children").fill_null(0))
                 .sort(["level", "n_tokens", "node_id"], descending=[True, True, False]))
        top = roots.head(max_nodes)
        docs = snap.documents()
        return {
            "snapshot": snap.id, "levels": snap.levels, "roots": roots.height,
            "nodes": [{"node_id": r["node_id"], "level": r["level"], "children": r["children"], "tokens": r["n_tokens"],
                       # the node's label (c-TF-IDF keywords and a title; null in snapshots built before labels)
                       "label": r.get("title"), "keywords": list(r.get("keywords") or []),
                       "summary": r["text"][:PREVIEW_CHARS], "documents": len(r["doc_ids"]),
                       "titles": [docs.get(d, (None, None))[0] or d for d in r["doc_ids"][:3]]}
                      for r in top.iter_rows(named=True)],
        }


def ask(holder: Any, question: str, *, mode: str | None = None, budget: int | None = None, k: int | None = None,
        limits: Limits) -> dict[str, Any]:
    """A cited answer from the configured LLM over the hits of ``question`` (defaults as :func:`search`)."""
    from arborag.llm.configured import llm_from_config
    from arborag.query.answer import ask as ask_question
    from arborag.query.options import FROM_CONFIG, query_settings

    mode, budget, k = query_settings(holder.config.query, mode=mode, budget=FROM_CONFIG if budget is None else budget, k=k)
    assert budget is not None

    _check_text(question, limits, "question")
    _check_search_args(mode, budget, k, None, None, limits)
    with holder.lease() as snap:
        index = _need(snap, holder).index
        llm = llm_from_config(index.config, cache_dir=index.corpus.cache_dir / "llm")
        try:
            answer = ask_question(index, question, llm=llm, mode=mode, budget=budget, k=k)
        finally:
            if llm is not None:
                llm.close()
        return {"snapshot": snap.id, **answer.to_dict()}


def snapshot_info(holder: Any) -> dict[str, Any]:
    """The published snapshot's ``info.json`` (build key, embedder, counts, run) and the modes on offer."""
    from arborag.query.modes import available_modes

    with holder.lease() as snap:
        _need(snap, holder)
        return {"snapshot": snap.id, "levels": snap.levels, "documents": len(snap.documents()), "modes": list(available_modes()),
                "info": snap.info}
