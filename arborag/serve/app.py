"""The FastAPI application over one corpus: :func:`create_app`.

    from arborag.serve import create_app
    app = create_app("/tmp/demo")                 # then: uvicorn.run(app, host="127.0.0.1")

Security defaults: no token unless given (``arborag serve`` reads ``ARBORAG_SERVE_TOKEN``),
CORS off unless origins are given, request bodies and k/budget bounded by :class:`Limits`,
and no route takes a filesystem path from the request: the corpus is fixed at start.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any, AsyncIterator, Sequence

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response

from arborag.config import ArboragConfig, load_config
from arborag.errors import BackendUnavailable, NotBuiltError, QueryError, SnapshotNotFound
from arborag.serve.models import Limits
from arborag.serve.security import BodySizeLimit, bearer_guard

__all__ = ["create_app"]

_STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


_MODES_MARK = "      <!-- MODES: filled by the server from the mode registry (arborag/query/modes.py) -->\n"


def _mode_options(default: str) -> str:
    """The search page's mode choices: every registered mode, ``default`` (``query.mode``) selected."""
    from html import escape

    from arborag.query.modes import MODES

    return "".join(f'      <option value="{escape(m.name)}" title="{escape(m.description)}"{" selected" if m.name == default else ""}>'
                   f"{escape(m.name)}</option>\n" for m in MODES.values())


_BUDGET_MARK = "__QUERY_BUDGET__"


def search_page(query: Any) -> str:
    """The search page with the server's query defaults filled in: ``query.mode`` selected among
    the registered modes, ``query.budget`` in the budget field."""
    page = _static("index.html")
    return page.replace(_MODES_MARK, _mode_options(query.mode)).replace(_BUDGET_MARK, str(int(query.budget)))


def _static(name: str) -> str:
    return resources.files("arborag.serve").joinpath("static", name).read_text(encoding="utf-8")


def _validation_message(errors: Sequence[dict[str, Any]]) -> str:
    parts = []
    for e in errors:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path"))
        parts.append(f"{loc or 'body'}: {e.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def create_app(
    corpus_dir: str | Path,
    *,
    token: str | None = None,
    cors_origins: Sequence[str] | None = None,
    limits: Limits | None = None,
    config: ArboragConfig | None = None,
    warm: bool = False,
    embedders: Any | None = None,
    lease_ttl_s: float = 600.0,
    old_snapshot_idle_s: float = 300.0,
    snapshot: str | None = None,
) -> FastAPI:
    """The HTTP API and search page over the published snapshot of ``corpus_dir``.

    The index is opened once and kept; a newly published snapshot is switched to between
    requests. ``warm=True`` opens the index and loads the query embedder at startup instead of
    on the first request. ``embedders`` (a :class:`~arborag.serve.embedders.ResidentEmbedders`)
    lets several apps in one process share one loaded model.

    Every snapshot the server has open is leased on the corpus (renewed every ``lease_ttl_s / 3``),
    so retention never removes it under the server; an earlier snapshot a request named stays open
    ``old_snapshot_idle_s`` after its last use (:mod:`arborag.serve.state`). ``snapshot`` pins the
    server to that retained snapshot (id or unique prefix): it answers from it and never follows
    a publish; the lease keeps it on disk for as long as the server runs.
    """
    from arborag.serve.api import make_router
    from arborag.serve.embedders import ResidentEmbedders
    from arborag.serve.state import SnapshotHolder

    limits = limits or Limits()
    holder = SnapshotHolder(corpus_dir, config or load_config(), embedders or ResidentEmbedders(),
                            ttl_s=lease_ttl_s, old_idle_s=old_snapshot_idle_s, pinned=snapshot)
    if snapshot is not None:
        holder.refresh(wait=True)  # fail at start (SnapshotNotFound) rather than on the first request
    guard = bearer_guard(token)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if warm:
            import anyio

            await anyio.to_thread.run_sync(_warm_up, holder)
        try:
            yield
        finally:
            holder.close()  # release the reader leases now rather than when they expire

    app = FastAPI(
        title="arborag",
        summary="Hierarchical (RAPTOR-style) retrieval over a built corpus",
        description="Search the published snapshot of one corpus. API calls need `Authorization: Bearer <token>` "
                    "when the server was started with a token. The search page is at `/`.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.holder = holder
    app.state.limits = limits

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = jsonable_encoder(exc.errors(), custom_encoder={Exception: str})
        return JSONResponse({"detail": _validation_message(errors), "errors": errors}, 422)

    @app.exception_handler(QueryError)
    async def _bad_query(_: Request, exc: QueryError) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "position": exc.position, "reason": exc.reason}, status.HTTP_400_BAD_REQUEST)

    @app.exception_handler(SnapshotNotFound)
    async def _no_snapshot(_: Request, exc: SnapshotNotFound) -> JSONResponse:
        shown = ", ".join(exc.available[:8]) + (f" (and {len(exc.available) - 8} more)" if len(exc.available) > 8 else "")
        return JSONResponse({"detail": f"snapshot {exc.ref!r} is not retained by this corpus (removed by retention, never "
                                       f"published, or an ambiguous prefix); retained: {shown or 'none'}. GET /snapshots lists "
                                       "them with their publication times; `arborag snapshots list` on the server too.",
                             "retained": exc.available}, status.HTTP_404_NOT_FOUND)

    @app.exception_handler(NotBuiltError)
    @app.exception_handler(BackendUnavailable)
    async def _unavailable(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status.HTTP_503_SERVICE_UNAVAILABLE)

    app.include_router(make_router(holder, limits, guard))

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(search_page(holder.config.query), headers=_PAGE_HEADERS)

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str) -> Response:
        if name not in _STATIC:  # a fixed set of packaged files; the name never becomes a path
            return JSONResponse({"detail": "not found"}, status.HTTP_404_NOT_FOUND)
        return Response(_static(name), media_type=_STATIC[name], headers=_PAGE_HEADERS)

    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"], allow_credentials=False)
    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes)
    return app


def _warm_up(holder: Any) -> None:
    """Open the published snapshot and load its query embedder (one tiny query)."""
    snap = holder.refresh(wait=True)
    if snap is not None:
        snap.index.embed_queries(["warm up"])
