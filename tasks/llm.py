"""A client for any OpenAI-compatible chat-completions endpoint.

:class:`LLMClient` wraps the official ``openai`` client with what a batch pipeline needs:

- **retries** with exponential backoff (and jitter) on timeouts, connection errors, 408/409/429
  and 5xx; a ``Retry-After`` / ``retry-after-ms`` header is honoured (capped);
- **bounded concurrency**: :meth:`LLMClient.complete_many` runs at most ``concurrency``
  requests at once (a thread pool) and returns one result per request, in order;
- a **content-addressed cache** of calls (:class:`LLMCache`), keyed by
  ``hash_json({model, messages, params})`` and kept as JSON Lines shards on disk (one shard per
  client, rewritten atomically), so a rebuild pays only for prompts it has not seen;
- **token accounting**: prompt/completion tokens from the reply's ``usage``, or counted with
  arborag's tokenizer when a server sends none; exposed as counters for the ``runs`` table.

Errors: a call that still fails after its retries raises :class:`~arborag.errors.LLMError`
(``reason`` says why, e.g. ``"http 500 (4 attempts)"``); an endpoint that cannot be reached at
all raises :class:`~arborag.errors.BackendUnavailable`. Authentication and not-found errors
(401/403/404) are not retried and stop a whole :meth:`~LLMClient.complete_many` batch: every
other request would fail the same way.

The API key is read from the environment variable named by ``api_key_env`` when the first
request is made. It is handed to the ``openai`` client and to nothing else: it is not an
attribute of this class, not written to the cache, and removed from every error message and
log line this module produces. Nothing happens at import time (``openai`` is imported lazily).
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arborag.errors import BackendUnavailable, ConfigError, LLMError
from arborag.hashing import hash_json

if TYPE_CHECKING:
    from arborag.config import SummarizeConfig
    from arborag.tokenizer import Tokenizer

__all__ = ["Completion", "LLMCache", "LLMClient", "LLMStats", "Message", "PLACEHOLDER_API_KEY"]

log = logging.getLogger("arborag.llm")

Message = Mapping[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""

PLACEHOLDER_API_KEY = "sk-no-key-required"
"""Sent when ``api_key_env`` is unset and ``base_url`` points at a local server (which ignores it)."""

OPENAI_DEFAULT_URL = "https://api.openai.com/v1"

_RETRY_STATUS = frozenset({408, 409, 429})  # plus every 5xx
_ABORT_STATUS = frozenset({401, 403, 404})  # wrong key / no access / unknown model or path
_MAX_REASON_CHARS = 300


@dataclass(frozen=True, slots=True)
class Completion:
    """One chat completion. ``text`` may be empty: whether that is a failure is the caller's call."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool  # served from the cache: no HTTP request was made, no tokens were spent
    usage_reported: bool  # token counts came from the server's ``usage`` (else: our tokenizer)
    key: str  # the cache key of the call


@dataclass(slots=True)
class LLMStats:
    """Counters of one client. ``tokens_in``/``tokens_out`` are tokens *spent* (cache hits cost none)."""

    calls: int = 0  # completions received from the server
    requests: int = 0  # HTTP attempts, retries included
    retries: int = 0
    cache_hits: int = 0
    failures: int = 0  # calls that failed after their retries
    tokens_in: int = 0
    tokens_out: int = 0

    def as_counts(self) -> dict[str, int]:
        return {f"llm_{k}" if not k.startswith("tokens") else k: v for k, v in asdict(self).items()}


class _AbortBatch(Exception):
    """Internal: an error after which no other request of a batch can succeed."""

    def __init__(self, error: LLMError | BackendUnavailable) -> None:
        super().__init__(str(error))
        self.error = error


class LLMCache:
    """Content-addressed cache of LLM calls: ``key -> reply record``, as JSON Lines on disk.

    Every :class:`LLMCache` instance writes its own shard ``calls-<shard_id>.jsonl`` in
    ``directory``; a flush rewrites that shard to a temporary file and renames it over the old
    one, so a reader (or a crash) never sees half a record. Opening reads every shard in the
    directory (lazily, on first use); a line that does not parse is skipped. Records hold the
    reply, its token counts and the model name — never the API key, and not the prompt (the
    key is its hash).
    """

    def __init__(self, directory: str | Path, *, shard_id: str | None = None, flush_every: int = 16) -> None:
        self.directory = Path(directory)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.shard = self.directory / f"calls-{shard_id or f'{stamp}-{uuid.uuid4().hex[:8]}'}.jsonl"
        self.flush_every = max(1, flush_every)
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] | None = None
        self._mine: list[dict[str, Any]] = []  # records of this shard, in insertion order
        self._dirty = 0

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._entries is None:
            entries: dict[str, dict[str, Any]] = {}
            if self.directory.is_dir():
                for path in sorted(self.directory.glob("calls-*.jsonl")):
                    with path.open(encoding="utf-8") as fh:
                        for line in fh:
                            try:
                                rec = json.loads(line)
                            except json.JSONDecodeError:
                                continue
                            if isinstance(rec, dict) and isinstance(rec.get("key"), str):
                                entries[rec["key"]] = rec
                                if path == self.shard:
                                    self._mine.append(rec)
            self._entries = entries
        return self._entries

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._load().get(key)

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        rec = {"key": key, **record}
        with self._lock:
            entries = self._load()
            if key in entries:
                return
            entries[key] = rec
            self._mine.append(rec)
            self._dirty += 1
            if self._dirty >= self.flush_every:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._dirty:
            return
        from arborag.storage.tables import atomic_write_bytes

        blob = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in self._mine)
        atomic_write_bytes(self.shard, blob.encode("utf-8"))
        self._dirty = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._load())

    def __repr__(self) -> str:
        return f"LLMCache({str(self.directory)!r})"


