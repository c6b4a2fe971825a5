"""A TEST DOUBLE: a real local HTTP server that speaks the OpenAI chat-completions API.

It is not a language model. It listens on 127.0.0.1 on an ephemeral port (stdlib
``http.server`` in a background thread), answers ``POST /v1/chat/completions`` and
``GET /v1/models``, and replies as scripted by the test:

- :func:`reply` — a normal completion (with or without ``usage``), optionally after a delay;
- :func:`slow` — a reply that comes later than the client's timeout;
- :func:`error` — an HTTP error (500, 429 with ``Retry-After``, 401, …) with an OpenAI-style body.

``server.script("needle", step1, step2, ...)``: requests whose last message contains
``"needle"`` take the steps in order; the last step repeats forever (so
``script("x", error(500))`` is a permanent failure). Requests no rule matches take the
``default`` step: a reply ``"fake summary of: <the last 60 characters of the prompt>"``.

Every request is recorded (:attr:`FakeLLMServer.requests`), and the server tracks how many
were in flight at once (:attr:`FakeLLMServer.max_in_flight`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeLLMServer", "RecordedRequest", "Step", "error", "reply", "slow"]


@dataclass(frozen=True)
class Step:
    """What the server does with one request."""

    status: int = 200
    text: str | None = None  # reply text; None = the default "fake summary of: ..."
    usage: bool = True  # include a ``usage`` object in the reply
    prompt_tokens: int | None = None  # None = number of whitespace words in all messages
    completion_tokens: int | None = None  # None = number of whitespace words in the reply
    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)
    message: str | None = None  # error message for status >= 400
    echo_auth: bool = False  # put the request's Authorization header in the error body


def reply(
    text: str | None = None,
    *,
    usage: bool = True,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    delay_s: float = 0.0,
) -> Step:
    return Step(text=text, usage=usage, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, delay_s=delay_s)


def slow(delay_s: float, text: str | None = None) -> Step:
    """A reply that arrives after ``delay_s`` seconds (longer than the client's timeout)."""
    return Step(text=text, delay_s=delay_s)


def error(
    status: int,
    *,
    retry_after: str | None = None,
    retry_after_ms: str | None = None,
    message: str | None = None,
    echo_auth: bool = False,
) -> Step:
    headers: dict[str, str] = {}
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    if retry_after_ms is not None:
        headers["retry-after-ms"] = retry_after_ms
    return Step(status=status, headers=headers, message=message, echo_auth=echo_auth)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any
    received_at: float  # time.monotonic()
    step: Step | None

    @property
    def last_message(self) -> str:
        try:
            return str(self.body["messages"][-1]["content"])
        except (KeyError, IndexError, TypeError):
            return ""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output clean

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        fake = self.server.fake
        fake._record(RecordedRequest("GET", self.path, self._headers(), None, time.monotonic(), None))
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [{"id": fake.model, "object": "model", "owned_by": "fake"}]})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except json.JSONDecodeError:
            body = None
        if not self.path.rstrip("/").endswith("/chat/completions"):
            fake._record(RecordedRequest("POST", self.path, self._headers(), body, time.monotonic(), None))
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        last = ""
        if isinstance(body, dict):
            try:
                last = str(body["messages"][-1]["content"])
            except (KeyError, IndexError, TypeError):
                last = ""
        step = fake._next_step(last)
        fake._record(RecordedRequest("POST", self.path, self._headers(), body, time.monotonic(), step))
        fake._enter()
        try:
            if step.delay_s and fake._stopping.wait(step.delay_s):
                return
            if step.status >= 400:
                msg = step.message or f"scripted error {step.status}"
                if step.echo_auth:
                    msg += f" (you sent {self.headers.get('Authorization')})"
                self._send_json(
                    step.status,
                    {"error": {"message": msg, "type": "server_error" if step.status >= 500 else "invalid_request_error"}},
                    step.headers,
                )
                return
            self._send_json(200, fake._completion(body if isinstance(body, dict) else {}, last, step), step.headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): fine
        finally:
            fake._leave()

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeLLMServer


class FakeLLMServer:
    """Test double of an OpenAI-compatible endpoint. Use as a context manager."""

    def __init__(self, *, model: str = "fake-model", default: Step | None = None) -> None:
        self.model = model
        self.default = default or reply()
        self._rules: list[tuple[str, list[Step]]] = []
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._in_flight = 0
        self.max_in_flight = 0
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeLLMServer:
        httpd = _Server(("127.0.0.1", 0), _Handler)
        httpd.fake = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeLLMServer:
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

    # -- scripting ---------------------------------------------------------------------------
    def script(self, match: str, *steps: Step) -> None:
        """Requests whose last message contains ``match`` take ``steps`` in order; the last repeats."""
        if not steps:
            raise ValueError("script() needs at least one step")
        with self._lock:
            self._rules.append((match, list(steps)))

    def clear_scripts(self) -> None:
        """Drop every rule: requests take the ``default`` step again (an endpoint that recovered)."""
        with self._lock:
            self._rules.clear()

    # -- what happened -----------------------------------------------------------------------
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def completions(self, match: str | None = None) -> list[RecordedRequest]:
        """Recorded chat-completion requests, optionally only those whose last message has ``match``."""
        return [
            r
            for r in self.requests
            if r.path.rstrip("/").endswith("/chat/completions") and (match is None or match in r.last_message)
        ]

    # -- internals (called from handler threads) ---------------------------------------------
    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(req)

    def _next_step(self, last_message: str) -> Step:
        with self._lock:
            for match, steps in self._rules:
                if match in last_message:
                    return steps.pop(0) if len(steps) > 1 else steps[0]
            return self.default

    def _enter(self) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _completion(self, body: dict[str, Any], last: str, step: Step) -> dict[str, Any]:
        text = step.text if step.text is not None else f"fake summary of: {last[-60:]}"
        payload: dict[str, Any] = {
            "id": f"chatcmpl-fake-{len(self._requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop", "logprobs": None}
            ],
        }
        if step.usage:
            words = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []) if isinstance(m, dict))
            p = step.prompt_tokens if step.prompt_tokens is not None else words
            c = step.completion_tokens if step.completion_tokens is not None else len(text.split())
            payload["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
        return payload
