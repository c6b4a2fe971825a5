"""Compatibility path: the LLM client and its call cache live in the foundation, :mod:`arborag.llm`."""

from arborag.llm import PLACEHOLDER_API_KEY, Completion, LLMCache, LLMClient, LLMStats, Message

__all__ = ["Completion", "LLMCache", "LLMClient", "LLMStats", "Message", "PLACEHOLDER_API_KEY"]
