"""What the TEST DOUBLES of OpenAI-compatible servers share (tests/fake_llm_server.py,
tests/fake_embed_server.py): a real stdlib HTTP server on 127.0.0.1 (an ephemeral port, a
background thread), scripted steps, a record of every request and the peak of requests in flight.

A fake is a :class:`ScriptedServer` with its own ``Step`` dataclass and a handler class (a
:class:`JsonHandler`) that answers its routes; the handler asks ``fake._next_step(text)`` for the
step of a request, and runs the step between ``fake._enter()`` and ``fake._leave()``.
``server.script("needle", step1, step2, ...)``: requests whose text (each fake says which text)
contains ``"needle"`` take the steps in order, the last one repeating; the others take ``default``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Generic, TypeVar

__all__ = ["JsonHandler", "ScriptedServer"]

S = TypeVar("S")  # a fake's Step
R = TypeVar("R")  # a fake's RecordedRequest


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: Any


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet handler that reads and writes JSON; ``self.server.fake`` is the fake."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output clean

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def _read_json(self) -> Any:
        """The request body as JSON (None when there is none or it is not JSON)."""
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"null")
        except json.JSONDecodeError:
            return None

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_error(self, status: int, message: str, headers: Mapping[str, str] | None = None, **extra: Any) -> None:
        """An OpenAI-style error body: ``{"error": {"message", "type", ...}}``."""
        kind = "server_error" if status >= 500 else "invalid_request_error"
        self._send_json(status, {"error": {"message": message, "type": kind, **extra}}, headers)

    def _no_route(self) -> None:
        self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})


class ScriptedServer(Generic[S, R]):
    """Lifecycle, scripting and the request record of a fake. Use as a context manager."""

    handler: ClassVar[type[JsonHandler]]

    def __init__(self, default: S) -> None:
        self.default = default
        self._rules: list[tuple[str, list[S]]] = []
        self._lock = threading.Lock()
        self._requests: list[R] = []
        self._in_flight = 0
        self.max_in_flight = 0
        self._stopping = threading.Event()
        self._httpd: _Server | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Any:
        httpd = _Server(("127.0.0.1", 0), self.handler)
        httpd.fake = self
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting -------------------------------------------------------------------------
    def script(self, match: str, *steps: S) -> None:
        """Requests whose text contains ``match`` take ``steps`` in order; the last repeats."""
        if not steps:
            raise ValueError("script() needs at least one step")
        with self._lock:
            self._rules.append((match, list(steps)))

    def clear_scripts(self) -> None:
        """Drop every rule: requests take the ``default`` step again (an endpoint that recovered)."""
        with self._lock:
            self._rules.clear()

    # -- what happened ---------------------------------------------------------------------
    @property
    def requests(self) -> list[R]:
        with self._lock:
            return list(self._requests)

    # -- internals (called from handler threads) -------------------------------------------
    def _record(self, req: R) -> None:
        with self._lock:
            self._requests.append(req)

    def _next_step(self, *texts: str) -> S:
        """The step of a request whose texts are ``texts`` (the first rule one of them matches)."""
        with self._lock:
            for match, steps in self._rules:
                if any(match in t for t in texts):
                    return steps.pop(0) if len(steps) > 1 else steps[0]
            return self.default

    def _stopped_during(self, delay_s: float) -> bool:
        """Wait ``delay_s`` (a scripted delay); True when the server was stopped meanwhile."""
        return bool(delay_s) and self._stopping.wait(delay_s)

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1
