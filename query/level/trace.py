"""The search trace of one ``level`` query: what was asked, what was sent, what came back.

    LevelTrace                 the question, the plan (llm | offline), rounds, LLM calls, tokens
    └── SubQuestion            one atomic sub-question (round it was asked in, summary, hits)
        └── SearcherRun        one low-level searcher (sparse | dense | web) on that sub-question
            └── Attempt        one query as sent to the engine, its hits, errors and verdict

Everything is plain data (``to_dict()`` is JSON-ready); :func:`arborag.query.level.search`
returns it on the hits (``hits.trace``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Attempt", "LLMCall", "LevelHits", "LevelTrace", "RoundVerdict", "SearcherRun", "SubQuestion"]


@dataclass(slots=True)
class Attempt:
    """One query a low-level searcher sent to its engine (round 1 .. 3)."""

    round: int
    query: str  # exactly as sent to the engine
    syntax: str  # "lucene" | "plain" | "text" (dense) | "web"
    action: str  # "rewrite" | "extend" | "filter" | "emphasize" | "hyde" | "question" | "retry-plain" | "offline"
    hits: list[tuple[str, float]] = field(default_factory=list)  # (node_id, score), best first
    error: str | None = None  # e.g. the QueryError of an invalid Lucene rewrite
    error_position: int | None = None
    verdict: str | None = None  # "enough" | "not enough" | None (not judged)
    note: str = ""


@dataclass(slots=True)
class SearcherRun:
    searcher: str  # "sparse" | "dense" | "web"
    attempts: list[Attempt] = field(default_factory=list)


@dataclass(slots=True)
class SubQuestion:
    text: str
    round: int  # 1 = from the decomposition, 2.. = supplements
    runs: list[SearcherRun] = field(default_factory=list)
    summary: str = ""
    hits: list[str] = field(default_factory=list)  # node ids of the fused result of this sub-question


@dataclass(slots=True)
class RoundVerdict:
    round: int
    enough: bool
    reason: str = ""
    supplements: list[str] = field(default_factory=list)  # new sub-questions proposed
    dropped: list[str] = field(default_factory=list)  # proposed but already asked (never repeated)


@dataclass(slots=True)
class LLMCall:
    step: str  # "decompose" | "sparse-rewrite" | "sparse-feedback" | "hyde" | "dense-feedback" | "summarize" | "verify"
    prompt: str  # prompt tag, "<name>@<version>"
    tokens_in: int = 0
    tokens_out: int = 0
    cached: bool = False
    seconds: float = 0.0
    error: str | None = None  # what failed (LLM error, malformed reply) and what was done instead
    reply: str = ""  # the raw reply (clipped)


@dataclass(slots=True)
class LevelTrace:
    question: str
    plan: str = "llm"  # "llm" | "offline" (no LLM configured or reachable)
    notice: str = ""  # why the plan is offline, said once
    searchers: list[str] = field(default_factory=list)
    scope: str = "tree"  # "tree" (collapsed tree, summaries included) | "leaves"
    sub_questions: list[SubQuestion] = field(default_factory=list)
    verdicts: list[RoundVerdict] = field(default_factory=list)
    calls: list[LLMCall] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def tokens_in(self) -> int:
        return sum(c.tokens_in for c in self.calls)

    @property
    def tokens_out(self) -> int:
        return sum(c.tokens_out for c in self.calls)

    @property
    def rounds(self) -> int:
        return max((s.round for s in self.sub_questions), default=0)

    @property
    def errors(self) -> list[str]:
        return [f"{c.step}: {c.error}" for c in self.calls if c.error]

    def asked(self) -> list[str]:
        return [s.text for s in self.sub_questions]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(tokens_in=self.tokens_in, tokens_out=self.tokens_out, rounds=self.rounds, llm_calls=len(self.calls))
        return data


class LevelHits(list):
    """The hits of a ``level`` search (a ``list[Hit]``, best first) with its :class:`LevelTrace`
    as ``.trace``."""

    trace: LevelTrace

    def __init__(self, hits: Any = (), trace: LevelTrace | None = None) -> None:
        super().__init__(hits)
        self.trace = trace if trace is not None else LevelTrace(question="")
