"""Answers with citations (``arborag ask``): retrieve, number the passages, ask the LLM, check.

:func:`ask` retrieves with any mode, turns the hits into numbered :class:`Source` passages
(node id, level, documents with title and uri, character offsets of a leaf in its document
from the snapshot's ``chunks.parquet``) and asks the LLM (prompt ``answer-with-citations``) for
a structured :class:`~arborag.llm.structured.CitedAnswer`. The result is an :class:`Answer`:

- ``answered`` — the model says the passages support an answer and cites at least one passage
  that exists (citations to numbers that were not given are dropped, with a warning);
- ``refused`` — the model says the passages do not support an answer, or its reply cites
  nothing it was given: arborag says so instead of showing an unsupported claim;
- ``no_llm`` — no LLM is configured: answering needs one (:data:`~arborag.llm.configured.HOW_TO_CONFIGURE`);
  the retrieved passages and their sources are still returned;
- ``failed`` — the LLM call failed after its retries (the reason is kept); passages returned.

:func:`answer_from_sources` is the LLM step alone (testable with a scripted fake; the checks live
in :mod:`arborag.llm.answering`, shared with ``arborag eval --answer``);
:func:`build_sources` the provenance step alone. Tokens spent (retrieval-time LLM calls of
``multi`` included) and their cost at ``summarize.price_*_per_1k`` are on the answer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from arborag.llm.types import Usage
from arborag.query.options import FROM_CONFIG, FromConfig

if TYPE_CHECKING:
    from arborag.llm.types import ChatLLM
    from arborag.query.index import Hit, Index

__all__ = ["Answer", "DocRef", "Source", "answer_from_sources", "ask", "build_sources", "context_text"]

Status = Literal["answered", "refused", "no_llm", "failed"]


@dataclass(frozen=True, slots=True)
class DocRef:
    """A source document of a passage: id, title (or file name), uri."""

    doc_id: str
    title: str
    uri: str


@dataclass(frozen=True, slots=True)
class Source:
    """Passage ``[n]`` given to the LLM: a retrieved node and where it comes from. A leaf has
    its character span ``start_char``/``end_char`` in its document (and a section ``header``);
    a summary node spans several documents and has no offsets."""

    n: int
    node_id: str
    level: int
    score: float
    n_tokens: int
    text: str
    docs: tuple[DocRef, ...]
    start_char: int | None = None
    end_char: int | None = None
    header: str | None = None

    def label(self) -> str:
        """``title`` (+ ``chars a-b`` for a leaf, ``summary, level L`` otherwise)."""
        titles = ", ".join(d.title for d in self.docs[:3]) + (" …" if len(self.docs) > 3 else "")
        where = f"chars {self.start_char}-{self.end_char}" if self.start_char is not None else f"summary, level {self.level}"
        return f"{titles or '?'} ({where})"


@dataclass(slots=True)
class Answer:
    """The outcome of one question (module doc). ``citations`` are passage numbers; ``cited``
    the sources they point at."""

    question: str
    status: Status
    answer: str
    citations: list[int]
    sources: list[Source]
    mode: str
    model: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    warnings: list[str] = field(default_factory=list)
    parse_status: str = ""
    short: str = ""  # the answer in a few words, when the model gave one
    seconds: float = 0.0
    retrieval: dict[str, Any] | None = None  # a plug-in mode's trace, as data

    @property
    def cited(self) -> list[Source]:
        by_n = {s.n: s for s in self.sources}
        return [by_n[c] for c in self.citations if c in by_n]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cited"] = [s.node_id for s in self.cited]
        return data


def build_sources(index: Index, hits: Sequence[Hit]) -> list[Source]:
    """Hits as numbered sources (1..n, in rank order) with titles, uris and leaf offsets."""
    import pyarrow as pa
    import pyarrow.compute as pc

    node_ids = [h.node_id for h in hits]
    doc_ids = sorted({d for h in hits for d in h.doc_ids})
    spans: dict[str, tuple[int, int, str | None]] = {}
    if node_ids:
        chunks = index.leaf_chunks().select(["chunk_id", "start_char", "end_char", "header"])
        chunks = chunks.filter(pc.is_in(chunks.column("chunk_id"), pa.array(node_ids, pa.string())))
        for cid, s, e, hdr in zip(*(chunks.column(c).to_pylist() for c in ("chunk_id", "start_char", "end_char", "header"))):
            spans[cid] = (int(s), int(e), hdr)
    docs: dict[str, DocRef] = {}
    if doc_ids:
        from pathlib import PurePath

        table = index.documents().select(["doc_id", "title", "uri"])
        table = table.filter(pc.is_in(table.column("doc_id"), pa.array(doc_ids, pa.string())))
        for d, ti, u in zip(*(table.column(c).to_pylist() for c in ("doc_id", "title", "uri"))):
            docs[d] = DocRef(d, ti or PurePath(u or d).name, u or "")
    out: list[Source] = []
    for n, h in enumerate(hits, start=1):
        start, end, header = spans.get(h.node_id, (None, None, None)) if h.level == 0 else (None, None, None)
        refs = tuple(docs.get(d, DocRef(d, d[:12], "")) for d in h.doc_ids)
        out.append(Source(n, h.node_id, int(h.level), float(h.score), int(h.n_tokens), h.text, refs, start, end, header))
    return out


def context_text(sources: Sequence[Source]) -> str:
    """The numbered passages as the prompt shows them: ``[n] (title) text``."""
    from arborag.llm.answering import numbered_context

    return numbered_context([s.text for s in sources], [", ".join(d.title for d in s.docs[:3]) for s in sources])


def answer_from_sources(
    llm: ChatLLM,
    question: str,
    sources: Sequence[Source],
    *,
    mode: str = "",
    usage: Usage | None = None,
    max_tokens: int | None = None,
) -> Answer:
    """Ask ``llm`` to answer ``question`` from ``sources`` with citations
    (:func:`arborag.llm.answering.answer_passages`); never raises for a failed call or a
    malformed reply (module doc for the statuses)."""
    from arborag.llm.answering import answer_passages

    usage = usage if usage is not None else Usage()
    judged = answer_passages(llm, question, [s.text for s in sources],
                             titles=[", ".join(d.title for d in s.docs[:3]) for s in sources], usage=usage, max_tokens=max_tokens)
    return Answer(question=question, status=judged.status, answer=judged.answer, citations=judged.citations,
                  sources=list(sources), mode=mode, model=getattr(llm, "model", None), usage=usage,
                  warnings=judged.warnings, parse_status=judged.parse_status, short=judged.short)


def ask(
    index: Index,
    question: str,
    *,
    llm: ChatLLM | None,
    mode: str | None = None,
    budget: "int | None | FromConfig" = FROM_CONFIG,
    k: int | None = None,
    levels: Sequence[int] | None = None,
    max_tokens: int | None = None,
    **options: Any,
) -> Answer:
    """Retrieve with ``mode`` and answer with ``llm`` (None: status ``no_llm``, the passages
    still returned). ``multi`` and ``level`` get the same ``llm`` for their own calls. ``mode``,
    ``budget``, ``k`` not given: ``query.*`` of the index's config, as in ``Index.search``."""
    from arborag.llm.configured import HOW_TO_CONFIGURE
    from arborag.query.options import query_settings

    mode, budget, k = query_settings(index.config.query, mode=mode, budget=budget, k=k)

    started = time.perf_counter()
    usage = Usage()
    if mode in ("multi", "level") and llm is not None:  # the modes that take an llm= of their own
        options.setdefault("llm", llm)
    hits = index.search(question, mode=mode, budget=budget, k=k, levels=levels, **options)
    retrieval = _retrieval_trace(hits, usage)
    sources = build_sources(index, hits)
    if llm is None:
        ans = Answer(question=question, status="no_llm", answer="Answering needs an LLM, and none is configured. " + HOW_TO_CONFIGURE,
                     citations=[], sources=sources, mode=mode, usage=usage)
    else:
        ans = answer_from_sources(llm, question, sources, mode=mode, usage=usage, max_tokens=max_tokens)
    ans.retrieval = retrieval
    cfg = index.config.summarize
    ans.cost = usage.cost(cfg.price_in_per_1k, cfg.price_out_per_1k)
    ans.seconds = time.perf_counter() - started
    return ans


def _retrieval_trace(hits: Any, usage: Usage) -> dict[str, Any] | None:
    """A plug-in mode's trace as data; its LLM tokens are added to ``usage``."""
    trace = getattr(hits, "trace", None)
    if trace is None:
        return None
    inner = getattr(trace, "usage", None)
    if isinstance(inner, Usage):
        usage.merge(inner)
    else:  # e.g. level's trace: token totals and a list of calls
        usage.tokens_in += int(getattr(trace, "tokens_in", 0) or 0)
        usage.tokens_out += int(getattr(trace, "tokens_out", 0) or 0)
        usage.calls += len(getattr(trace, "calls", None) or ())
    to_dict = getattr(trace, "to_dict", None)
    return to_dict() if callable(to_dict) else None
