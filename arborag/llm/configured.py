"""The configured LLM for query time (``multi``, ``level``, ``ask``): the summarizer's endpoint.

Build and query share one endpoint setting, the ``summarize`` section of the config:
``summarize.base_url`` (or ``ARBORAG_LLM_BASE_URL``), ``summarize.llm_model`` (or
``ARBORAG_LLM_MODEL``), ``summarize.api_key_env`` (the *name* of the variable holding the key).
An LLM counts as configured when a ``base_url`` is set, or ``summarize.backend`` is ``openai``
(OpenAI itself, key in ``$OPENAI_API_KEY``). Creating a client contacts nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arborag.config import ArboragConfig
    from arborag.llm.client import LLMClient

__all__ = ["HOW_TO_CONFIGURE", "llm_configured", "llm_from_config"]

HOW_TO_CONFIGURE = (
    "To configure an LLM, point arborag at any OpenAI-compatible endpoint:\n"
    "  export ARBORAG_LLM_BASE_URL=http://127.0.0.1:8011/v1   # e.g. a local llama.cpp server (docs/LLM.md)\n"
    "  export ARBORAG_LLM_MODEL=<model name>                   # optional\n"
    "or in arborag.yaml:\n"
    "  summarize:\n"
    "    base_url: http://127.0.0.1:8011/v1\n"
    "    llm_model: <model name>\n"
    "    api_key_env: OPENAI_API_KEY   # the variable that holds the key, if the endpoint needs one\n"
    "(for OpenAI itself: summarize.backend: openai and the key in $OPENAI_API_KEY)."
)


def llm_configured(config: ArboragConfig) -> bool:
    """True when the config names an LLM endpoint (``summarize.base_url`` /
    ``ARBORAG_LLM_BASE_URL``, or ``summarize.backend: openai``)."""
    s = config.summarize
    return bool(s.base_url) or s.backend == "openai"


def llm_from_config(config: ArboragConfig, *, cache_dir: str | Path | None = None) -> LLMClient | None:
    """An :class:`~arborag.llm.LLMClient` for the configured endpoint (calls cached in
    ``cache_dir``), or None when no LLM is configured."""
    if not llm_configured(config):
        return None
    from arborag.llm.client import LLMClient

    return LLMClient.from_config(config.summarize, cache_dir=cache_dir)
