"""An HTTP API and a search page over a built corpus (FastAPI; run with ``arborag serve``).

    from arborag.serve import create_app
    app = create_app("/tmp/demo", token=None)

Endpoints: ``POST /search``, ``POST /ask`` (501 until an LLM-backed searcher exists),
``GET /nodes/{id}``, ``GET /documents/{id}``, ``GET /health``, ``GET /stats``, the search page
at ``/`` and the OpenAPI docs at ``/docs``.

FastAPI is imported on first use of :func:`create_app` / :class:`Limits`, not with the package,
so registering ``arborag serve`` keeps ``arborag --help`` fast.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Limits", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from arborag.serve.app import create_app

        return create_app
    if name == "Limits":
        from arborag.serve.models import Limits

        return Limits
    raise AttributeError(f"module 'arborag.serve' has no attribute {name!r}")
