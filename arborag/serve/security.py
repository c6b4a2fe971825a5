"""Request guards: the optional bearer token and the request body size limit.

The token is compared in constant time and never logged or echoed; it lives only in the
closure of the dependency made here.
"""

from __future__ import annotations

import hmac
from typing import Any, Awaitable, Callable

from fastapi import HTTPException, Request, status

__all__ = ["bearer_guard", "BodySizeLimit"]


def bearer_guard(token: str | None) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency: no token configured -> open; else 401 without, 403 with a wrong one."""
    expected = token.encode("utf-8") if token else None

    async def guard(request: Request) -> None:
        if expected is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                detail="this server needs a bearer token: send 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not hmac.compare_digest(given.strip().encode("utf-8"), expected):
            raise HTTPException(status.HTTP_403_FORBIDDEN, detail="the bearer token is not valid")

    guard.required = expected is not None  # type: ignore[attr-defined]
    return guard


class BodySizeLimit:
    """Pure ASGI middleware: a body over ``max_bytes`` is a 413, whether or not it declares its length."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.max_bytes:
                    await self._reject(send)
                    return
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # FastAPI passes an HTTPException raised while reading the body straight through
                    raise HTTPException(413, detail=self._detail())
            return message

        await self.app(scope, limited, send)

    def _detail(self) -> str:
        return f"the request body is over the limit of {self.max_bytes} bytes"

    async def _reject(self, send: Callable) -> None:
        import json

        body = json.dumps({"detail": self._detail()}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
