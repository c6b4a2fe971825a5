"""Cluster summarizers (docs/METHODS.md §5.7) and the labels of summary nodes.

- :mod:`.types`: the :class:`~arborag.tasks.summarize.types.Summarizer` protocol (``name`` +
  ``summarize_many``) and :class:`~arborag.tasks.summarize.types.SummaryResult`;
- :mod:`.extractive`: the default summarizer, LLM-free, offline and deterministic;
- :mod:`.llm`: the OpenAI-compatible summarizer (imported only when configured);
- :mod:`.labels`: a title and keywords for every summary node.

:func:`make_summarizer` builds the configured summarizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from arborag.config import SummarizeConfig
from arborag.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from arborag.embed.model import Embedder
    from arborag.tasks.summarize.types import Summarizer

__all__ = ["make_summarizer"]


def make_summarizer(
    cfg: SummarizeConfig, *, cache_dir: Path | None = None, embedder: "Embedder | None" = None
) -> "Summarizer":
    """The configured summarizer. ``openai`` wraps an extractive fallback for failed clusters.

    ``embedder`` is accepted for summarizers that want vectors; the extractive one does not
    use it (its sentence scoring is deliberately embedding-free, see :mod:`.extractive`).
    """
    from arborag.tasks.summarize.extractive import ExtractiveSummarizer

    extractive = ExtractiveSummarizer(cfg)
    if cfg.backend == "extractive":
        return extractive
    if cfg.backend == "openai":
        from arborag.tasks.summarize.llm import OpenAISummarizer

        return OpenAISummarizer(cfg, cache_dir=cache_dir, fallback=extractive)
    raise ConfigError(f"unknown summarize.backend {cfg.backend!r}; use extractive or openai")  # pragma: no cover
