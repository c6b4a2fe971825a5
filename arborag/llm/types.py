"""What an LLM call gives back: chat messages, a completion, a client's counters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["OPENAI_DEFAULT_URL", "PLACEHOLDER_API_KEY", "ChatLLM", "Completion", "LLMStats", "Message", "Usage", "as_hit"]

Message = Mapping[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""

PLACEHOLDER_API_KEY = "sk-no-key-required"
"""Sent when ``api_key_env`` is unset and ``base_url`` points at a local server (which ignores it)."""

OPENAI_DEFAULT_URL = "https://api.openai.com/v1"


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


def as_hit(comp: Completion) -> Completion:
    """A duplicate of a conversation answered once in the same batch: free, like a cache hit."""
    return Completion(comp.text, comp.prompt_tokens, comp.completion_tokens, True, comp.usage_reported, comp.key)


@runtime_checkable
class ChatLLM(Protocol):
    """What query-time code needs of an LLM: :class:`~arborag.llm.LLMClient` is one; tests pass
    a scripted fake. ``complete`` raises :class:`~arborag.errors.LLMError` or
    :class:`~arborag.errors.BackendUnavailable` when no reply can be had."""

    model: str

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        prompt_tag: str | None = None,
        **params: Any,
    ) -> Completion: ...


@dataclass(slots=True)
class Usage:
    """Token accounting of one query or run: what was spent (cache hits cost nothing), and
    what went wrong. :meth:`add` a completion, :meth:`fail` a call that raised."""

    calls: int = 0  # completions received (cache hits included)
    cache_hits: int = 0
    failures: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    events: list[str] = field(default_factory=list)  # "<prompt tag>: <what happened>", in order

    def add(self, comp: Completion, *, tag: str = "") -> None:
        self.calls += 1
        if comp.cached:
            self.cache_hits += 1
        else:
            self.tokens_in += comp.prompt_tokens
            self.tokens_out += comp.completion_tokens

    def fail(self, reason: str, *, tag: str = "") -> None:
        self.failures += 1
        self.events.append(f"{tag}: {reason}" if tag else reason)

    def note(self, event: str) -> None:
        self.events.append(event)

    def merge(self, other: Usage) -> None:
        self.calls += other.calls
        self.cache_hits += other.cache_hits
        self.failures += other.failures
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.events.extend(other.events)

    def cost(self, price_in_per_1k: float, price_out_per_1k: float) -> float:
        """What the spent tokens cost at these prices (e.g. ``summarize.price_*_per_1k``)."""
        return self.tokens_in / 1000.0 * price_in_per_1k + self.tokens_out / 1000.0 * price_out_per_1k

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
