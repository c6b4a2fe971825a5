"""LevelRAG's low-level searchers (docs/METHODS.md §7): each rewrites a sub-question for its own retriever.

- :class:`SparseSearcher` — the LLM rewrites the sub-question into Lucene syntax (quoted
  entities, stop words dropped); the query is **executed** by the index's sparse engine
  (``index.search(..., mode="sparse", lucene=True)``: tantivy or Elasticsearch, not sent as
  plain text as FlexRAG does). A rewrite that is not valid Lucene is reported in the trace (the
  :class:`~arborag.errors.QueryError`'s reason and position) and retried as a plain match of its
  words. Then up to ``rounds`` rounds of feedback: the LLM reads the top hits and either says
  they are enough or picks one refinement — *extend* (add ``"kw"``), *filter* (add ``-"kw"``),
  *emphasize* (add ``"kw"^2``) — which arborag composes into the next query (escaped, so a
  refinement is always valid Lucene). A query is never sent twice.
- :class:`DenseSearcher` — HyDE: the LLM writes a pseudo-passage answering the sub-question;
  the index is searched (cosine, collapsed tree) with the sub-question + passage; up to
  ``rounds`` rounds in which the LLM judges the hits and rewrites the passage from what was found.
- :class:`WebSearcher` — a :class:`~arborag.query.level.web.WebProvider`; off by default.

Each returns its hits (the attempts' rankings fused by reciprocal rank fusion) and a
:class:`~arborag.query.level.trace.SearcherRun`. Without an LLM the sparse searcher sends an
offline Lucene rewrite (:func:`offline_lucene`) and the dense searcher the sub-question itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

from arborag.errors import BackendUnavailable, QueryError
from arborag.llm import prompts as P
from arborag.llm.structured import Rewrite
from arborag.query.hits import Hit
from arborag.query.level.llm import DenseFeedback, Passage, SparseFeedback, StepLLM
from arborag.query.level.trace import Attempt, SearcherRun
from arborag.storage.lucene.render import plain_query, quote_phrase

if TYPE_CHECKING:
    from arborag.query.index import Index
    from arborag.query.level.web import WebProvider

__all__ = ["DenseSearcher", "SearchContext", "SparseSearcher", "WebSearcher", "compose", "fuse", "offline_lucene"]

STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between both
    but by can could did do does doing down during each few for from further had has have having he her here hers
    herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once
    only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves also name named known""".split()
)
_WORD = re.compile(r"[\w'’-]+", re.UNICODE)
_ENTITY = re.compile(r"\b(?:[A-Z][\w'’.-]*)(?:\s+(?:of|the|de|von|van|and|&)?\s*[A-Z][\w'’.-]*)*")


@dataclass
class SearchContext:
    """What every low-level searcher of one query shares."""

    index: Index
    llm: StepLLM
    levels: Sequence[int] | None
    doc_ids: Sequence[str] | None
    candidates: int = 20  # hits asked of the engine per query
    show: int = 4  # hits shown to the LLM for feedback
    show_words: int = 60  # words of each hit shown
    rrf_k: int = 60
    question: str = ""  # the user's question and its vector (precomputed by the caller, e.g. the evaluation)
    question_vector: Any = None

    def context(self, hits: Sequence[Hit]) -> str:
        lines = []
        for i, h in enumerate(hits[: self.show], 1):
            words = h.text.split()
            text = " ".join(words[: self.show_words]) + (" …" if len(words) > self.show_words else "")
            lines.append(f"[{i}] {text}")
        return "\n".join(lines) if lines else "(no results)"


def fuse(rankings: Sequence[Sequence[Hit]], *, k: int = 60) -> list[Hit]:
    """Reciprocal rank fusion of hit lists (by node id); each hit keeps its fused score."""
    from arborag.query.fusion import rrf

    by_id: dict[str, Hit] = {}
    for ranking in rankings:
        for h in ranking:
            by_id.setdefault(h.node_id, h)
    fused = rrf([[h.node_id for h in r] for r in rankings if r], k=k)
    return [replace(by_id[n], score=s) for n, s in fused]


