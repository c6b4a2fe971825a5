"""What every cluster summarizer is and returns: the :class:`Summarizer` protocol and :class:`SummaryResult`.

Its own module so the summarizers (:mod:`.extractive`, :mod:`.llm`) import it and not
each other: :func:`~arborag.tasks.summarize.make_summarizer` may then import the LLM
summarizer (lazily) without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Progress", "Summarizer", "SummaryResult"]

Progress = Callable[[int], None] | None


@dataclass(frozen=True)
class SummaryResult:
    """One cluster's summary. ``status`` is ``"ok"`` or ``"fallback:<reason>"``.

    ``tokens_in``/``tokens_out`` are LLM tokens spent (0 for the extractive summarizer).
    """

    text: str
    status: str
    tokens_in: int
    tokens_out: int


@runtime_checkable
class Summarizer(Protocol):
    name: str  # model + prompt version; recorded in nodes.summarizer and part of node ids

    def summarize_many(
        self, clusters: Sequence[Sequence[str]], *, progress: Progress = None
    ) -> list[SummaryResult]: ...
