"""The MCP server over one corpus (the official ``mcp`` SDK's :class:`MCPServer`).

Tools: ``search``, ``get_node``, ``get_chunk``, ``tree_top`` and, when an LLM is configured,
``ask``; resource ``arborag://snapshot/info``. The snapshot holder and resident query embedder
are those of ``arborag serve`` (:mod:`arborag.serve.state`, :mod:`arborag.serve.embedders`):
the model stays loaded, and a newly published snapshot is picked up between calls. Tool work
runs in a worker thread, so the event loop keeps answering (and an HTTP client can cancel).

Transports: stdio (:func:`run_stdio`) and streamable HTTP (:func:`http_app`, bound to
127.0.0.1 by the CLI unless told otherwise), which takes the same bearer-token rule as
``arborag serve`` (:func:`arborag.serve.security.bearer_guard`).
"""

import functools  # no `from __future__ import annotations`: the SDK evaluates the tools' annotations
import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from arborag.config import ArboragConfig, QueryConfig
from arborag.extras import extra
from arborag.mcpserver import tools
from arborag.mcpserver.tools import Limits

__all__ = ["create_server", "http_app", "instructions", "run_stdio"]

def instructions(query: QueryConfig) -> str:
    """The server's instructions to an agent, naming the configured defaults (``query.mode``,
    ``query.budget``) a `search` without them gets."""
    return (
        "arborag: retrieval over one corpus, as a RAPTOR tree of leaf chunks and summaries. Start with `search` "
        f"(ask in plain words; without a mode it uses this server's configured mode, {query.mode}, and a budget of "
        f"{query.budget} tokens; the hits fill the token budget, best first). `get_node` shows a hit's "
        "parents (summaries above it) and children; `get_chunk` reads a document by character offsets; `tree_top` "
        "lists the summaries at the top of the tree with their labels (what the corpus is about). Resource arborag://snapshot/info "
        "describes the index."
    )