class LLMClient:
    """Chat completions from one model at one OpenAI-compatible endpoint.

    ``base_url`` ``None`` means OpenAI itself. ``api_key_env`` names the environment variable
    holding the key; when it is unset a local endpoint gets :data:`PLACEHOLDER_API_KEY`, and
    OpenAI itself is a :class:`~arborag.errors.ConfigError` at the first request.

    ``retries`` is the number of retries after the first attempt; the n-th retry waits
    ``min(backoff_max_s, backoff_s * 2**(n-1))`` seconds (times a jitter in [0.5, 1]) or what
    the server's ``Retry-After`` asks, at most ``retry_after_max_s``.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60.0,
        retries: int = 3,
        concurrency: int = 4,
        cache_dir: str | Path | None = None,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        retry_after_max_s: float = 60.0,
        tokenizer: Tokenizer | None = None,
        cache_shard_id: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"LLM concurrency must be >= 1, got {concurrency}")
        if retries < 0:
            raise ConfigError(f"LLM retries must be >= 0, got {retries}")
        self.model = model
        self.base_url = base_url.rstrip("/") if base_url else None
        self.api_key_env = api_key_env
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.concurrency = int(concurrency)
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self.retry_after_max_s = float(retry_after_max_s)
        self.cache = LLMCache(cache_dir, shard_id=cache_shard_id) if cache_dir is not None else None
        self.stats = LLMStats()
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        self._openai: Any = None

    @classmethod
    def from_config(cls, cfg: SummarizeConfig, *, cache_dir: str | Path | None = None, **options: Any) -> LLMClient:
        """A client for ``cfg`` (endpoint, model, key variable, timeout, retries, concurrency)."""
        return cls(
            model=cfg.llm_model,
            base_url=cfg.base_url,
            api_key_env=cfg.api_key_env,
            timeout_s=cfg.timeout_s,
            retries=cfg.retries,
            concurrency=cfg.concurrency,
            cache_dir=cache_dir,
            **options,
        )

    # -- public API --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self.base_url or OPENAI_DEFAULT_URL

    def cache_key(self, messages: Sequence[Message], params: Mapping[str, Any]) -> str:
        """``hash_json({model, messages, params})`` — the content address of a call."""
        return hash_json({"model": self.model, "messages": [dict(m) for m in messages], "params": dict(params)})

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int, temperature: float = 0.0, **params: Any
    ) -> Completion:
        """One completion (cached). Raises ``LLMError`` after retries, ``BackendUnavailable``."""
        all_params = {"max_tokens": max_tokens, "temperature": temperature, **params}
        try:
            return self._complete(list(messages), all_params)
        except _AbortBatch as abort:
            raise abort.error from abort.__cause__
        finally:
            self.flush()

    def complete_many(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        progress: Callable[[int], None] | None = None,
        **params: Any,
    ) -> list[Completion | LLMError]:
        """Complete every conversation of ``batch``, at most ``concurrency`` requests at a time.

        Returns one item per conversation, in order: a :class:`Completion`, or the
        :class:`~arborag.errors.LLMError` of a call that failed after its retries. Identical
        conversations are sent once. Raises (after finishing or cancelling the rest) when no
        request can succeed: ``BackendUnavailable`` for an unreachable endpoint, ``LLMError``
        for a rejected key or an unknown model. ``progress(n)`` is called with the number of
        conversations just finished.
        """
        all_params = {"max_tokens": max_tokens, "temperature": temperature, **params}
        convs = [list(m) for m in batch]
        keys = [self.cache_key(m, all_params) for m in convs]
        results: list[Completion | LLMError | None] = [None] * len(convs)
        todo: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            hit = self._from_cache(key)
            if hit is not None:
                results[i] = hit
            else:
                todo.setdefault(key, []).append(i)
        if progress is not None and len(convs) - sum(len(v) for v in todo.values()):
            progress(len(convs) - sum(len(v) for v in todo.values()))
        abort: _AbortBatch | None = None
        try:
            if todo:
                with ThreadPoolExecutor(max_workers=min(self.concurrency, len(todo)), thread_name_prefix="llm") as pool:
                    futures: dict[Future[Completion], str] = {
                        pool.submit(self._complete, convs[idx[0]], all_params, False): key for key, idx in todo.items()
                    }
                    pending = set(futures)
                    while pending and abort is None:
                        done, pending = wait(pending, return_when=FIRST_COMPLETED)
                        for fut in done:
                            idx = todo[futures[fut]]
                            try:
                                out: Completion | LLMError = fut.result()
                            except LLMError as exc:
                                out = exc
                            except _AbortBatch as exc:
                                abort = abort or exc
                                continue
                            for n, i in enumerate(idx):
                                results[i] = out if n == 0 or not isinstance(out, Completion) else _as_hit(out)
                            if progress is not None:
                                progress(len(idx))
                    for fut in pending:  # after an abort: drop what has not started
                        fut.cancel()
        finally:
            self.flush()
        if abort is not None:
            raise abort.error from abort.__cause__
        return [r for r in results if r is not None]

    def counters(self) -> dict[str, int]:
        """``llm_calls``, ``llm_requests``, ``llm_retries``, ``llm_cache_hits``, ``llm_failures``,
        ``tokens_in``, ``tokens_out`` — for the ``runs`` table."""
        with self._lock:
            return self.stats.as_counts()

    def flush(self) -> None:
        """Write cache entries still in memory to disk."""
        if self.cache is not None:
            self.cache.flush()

    def close(self) -> None:
        self.flush()
        with self._lock:
            client, self._openai = self._openai, None
        if client is not None:
            client.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"LLMClient(model={self.model!r}, base_url={self.url!r}, api_key_env={self.api_key_env!r}, "
            f"timeout_s={self.timeout_s}, retries={self.retries}, concurrency={self.concurrency})"
        )

    # -- internals ---------------------------------------------------------------------------

    def _client(self) -> Any:
        with self._lock:
            if self._openai is None:
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

    def _from_cache(self, key: str) -> Completion | None:
        if self.cache is None:
            return None
        rec = self.cache.get(key)
        if rec is None:
            return None
        with self._lock:
            self.stats.cache_hits += 1
        return Completion(
            text=str(rec.get("text", "")),
            prompt_tokens=int(rec.get("prompt_tokens", 0)),
            completion_tokens=int(rec.get("completion_tokens", 0)),
            cached=True,
            usage_reported=bool(rec.get("usage_reported", False)),
            key=key,
        )

    def _complete(self, messages: list[Message], params: dict[str, Any], check_cache: bool = True) -> Completion:
        key = self.cache_key(messages, params)
        if check_cache:
            hit = self._from_cache(key)
            if hit is not None:
                return hit
        try:
            comp = self._request(messages, params, key)
        except LLMError:
            with self._lock:
                self.stats.failures += 1
            raise
        except _AbortBatch:
            with self._lock:
                self.stats.failures += 1
            raise
        if self.cache is not None and comp.text.strip():
            # An empty reply is not cached: the next run asks again.
            self.cache.put(
                key,
                {
                    "model": self.model,
                    "text": comp.text,
                    "prompt_tokens": comp.prompt_tokens,
                    "completion_tokens": comp.completion_tokens,
                    "usage_reported": comp.usage_reported,
                    "params": params,
                    "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                },
            )
        return comp

    def _delay(self, retry: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, min(retry_after, self.retry_after_max_s))
        base = min(self.backoff_max_s, self.backoff_s * (2 ** (retry - 1)))
        return base * random.uniform(0.5, 1.0)

    def _request(self, messages: list[Message], params: dict[str, Any], key: str) -> Completion:
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
                    "LLM %s: %s; retry %d/%d in %.2fs", self.model, reason, attempt, self.retries, delay
                )
                with self._lock:
                    self.stats.retries += 1
                time.sleep(delay)
            retry_after = None
            with self._lock:
                self.stats.requests += 1
            try:
                response = client.chat.completions.create(model=self.model, messages=messages, **params)
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
                error = LLMError(self.model, reason + _status_hint(status, self.api_key_env))
                if status in _ABORT_STATUS:
                    raise _AbortBatch(error) from None
                raise error from None
            except openai.OpenAIError as exc:  # e.g. a reply that is not a chat completion
                raise LLMError(self.model, self._scrub(f"bad reply: {exc}")) from None
            return self._parse(response, messages, key)
        if only_connect_errors:
            raise _AbortBatch(
                BackendUnavailable(
                    "LLM endpoint",
                    self.url,
                    f"{reason} ({attempts} attempts); start the server or fix summarize.base_url "
                    "(ARBORAG_LLM_BASE_URL), or use ARBORAG_SUMMARIZE__BACKEND=extractive",
                )
            )
        raise LLMError(self.model, f"{reason} ({attempts} attempts)")

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


def _as_hit(comp: Completion) -> Completion:
    """A duplicate of a conversation answered once in the same batch: free, like a cache hit."""
    return Completion(comp.text, comp.prompt_tokens, comp.completion_tokens, True, comp.usage_reported, comp.key)


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
