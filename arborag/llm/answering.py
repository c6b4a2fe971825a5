"""The answering step shared by ``arborag ask`` (:mod:`arborag.query.answer`) and ``arborag eval
--answer`` (:mod:`arborag.tasks.evaluation.answer`): numbered passages in, a checked cited
answer out.

:func:`answer_passages` asks with the versioned prompt ``answer-with-citations``, parses the
reply into a :class:`~arborag.llm.structured.CitedAnswer` (strict, repaired, or read as text) and
checks it against the passages it was given:

- ``answered``: the model says the passages support an answer and cites at least one passage
  that exists (numbers it was not given are dropped, with a warning);
- ``refused``: the model says they do not, or its reply cites nothing it was given, or the
  reply cannot be read (an unsupported claim is never passed on as an answer);
- ``failed``: the call failed after the client's retries (timeouts, 5xx) or the endpoint is
  unreachable. Nothing here raises for those.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from arborag.llm.types import Usage

if TYPE_CHECKING:
    from arborag.llm.types import ChatLLM

__all__ = ["Judged", "answer_passages", "numbered_context", "strip_citations"]

Verdict = Literal["answered", "refused", "failed"]
_CITE = re.compile(r"\[(\d+)\]")
_CITES_RUN = re.compile(r"\s*(?:\[\d+\])+")


@dataclass(slots=True)
class Judged:
    """A checked answer: ``status``, the ``answer`` text (with ``[n]`` markers), its ``short``
    form (few words; may be empty), valid ``citations``, ``warnings`` and how the reply parsed."""

    status: Verdict
    answer: str
    short: str = ""
    citations: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    parse_status: str = ""

    def prediction(self) -> str:
        """What a QA metric scores: the short answer, else the answer without ``[n]`` markers;
        empty for a refusal or a failure."""
        if self.status != "answered":
            return ""
        return (self.short or strip_citations(self.answer)).strip()


def strip_citations(text: str) -> str:
    """``text`` without its ``[n]`` citation markers."""
    return " ".join(_CITES_RUN.sub("", text).split())


def numbered_context(passages: Sequence[str], titles: Sequence[str] | None = None) -> str:
    """``[n] (title) text`` blocks, numbered from 1, as the answering prompt shows them."""
    parts = []
    for n, text in enumerate(passages, start=1):
        title = titles[n - 1] if titles is not None and n - 1 < len(titles) else ""
        body = " ".join(str(text).split())
        parts.append(f"[{n}] ({title}) {body}" if title else f"[{n}] {body}")
    return "\n\n".join(parts)


def answer_passages(
    llm: ChatLLM,
    question: str,
    passages: Sequence[str],
    *,
    titles: Sequence[str] | None = None,
    usage: Usage | None = None,
    max_tokens: int | None = None,
) -> Judged:
    """Answer ``question`` from ``passages`` (numbered 1..n) with citations; module doc."""
    from arborag.llm.prompts import ANSWER_WITH_CITATIONS
    from arborag.llm.structured import CitedAnswer, ask_structured

    usage = usage if usage is not None else Usage()
    if not passages:
        return Judged("refused", "Nothing was retrieved for this question, so there is nothing to answer from.")
    got = ask_structured(llm, ANSWER_WITH_CITATIONS, CitedAnswer, fallback=None, usage=usage, max_tokens=max_tokens,
                         context=numbered_context(passages, titles), question=question)
    if got.value is None:
        if got.status.startswith("fallback: call failed"):
            reason = got.status[len("fallback: call failed: "):]
            return Judged("failed", f"The LLM could not be asked: {reason}", parse_status=got.status)
        return Judged("refused", "The LLM's reply could not be read as an answer; it is not shown as one.",
                      warnings=[f"unreadable reply: {got.text[:300]!r}"], parse_status=got.status)
    reply = got.value
    valid = range(1, len(passages) + 1)
    claimed = list(dict.fromkeys([*reply.citations, *(int(c) for c in _CITE.findall(reply.answer))]))
    warnings = [f"citation [{c}] points at no passage (dropped)" for c in claimed if c not in valid]
    citations = [c for c in claimed if c in valid]
    if not reply.supported and got.status == "repaired:text":  # plain text citing nothing: not a verdict
        warnings.append(f"the reply was not JSON and cites no passage: {got.text.strip()[:300]!r}")
        return Judged("refused", "The model's reply cites none of the retrieved passages, so it is not shown as an answer.",
                      warnings=warnings, parse_status=got.status)
    if not reply.supported:
        return Judged("refused", reply.answer.strip() or "The retrieved context does not support an answer.",
                      warnings=warnings, parse_status=got.status)
    if not citations:
        warnings.append(f"the model answered without citing a passage: {reply.answer.strip()[:300]!r}")
        return Judged("refused", "The model's answer cites none of the retrieved passages, so it is not shown as supported.",
                      warnings=warnings, parse_status=got.status)
    return Judged("answered", reply.answer.strip(), reply.short.strip(), citations, warnings, got.status)
