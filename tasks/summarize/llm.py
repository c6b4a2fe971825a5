"""Cluster summaries written by an LLM behind any OpenAI-compatible endpoint (docs/METHODS.md §5.7).

:class:`OpenAISummarizer` implements the :class:`~arborag.tasks.summarize.types.Summarizer` protocol with
RAPTOR's prompt. A cluster whose call still fails after the client's retries — or whose reply
is empty — is summarized by the ``fallback`` summarizer (the extractive one) and gets status
``"fallback:<reason>"``: an error is never stored as summary text (the RAPTOR reference code
returns the exception object as the summary). An endpoint that cannot be reached at all, a
rejected API key or an unknown model stops the batch with
:class:`~arborag.errors.BackendUnavailable` / :class:`~arborag.errors.LLMError` instead of
silently falling back everywhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from arborag.config import SummarizeConfig
from arborag.errors import LLMError
from arborag.llm import Completion, LLMClient, Message
from arborag.llm.prompts import RAPTOR_SUMMARY
from arborag.tasks.summarize.types import Summarizer, SummaryResult

__all__ = ["OpenAISummarizer", "RAPTOR_PROMPT", "RAPTOR_SYSTEM", "build_context", "build_messages"]

# The prompt lives with every other prompt in arborag.llm.prompts; these names stay for callers.
RAPTOR_SYSTEM = RAPTOR_SUMMARY.system
RAPTOR_PROMPT = RAPTOR_SUMMARY.user
_MAX_STATUS_CHARS = 200


def build_context(texts: Sequence[str]) -> str:
    """RAPTOR's ``get_text``: each text on one line, texts separated by a blank line."""
    return "\n\n".join(" ".join(t.splitlines()) for t in texts)


def build_messages(texts: Sequence[str]) -> list[Message]:
    """The chat messages that ask for a summary of ``texts`` (prompt ``raptor-summary@raptor-v1``).

    Its calls are cached under the plain ``{model, messages, params}`` key (no prompt tag), as
    before prompts were versioned, so existing summary caches stay valid; the prompt version is
    part of the build key through ``summarize.prompt_version``."""
    return RAPTOR_SUMMARY.messages(context=build_context(texts))


class OpenAISummarizer:
    """Summaries from ``cfg.llm_model`` at ``cfg.base_url``, at most ``cfg.max_tokens`` tokens each.

    ``cache_dir`` is the folder of the LLM call cache (e.g. ``<corpus>/cache/llm``); ``None``
    disables it. ``fallback`` summarizes clusters whose LLM call failed. ``client`` replaces the
    client built from ``cfg`` (tests); ``client_options`` go to :class:`~arborag.llm.LLMClient`
    (e.g. ``backoff_s``, ``retry_after_max_s``).

    ``SummaryResult.tokens_in/out`` are tokens *spent* on that result: 0 for a cache hit.
    :meth:`counters` adds up the batch: tokens, LLM calls, cache hits, failures, fallbacks.
    """

    def __init__(
        self,
        cfg: SummarizeConfig,
        *,
        cache_dir: Path | None,
        fallback: Summarizer,
        client: LLMClient | None = None,
        temperature: float = 0.0,
        **client_options: Any,
    ) -> None:
        self.cfg = cfg
        self.fallback = fallback
        self.temperature = temperature
        self.client = client if client is not None else LLMClient.from_config(cfg, cache_dir=cache_dir, **client_options)
        self.name = f"openai:{self.client.model}/{cfg.prompt_version}/{cfg.max_tokens}"
        self._lock = threading.Lock()
        self._fallbacks = 0

    def summarize_many(
        self, clusters: Sequence[Sequence[str]], *, progress: Callable[[int], None] | None = None
    ) -> list[SummaryResult]:
        """One summary per cluster, in order. See the class docstring for failures."""
        results: list[SummaryResult | None] = [None] * len(clusters)
        failed: dict[int, str] = {}
        asks: list[int] = []
        for i, texts in enumerate(clusters):
            if any(t.strip() for t in texts):
                asks.append(i)
            else:
                failed[i] = "empty input"
        if asks:
            replies = self.client.complete_many(
                [build_messages(clusters[i]) for i in asks],
                max_tokens=self.cfg.max_tokens,
                temperature=self.temperature,
                progress=progress,
            )
            for i, reply in zip(asks, replies):
                if isinstance(reply, LLMError):
                    failed[i] = reply.reason
                elif not reply.text.strip():
                    failed[i] = "empty reply"
                else:
                    results[i] = _ok(reply)
        if failed:
            order = sorted(failed)
            backups = self.fallback.summarize_many([clusters[i] for i in order])
            for i, backup in zip(order, backups):
                results[i] = SummaryResult(
                    text=backup.text,
                    status=_status(failed[i]),
                    tokens_in=backup.tokens_in,
                    tokens_out=backup.tokens_out,
                )
            with self._lock:
                self._fallbacks += len(order)
            if progress is not None and "empty input" in failed.values():
                progress(sum(1 for r in failed.values() if r == "empty input"))
        return [r for r in results if r is not None]

    def counters(self) -> dict[str, int]:
        """``tokens_in``, ``tokens_out`` (spent), ``llm_calls``, ``llm_cache_hits``,
        ``llm_failures``, ``llm_retries``, ``llm_requests``, ``summaries_fallback``."""
        counts = self.client.counters()
        with self._lock:
            counts["summaries_fallback"] = self._fallbacks
        return counts

    @property
    def tokens_in(self) -> int:
        return self.client.stats.tokens_in

    @property
    def tokens_out(self) -> int:
        return self.client.stats.tokens_out

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"OpenAISummarizer(name={self.name!r}, client={self.client!r})"


def _ok(reply: Completion) -> SummaryResult:
    spent_in, spent_out = (0, 0) if reply.cached else (reply.prompt_tokens, reply.completion_tokens)
    return SummaryResult(text=reply.text.strip(), status="ok", tokens_in=spent_in, tokens_out=spent_out)


def _status(reason: str) -> str:
    reason = " ".join(reason.split())
    if len(reason) > _MAX_STATUS_CHARS:
        reason = reason[: _MAX_STATUS_CHARS - 1] + "…"
    return f"fallback:{reason}"
