"""A TEST DOUBLE: a real local HTTP server that speaks the OpenAI embeddings API.

It is not an embedding model. It listens on 127.0.0.1 on an ephemeral port (stdlib
``http.server`` in a background thread), answers ``POST /v1/embeddings`` and ``GET /v1/models``.
Its vectors are deterministic functions of the text: feature hashing of the lower-cased words
(each word adds +1 or -1 to one of ``dim`` coordinates chosen by its BLAKE2b hash), so texts
sharing words have a positive cosine and the same text always gets the same vector. With
``dimensions`` in a request the vector is cut to that size (as models that support shortening
do), unless the server is told to ignore it.

Faults are scripted by the test: ``server.script("needle", step1, step2, ...)`` — requests with
an input containing ``"needle"`` take the steps in order, the last one repeating; other requests
take ``default`` (a normal reply). Steps: :func:`reply`, :func:`error` (an HTTP error with an
OpenAI-style body and optional ``Retry-After``), :func:`slow` (later than the client's timeout),
:func:`empty` (``data: []``), :func:`wrong_dim` (vectors of another size).

The server knows only the models it was given (``models``): another model name gets the 404 an
OpenAI server sends for an unknown model. An input longer than ``max_input_words`` whitespace
words gets a 400, as a server past its token limit does. Every request is recorded
(:attr:`FakeEmbedServer.requests`) and the peak of concurrent requests is tracked
(:attr:`FakeEmbedServer.max_in_flight`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fake_http import JsonHandler, ScriptedServer

__all__ = ["FakeEmbedServer", "RecordedRequest", "Step", "empty", "error", "fake_vector", "reply", "slow", "wrong_dim"]


@dataclass(frozen=True)
class Step:
    """What the server does with one request."""

    status: int = 200
    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)
    message: str | None = None
    empty: bool = False  # reply with no vectors
    dim: int | None = None  # reply with vectors of this size instead


def reply(*, delay_s: float = 0.0) -> Step:
    return Step(delay_s=delay_s)


def slow(delay_s: float) -> Step:
    return Step(delay_s=delay_s)


def empty() -> Step:
    return Step(empty=True)


def wrong_dim(dim: int) -> Step:
    return Step(dim=dim)


def error(status: int, *, retry_after: str | None = None, message: str | None = None) -> Step:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Step(status=status, headers=headers, message=message)


def fake_vector(text: str, dim: int) -> list[float]:
    """The fake server's (unnormalised) vector of ``text``: hashed words, ±1 each."""
    vec = [0.0] * dim
    for word in text.lower().split():
        word = "".join(ch for ch in word if ch.isalnum())
        if not word:
            continue
        h = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        vec[int.from_bytes(h[:4], "little") % dim] += 1.0 if h[4] & 1 else -1.0
    if not any(vec):
        vec[0] = 1.0
    norm = math.sqrt(sum(v * v for v in vec))
    return [v / norm for v in vec]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: Any
    step: Step | None

    @property
    def inputs(self) -> list[str]:
        raw = self.body.get("input") if isinstance(self.body, dict) else None
        return [raw] if isinstance(raw, str) else list(raw or [])


class _Handler(JsonHandler):
    def do_GET(self) -> None:  # noqa: N802
        fake = self.server.fake
        fake._record(RecordedRequest("GET", self.path, self._headers(), None, None))
        if self.path.rstrip("/").endswith("/models"):
            self._send_json(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "fake"} for m in fake.models]})
        else:
            self._no_route()

    def do_POST(self) -> None:  # noqa: N802
        fake = self.server.fake
        body = self._read_json()
        if not self.path.rstrip("/").endswith("/embeddings") or not isinstance(body, dict):
            fake._record(RecordedRequest("POST", self.path, self._headers(), body, None))
            self._no_route()
            return
        req = RecordedRequest("POST", self.path, self._headers(), body, None)
        step = fake._next_step(*req.inputs)
        fake._record(RecordedRequest("POST", self.path, req.headers, body, step))
        fake._enter()
        try:
            if fake._stopped_during(step.delay_s):
                return
            if step.status >= 400:
                self._send_error(step.status, step.message or f"scripted error {step.status}", step.headers)
                return
            model = body.get("model")
            if model not in fake.models:
                self._send_error(404, f"The model `{model}` does not exist", code="model_not_found")
                return
            too_long = [len(t.split()) for t in req.inputs if len(t.split()) > fake.max_input_words]
            if too_long:
                self._send_error(400, f"input of {too_long[0]} tokens is over the limit of {fake.max_input_words}")
                return
            self._send_json(200, fake._reply(body, req.inputs, step))
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            fake._leave()


class FakeEmbedServer(ScriptedServer[Step, RecordedRequest]):
    """Test double of an OpenAI-compatible embeddings endpoint. Use as a context manager."""

    handler = _Handler

    def __init__(self, *, models: Sequence[str] = ("fake-embed",), dim: int = 64, max_input_words: int = 10_000,
                 honour_dimensions: bool = True, default: Step | None = None) -> None:
        super().__init__(default or reply())
        self.models = list(models)
        self.dim = dim
        self.max_input_words = max_input_words
        self.honour_dimensions = honour_dimensions

    def embedding_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == "POST" and r.path.rstrip("/").endswith("/embeddings")]

    def _reply(self, body: dict[str, Any], inputs: list[str], step: Step) -> dict[str, Any]:
        dim = self.dim
        asked = body.get("dimensions")
        if isinstance(asked, int) and self.honour_dimensions:
            dim = min(dim, asked)
        data = [] if step.empty else [
            {"object": "embedding", "index": i, "embedding": fake_vector(t, step.dim or self.dim)[: step.dim or dim]}
            for i, t in enumerate(inputs)
        ]
        words = sum(len(t.split()) for t in inputs)
        return {"object": "list", "data": data, "model": body.get("model"), "usage": {"prompt_tokens": words, "total_tokens": words}}