def offline_lucene(question: str) -> str:
    """A Lucene query written without an LLM: capitalised multi-word entities quoted, the other
    words kept unless they are stop words (``Who directed the film Blade Runner?`` →
    ``"Blade Runner" directed film``). Always valid Lucene; never empty for a non-empty question."""
    phrases: list[str] = []
    covered: set[str] = set()
    for m in _ENTITY.finditer(question):
        words = m.group(0).split()
        while words and words[0].lower() in STOP_WORDS:  # "The", "Which" at a sentence start
            words = words[1:]
        if len(words) >= 2:
            phrases.append(" ".join(words))
            covered.update(w.lower() for w in words)
    terms = [w for w in _WORD.findall(question) if w.lower() not in STOP_WORDS and w.lower() not in covered]
    parts = [quote_phrase(p) for p in dict.fromkeys(phrases)] + [plain_query(t) for t in dict.fromkeys(terms)]
    parts = [p for p in parts if p]
    return " ".join(parts) if parts else plain_query(question) or quote_phrase(question)


def compose(base: str, action: str, keywords: Sequence[str]) -> str:
    """The next sparse query: ``base`` plus the refinement (always valid Lucene)."""
    kws = [k for k in (" ".join(str(k).split()) for k in keywords) if k and plain_query(k)][:5]
    if action == "extend":
        extra = [quote_phrase(k) for k in kws]
    elif action == "filter":
        extra = ["-" + quote_phrase(k) for k in kws]
    elif action == "emphasize":
        extra = [quote_phrase(k) + "^2" for k in kws]
    else:
        extra = []
    present = set(base.split())
    extra = [e for e in dict.fromkeys(extra) if e not in present]  # a clause already there adds nothing
    return " ".join([base, *extra]).strip()


def _norm(query: str) -> str:
    return " ".join(query.lower().split())


class SparseSearcher:
    name = "sparse"

    def __init__(self, ctx: SearchContext, *, rounds: int = 3) -> None:
        self.ctx = ctx
        self.rounds = rounds

    def _run(self, run: SearcherRun, query: str, round_: int, action: str) -> tuple[list[Hit], str]:
        """Run ``query`` as Lucene; an invalid one is reported and retried as plain words.
        Returns the hits and the query that ran (the base of the next refinement)."""
        c = self.ctx
        att = Attempt(round=round_, query=query, syntax="lucene", action=action)
        run.attempts.append(att)
        try:
            hits = c.index.search(query, mode="sparse", lucene=True, budget=None, k=c.candidates, levels=c.levels, doc_ids=c.doc_ids)
            att.hits = [(h.node_id, h.score) for h in hits]
            return hits, query
        except QueryError as exc:
            att.error, att.error_position = exc.reason, exc.position
            att.note = "invalid Lucene: retried as a plain match of its words"
        plain = plain_query(query) or query
        retry = Attempt(round=round_, query=query, syntax="plain", action="retry-plain")
        run.attempts.append(retry)
        try:
            hits = c.index.search(query, mode="sparse", lucene=False, budget=None, k=c.candidates, levels=c.levels, doc_ids=c.doc_ids)
        except QueryError as exc:  # e.g. more terms than the engine takes: nothing from this query
            retry.error, retry.error_position = exc.reason, exc.position
            return [], plain
        retry.hits = [(h.node_id, h.score) for h in hits]
        return hits, plain

    def search(self, question: str) -> tuple[list[Hit], SearcherRun]:
        c = self.ctx
        run = SearcherRun(self.name)
        rewrite = c.llm.ask("sparse-rewrite", P.LEVEL_SPARSE_REWRITE, Rewrite, question=question)
        if rewrite is not None:
            query, action = rewrite.query, "rewrite"
        else:
            query, action = offline_lucene(question), "offline"
        rankings: list[list[Hit]] = []
        sent: set[str] = set()
        for round_ in range(1, self.rounds + 1):
            sent.add(_norm(query))
            hits, base = self._run(run, query, round_, action)
            rankings.append(hits)
            if round_ == self.rounds or c.llm.down:
                break
            fb = c.llm.ask("sparse-feedback", P.LEVEL_SPARSE_FEEDBACK, SparseFeedback,
                           question=question, query=query, context=c.context(hits))
            last = run.attempts[-1]
            if fb is None:
                break
            last.verdict = "enough" if fb.sufficient else "not enough"
            if fb.sufficient or fb.action == "none" or not fb.keywords:
                break
            nxt = compose(base, fb.action, fb.keywords)
            if _norm(nxt) in sent:
                last.note = (last.note + "; " if last.note else "") + "refinement repeats a sent query: stopped"
                break
            query, action = nxt, fb.action
        return fuse(rankings, k=c.rrf_k), run


