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

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fake_http import JsonHandler, ScriptedServer

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


class _Handler(JsonHandler):
    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        fake = self.server.fake
        fake._record(RecordedRequest("GET", self.path, self._headers(), None, time.monotonic(), None))
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [{"id": fake.model, "object": "model", "owned_by": "fake"}]})
        else:
            self._no_route()

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        fake = self.server.fake
        body = self._read_json()
        if not self.path.rstrip("/").endswith("/chat/completions"):
            fake._record(RecordedRequest("POST", self.path, self._headers(), body, time.monotonic(), None))
            self._no_route()
            return
        last = RecordedRequest("POST", self.path, {}, body, 0.0, None).last_message
        step = fake._next_step(last)
        fake._record(RecordedRequest("POST", self.path, self._headers(), body, time.monotonic(), step))
        fake._enter()
        try:
            if fake._stopped_during(step.delay_s):
                return
            if step.status >= 400:
                msg = step.message or f"scripted error {step.status}"
                if step.echo_auth:
                    msg += f" (you sent {self.headers.get('Authorization')})"
                self._send_error(step.status, msg, step.headers)
                return
            self._send_json(200, fake._completion(body if isinstance(body, dict) else {}, last, step), step.headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): fine
        finally:
            fake._leave()


class FakeLLMServer(ScriptedServer[Step, RecordedRequest]):
    """Test double of an OpenAI-compatible endpoint. Use as a context manager."""

    handler = _Handler

    def __init__(self, *, model: str = "fake-model", default: Step | None = None) -> None:
        super().__init__(default or reply())
        self.model = model

    def completions(self, match: str | None = None) -> list[RecordedRequest]:
        """Recorded chat-completion requests, optionally only those whose last message has ``match``."""
        return [
            r
            for r in self.requests
            if r.path.rstrip("/").endswith("/chat/completions") and (match is None or match in r.last_message)
        ]

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