def create_server(corpus_dir: str | Path, *, config: ArboragConfig | None = None, limits: Limits | None = None,
                  embedders: Any | None = None, warm: bool = False) -> tuple[Any, Any]:
    """``(MCPServer, SnapshotHolder)`` over the published snapshot of ``corpus_dir``.

    ``warm``: open the snapshot and load the query embedder now (else the first call does).
    """
    with extra("mcp", "arborag mcp"):
        from mcp.server.mcpserver import MCPServer

    from arborag.config import load_config
    from arborag.llm.configured import llm_configured
    from arborag.serve.embedders import ResidentEmbedders
    from arborag.serve.state import SnapshotHolder

    cfg = config or load_config()
    lim = limits or Limits()
    holder = SnapshotHolder(corpus_dir, cfg, embedders or ResidentEmbedders())
    if warm:
        _warm(holder)
    server = MCPServer("arborag", instructions=instructions(cfg.query), version=_version(), log_level="WARNING")

    async def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
        import anyio

        from arborag.errors import ArboragError

        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, holder, *args, **kwargs))
        except tools.ToolInputError:
            raise
        except ArboragError as exc:  # an unreachable endpoint, an embedder mismatch ...: said, not a crash
            raise tools.ToolInputError(str(exc)) from None

    q = cfg.query  # the defaults of every front door (arborag.query.options.query_settings), shown in the schema

    @server.tool(description="Search the corpus: the best tree nodes (leaf chunks and summaries) for a question or "
                             "keywords, best first, within a token budget. The text is plain words (a question ending "
                             "in '?' is fine) unless lucene=true. Returns node ids, scores, texts and sources.")
    async def search(
        text: Annotated[str, Field(description="The question or keywords (plain text; Lucene syntax only with lucene=true).")],
        mode: Annotated[str, Field(description=f"Retrieval mode (default: the server's query.mode, {q.mode}): hop, auto "
                                               "(dense + BM25 fused), collapsed, traversal, sparse (BM25), hybrid, or a "
                                               "plug-in mode (see resource arborag://snapshot/info).")] = q.mode,
        budget: Annotated[int, Field(description=f"Token budget of the returned context (1..{lim.max_budget}).")] = q.budget,
        k: Annotated[int, Field(description=f"traversal: nodes per level (1..{lim.max_k}).")] = q.k,
        lucene: Annotated[bool, Field(description="Read text as a Lucene query in the sparse part (field:term, "
                                                  "\"phrase\", AND/OR/NOT, term^2); false: plain words.")] = False,
        strict_lucene: Annotated[bool, Field(description="With lucene=true: a malformed Lucene query is an error (true) "
                                                         "or is retried as plain words and reported (false).")] = False,
        doc_ids: Annotated[list[str] | None, Field(description="Only nodes of these documents.")] = None,
        levels: Annotated[list[int] | None, Field(description="Only these tree levels (0 = leaf chunks).")] = None,
    ) -> dict[str, Any]:
        return await run(tools.search, text, mode=mode, budget=budget, k=k, lucene=lucene, strict_lucene=strict_lucene,
                         doc_ids=doc_ids, levels=levels, limits=lim)

    @server.tool(description="A node of the tree by id (from search or tree_top): its text, sources, and its parents "
                             "(the summaries above it) and children (what it summarizes), with previews.")
    async def get_node(node_id: Annotated[str, Field(description="A node_id from search or tree_top.")]) -> dict[str, Any]:
        return await run(tools.get_node, node_id)

    @server.tool(description="Read a document of the corpus by character offsets (a hit's start_char/end_char, or any "
                             f"span of at most {lim.max_chunk_chars} characters).")
    async def get_chunk(
        doc_id: Annotated[str, Field(description="A doc_id from the sources of a hit.")],
        start_char: Annotated[int, Field(description="First character (0-based).")],
        end_char: Annotated[int, Field(description="One past the last character.")],
    ) -> dict[str, Any]:
        return await run(tools.get_chunk, doc_id, start_char, end_char, limits=lim)

    @server.tool(description="The top of the tree: the nodes no summary sits above (highest level first) with a "
                             "preview of their summary text, child counts and document titles; what the corpus is about.")
    async def tree_top(
        max_nodes: Annotated[int, Field(description=f"How many nodes (1..{lim.max_top}).")] = 20,
    ) -> dict[str, Any]:
        return await run(tools.tree_top, max_nodes=max_nodes, limits=lim)

    if llm_configured(cfg):

        @server.tool(description="Answer a question from the corpus with the configured LLM, citing the retrieved "
                                 "passages as [1], [2] (with their node ids and sources).")
        async def ask(
            question: Annotated[str, Field(description="The question.")],
            mode: Annotated[str, Field(description=f"Retrieval mode (as in search; default: query.mode, {q.mode}).")] = q.mode,
            budget: Annotated[int, Field(description=f"Token budget of the context (1..{lim.max_budget}).")] = q.budget,
            k: Annotated[int, Field(description="traversal: nodes per level.")] = q.k,
        ) -> dict[str, Any]:
            return await run(tools.ask, question, mode=mode, budget=budget, k=k, limits=lim)

    @server.resource("arborag://snapshot/info", name="snapshot-info", mime_type="application/json",
                     description="The published snapshot: id, node counts per level, documents, the embedder and sparse "
                                 "backend that built it, the build run, and the retrieval modes on offer.")
    async def snapshot_info() -> str:
        return json.dumps(await run(tools.snapshot_info), default=str)

    return server, holder


def _warm(holder: Any) -> None:
    """Open the published snapshot and load the query embedder (nothing published yet: nothing to do)."""
    snap = holder.refresh(wait=True)
    if snap is not None:
        snap.index.embed_queries(["warm up"])


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("arborag")
    except PackageNotFoundError:  # a source checkout
        return "0"


def run_stdio(server: Any) -> None:
    """Serve over stdin/stdout until the client closes them."""
    server.run("stdio")


def http_app(server: Any, *, token: str | None) -> Any:
    """The streamable-HTTP ASGI app at ``/mcp``, behind ``arborag serve``'s bearer-token rule."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    from arborag.serve.security import bearer_guard

    inner = server.streamable_http_app(streamable_http_path="/mcp")
    guard = bearer_guard(token)

    async def app(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            from fastapi import HTTPException

            try:
                await guard(Request(scope))
            except HTTPException as exc:
                response = JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
                await response(scope, receive, send)
                return
        await inner(scope, receive, send)

    return app
