"""An HTTP API and a search page over a built corpus (FastAPI; run with ``arborag serve``).

    from arborag.serve import create_app
    app = create_app("/tmp/demo", token=None)

Endpoints: ``POST /search``, ``POST /ask`` (501 until an LLM-backed searcher exists),
``GET /nodes/{id}``, ``GET /documents/{id}``, ``GET /health``, ``GET /stats``, the search page
at ``/`` and the OpenAPI docs at ``/docs``.
"""

from arborag.serve.app import create_app
from arborag.serve.models import Limits

__all__ = ["Limits", "create_app"]
