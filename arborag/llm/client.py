"""The LLM client: cached, batched chat completions from one model at one endpoint.

:class:`LLMClient` adds to :class:`~arborag.llm.transport.Transport` (key, retries, parsing)
a content-addressed call cache (:class:`~arborag.llm.cache.LLMCache`, keyed by
``hash_json({model, messages, params})``) and bounded concurrency: :meth:`LLMClient.complete_many`
runs at most ``concurrency`` requests at once and returns one result per request, in order.
Authentication and not-found errors (401/403/404) stop a whole batch: every other request
would fail the same way.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arborag.errors import ConfigError, LLMError
from arborag.hashing import hash_json
from arborag.llm.cache import LLMCache
from arborag.llm.transport import AbortBatch, Transport
from arborag.llm.types import Completion, LLMStats, Message, as_hit

if TYPE_CHECKING:
    from arborag.config import SummarizeConfig
    from arborag.tokenizer import Tokenizer

__all__ = ["LLMClient"]


class LLMClient(Transport):
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

    def cache_key(
        self, messages: Sequence[Message], params: Mapping[str, Any], prompt_tag: str | None = None
    ) -> str:
        """``hash_json({model, messages, params})`` — the content address of a call; with a
        ``prompt_tag`` (:attr:`arborag.llm.prompts.Prompt.tag`, ``"<name>@<version>"``) the
        prompt's version is part of the key too."""
        data: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages], "params": dict(params)}
        if prompt_tag is not None:
            data["prompt"] = prompt_tag
        return hash_json(data)

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        prompt_tag: str | None = None,
        **params: Any,
    ) -> Completion:
        """One completion (cached). Raises ``LLMError`` after retries, ``BackendUnavailable``.
        ``prompt_tag`` (not sent) puts the prompt's name and version into the cache key."""
        all_params = {"max_tokens": max_tokens, "temperature": temperature, **params}
        try:
            return self._complete(list(messages), all_params, True, prompt_tag)
        except AbortBatch as abort:
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
        prompt_tag: str | None = None,
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
        keys = [self.cache_key(m, all_params, prompt_tag) for m in convs]
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
        abort: AbortBatch | None = None
        try:
            if todo:
                with ThreadPoolExecutor(max_workers=min(self.concurrency, len(todo)), thread_name_prefix="llm") as pool:
                    futures: dict[Future[Completion], str] = {
                        pool.submit(self._complete, convs[idx[0]], all_params, False, prompt_tag): key for key, idx in todo.items()
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
                            except AbortBatch as exc:
                                abort = abort or exc
                                continue
                            for n, i in enumerate(idx):
                                results[i] = out if n == 0 or not isinstance(out, Completion) else as_hit(out)
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

    def _complete(
        self, messages: list[Message], params: dict[str, Any], check_cache: bool = True, prompt_tag: str | None = None
    ) -> Completion:
        key = self.cache_key(messages, params, prompt_tag)
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
        except AbortBatch:
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
