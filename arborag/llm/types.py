"""What an LLM call gives back: chat messages, a completion, a client's counters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

__all__ = ["OPENAI_DEFAULT_URL", "PLACEHOLDER_API_KEY", "Completion", "LLMStats", "Message", "as_hit"]

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
