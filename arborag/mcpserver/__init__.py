"""arborag as an MCP server for agents (``arborag mcp --corpus DIR``; the official ``mcp`` SDK).

Named ``mcpserver`` so it never shadows the SDK's ``mcp`` package. A top-floor package like
``arborag.serve`` (whose snapshot holder and resident embedder it uses): imports of ``query``
and ``serve`` happen inside functions. ``pip install 'arborag[mcp]'`` brings the SDK.
"""

from __future__ import annotations

__all__ = ["create_server"]


def create_server(*args, **kwargs):  # noqa: ANN002, ANN003 - see arborag.mcpserver.server.create_server
    """:func:`arborag.mcpserver.server.create_server` (the SDK is imported on call)."""
    from arborag.mcpserver.server import create_server as _create

    return _create(*args, **kwargs)