class DenseSearcher:
    name = "dense"

    def __init__(self, ctx: SearchContext, *, rounds: int = 3) -> None:
        self.ctx = ctx
        self.rounds = rounds

    def _run(self, run: SearcherRun, text: str, round_: int, action: str) -> list[Hit]:
        c = self.ctx
        att = Attempt(round=round_, query=text, syntax="text", action=action)
        run.attempts.append(att)
        vector = c.question_vector if text == c.question else None
        hits = c.index.search(text, mode="collapsed", budget=None, k=c.candidates, levels=c.levels, doc_ids=c.doc_ids, vector=vector)
        att.hits = [(h.node_id, h.score) for h in hits]
        return hits

    def search(self, question: str) -> tuple[list[Hit], SearcherRun]:
        c = self.ctx
        run = SearcherRun(self.name)
        hyde = c.llm.ask("hyde", P.LEVEL_HYDE, Passage, question=question)
        text, action = (f"{question}\n{hyde.passage}", "hyde") if hyde is not None else (question, "question")
        rankings: list[list[Hit]] = []
        sent: set[str] = set()
        for round_ in range(1, self.rounds + 1):
            sent.add(_norm(text))
            hits = self._run(run, text, round_, action)
            rankings.append(hits)
            if round_ == self.rounds or c.llm.down:
                break
            fb = c.llm.ask("dense-feedback", P.LEVEL_DENSE_FEEDBACK, DenseFeedback, question=question, context=c.context(hits))
            last = run.attempts[-1]
            if fb is None:
                break
            last.verdict = "enough" if fb.sufficient else "not enough"
            if fb.sufficient or not fb.passage.strip():
                break
            nxt = f"{question}\n{' '.join(fb.passage.split())}"
            if _norm(nxt) in sent:
                last.note = "rewrite repeats a sent passage: stopped"
                break
            text, action = nxt, "hyde"
        return fuse(rankings, k=c.rrf_k), run


class WebSearcher:
    """Web results as hits: ``node_id`` ``web:<n>``, ``level`` -1, ``doc_ids`` ``(url,)``."""

    name = "web"

    def __init__(self, ctx: SearchContext, provider: WebProvider, *, k: int = 5) -> None:
        self.ctx = ctx
        self.provider = provider
        self.k = k

    def search(self, question: str) -> tuple[list[Hit], SearcherRun]:
        from arborag.hashing import short_id
        from arborag.tokenizer import get_tokenizer

        run = SearcherRun(self.name)
        att = Attempt(round=1, query=question, syntax="web", action="question", note=f"provider {self.provider.name}")
        run.attempts.append(att)
        try:
            results = self.provider.search(question, k=self.k)
        except BackendUnavailable as exc:
            att.error = str(exc)
            return [], run
        tok = get_tokenizer()
        hits = []
        for rank, r in enumerate(results):
            text = f"{r.title}\n{r.snippet}".strip()
            hits.append(Hit(f"web:{short_id(r.url)}", -1, 1.0 / (1 + rank), text, (r.url,), tok.count(text)))
        att.hits = [(h.node_id, h.score) for h in hits]
        return hits, run
