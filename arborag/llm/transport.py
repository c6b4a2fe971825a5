"""One OpenAI-compatible endpoint: the API key, retries with backoff, reply parsing, token counts.

:class:`Transport` is the HTTP half of :class:`~arborag.llm.client.LLMClient` (which adds the
cache and batching). The API key is read from the environment variable named by
``api_key_env`` at the first request, handed to the ``openai`` client and to nothing else, and
scrubbed from every error message and log line. ``openai`` is imported lazily.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from arborag.errors import BackendUnavailable, ConfigError, LLMError
from arborag.extras import extra
from arborag.llm.types import OPENAI_DEFAULT_URL, PLACEHOLDER_API_KEY, Completion, LLMStats, Message

if TYPE_CHECKING:
    from arborag.tokenizer import Tokenizer

__all__ = ["AbortBatch", "Transport"]

log = logging.getLogger("arborag.llm")

_RETRY_STATUS = frozenset({408, 409, 429})  # plus every 5xx
_ABORT_STATUS = frozenset({401, 403, 404})  # wrong key / no access / unknown model or path
_MAX_REASON_CHARS = 300


class AbortBatch(Exception):
    """Internal: an error after which no other request of a batch can succeed."""

    def __init__(self, error: LLMError | BackendUnavailable) -> None:
        super().__init__(str(error))
        self.error = error


class Transport:
    """Requests to ``model`` at ``base_url`` (``None``: OpenAI itself), retried as configured."""

    model: str
    base_url: str | None
    api_key_env: str
    timeout_s: float
    retries: int
    backoff_s: float
    backoff_max_s: float
    retry_after_max_s: float
    stats: LLMStats
    _tokenizer: Tokenizer | None
    _lock: threading.Lock
    _openai: Any
    #: What the requests are, in logs and errors ("LLM", "embedding")
    _kind = "LLM"

    @property
    def url(self) -> str:
        return self.base_url or OPENAI_DEFAULT_URL

    def _client(self) -> Any:
        with self._lock:
            if self._openai is None:
                with extra("llm", "an OpenAI-compatible endpoint (backend: openai, arborag ask)"):
                    from openai import OpenAI

                key = os.environ.get(self.api_key_env, "").strip()
                if not key:
                    if self.base_url is None:
                        raise ConfigError(
                            f"no API key for {OPENAI_DEFAULT_URL}: set the environment variable "
                            f"{self.api_key_env} (or summarize.api_key_env), or set summarize.base_url "
                            "to a local OpenAI-compatible server"
                        )
                    key = PLACEHOLDER_API_KEY
                self._openai = OpenAI(
                    api_key=key, base_url=self.base_url, timeout=self.timeout_s, max_retries=0
                )
            return self._openai

    def _scrub(self, text: str) -> str:
        """``text`` without the API key, on one line, not too long."""
        key = os.environ.get(self.api_key_env, "").strip()
        if key and len(key) >= 4:
            text = text.replace(key, "***")
        text = " ".join(text.split())
        return text if len(text) <= _MAX_REASON_CHARS else text[: _MAX_REASON_CHARS - 1] + "…"

    def _count(self, texts: list[str]) -> list[int]:
        if self._tokenizer is None:
            from arborag.tokenizer import get_tokenizer

            self._tokenizer = get_tokenizer()
        return self._tokenizer.count_many(texts)

    def _delay(self, retry: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, min(retry_after, self.retry_after_max_s))
        base = min(self.backoff_max_s, self.backoff_s * (2 ** (retry - 1)))
        return base * random.uniform(0.5, 1.0)

    #: What to tell the user when the endpoint cannot be reached after every retry (a subclass
    #: for another kind of request, e.g. embeddings, names its own settings).
    _unreachable_hint = (
        "start the server or fix summarize.base_url (ARBORAG_LLM_BASE_URL), or use ARBORAG_SUMMARIZE__BACKEND=extractive"
    )

    def _status_hint(self, status: int) -> str:
        return _status_hint(status, self.api_key_env)

    def _error(self, reason: str) -> LLMError:
        return LLMError(self.model, reason)

    def _request(self, messages: list[Message], params: dict[str, Any], key: str) -> Completion:
        response = self._send(lambda client: client.chat.completions.create(model=self.model, messages=messages, **params))
        return self._parse(response, messages, key)

    def _send(self, call: Callable[[Any], Any]) -> Any:
        """``call(openai_client)`` with the retries: timeouts, connection errors, 408/409/429 and
        5xx are retried (after ``Retry-After`` when the server sends one, else backoff); other
        statuses raise at once (401/403/404 as :class:`AbortBatch`). The one HTTP layer of
        every OpenAI-compatible request arborag makes (chat completions, embeddings)."""
        with extra("llm", "an OpenAI-compatible endpoint (backend: openai, arborag ask)"):
            import openai

        client = self._client()
        attempts = self.retries + 1
        reason = "no attempt"
        only_connect_errors = True
        retry_after: float | None = None
        for attempt in range(attempts):
            if attempt:
                delay = self._delay(attempt, retry_after)
                log.warning(
                    "%s %s: %s; retry %d/%d in %.2fs", self._kind, self.model, reason, attempt, self.retries, delay
                )
                with self._lock:
                    self.stats.retries += 1
                time.sleep(delay)
            retry_after = None
            with self._lock:
                self.stats.requests += 1
            try:
                return call(client)
            except openai.APITimeoutError:
                only_connect_errors = False
                reason = f"timeout after {self.timeout_s:g}s"
                continue
            except openai.APIConnectionError as exc:
                reason = self._scrub(f"connection error: {exc.__cause__ or exc}")
                continue
            except openai.APIStatusError as exc:
                only_connect_errors = False
                status = exc.status_code
                reason = self._scrub(f"http {status}: {_error_message(exc)}")
                if status in _RETRY_STATUS or status >= 500:
                    retry_after = _retry_after(exc.response.headers)
                    reason = f"http {status}"
                    continue
                error = self._error(reason + self._status_hint(status))
                if status in _ABORT_STATUS:
                    raise AbortBatch(error) from None
                raise error from None
            except openai.OpenAIError as exc:  # e.g. a reply that is not a chat completion
                raise self._error(self._scrub(f"bad reply: {exc}")) from None
        if only_connect_errors:
            raise AbortBatch(
                BackendUnavailable(
                    f"{self._kind} endpoint",
                    self.url,
                    f"{reason} ({attempts} attempts); {self._unreachable_hint}",
                )
            )
        raise self._error(f"{reason} ({attempts} attempts)")

    def _parse(self, response: Any, messages: list[Message], key: str) -> Completion:
        try:
            choices = response.choices or []
            text = (choices[0].message.content or "") if choices else ""
        except (AttributeError, IndexError, TypeError) as exc:
            raise LLMError(self.model, f"bad reply: not a chat completion ({type(exc).__name__})") from None
        if not choices:
            raise LLMError(self.model, "bad reply: no choices")
        usage = getattr(response, "usage", None)
        p_tok = getattr(usage, "prompt_tokens", None) if usage is not None else None
        c_tok = getattr(usage, "completion_tokens", None) if usage is not None else None
        reported = isinstance(p_tok, int) and isinstance(c_tok, int)
        if not reported:
            counts = self._count([str(m.get("content", "")) for m in messages] + [text])
            p_tok, c_tok = sum(counts[:-1]), counts[-1]
        with self._lock:
            self.stats.calls += 1
            self.stats.tokens_in += int(p_tok)  # type: ignore[arg-type]
            self.stats.tokens_out += int(c_tok)  # type: ignore[arg-type]
        return Completion(
            text=text,
            prompt_tokens=int(p_tok),  # type: ignore[arg-type]
            completion_tokens=int(c_tok),  # type: ignore[arg-type]
            cached=False,
            usage_reported=reported,
            key=key,
        )


def _error_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return str(getattr(exc, "message", "") or exc)


def _status_hint(status: int, api_key_env: str) -> str:
    if status in (401, 403):
        return f" — check the key in ${api_key_env} (summarize.api_key_env)"
    if status == 404:
        return " — check summarize.llm_model (ARBORAG_LLM_MODEL) and summarize.base_url (it usually ends in /v1)"
    if status in (400, 413, 422):
        return " — the request was refused; a too-long prompt needs a larger context window on the server"
    return ""


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a server asked us to wait (``retry-after-ms``, ``Retry-After`` seconds or date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())
