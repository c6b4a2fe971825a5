"""``--mode multi``: multi-query retrieval with fusion (docs/METHODS.md §6; the sliding-window paper,
LangChain's MultiQueryRetriever, LlamaIndex's QueryFusionRetriever).

1. The question itself runs through hybrid retrieval (dense + BM25, RRF).
2. ``n_variants`` (default 3) more queries are written:

   - by the LLM (prompt ``query-variants``, parsed strictly with a repair step), when one is
     configured (:mod:`arborag.llm.configured`) or passed as ``llm=``;
   - else — or when the LLM call fails after its retries, or its reply cannot be parsed — by
     pseudo-relevance feedback (:mod:`arborag.query.prf`, RM3 over the top ``fb_docs`` hits of
     step 1): the sparse side runs the weighted expansion as Lucene boosts (``term^w``), the dense
     side embeds the question plus the expansion terms. The fallback is recorded in the trace.

3. Each variant runs through hybrid retrieval; the rankings (question first) are fused with
   reciprocal rank fusion (k = ``query.rrf_k``); with ``mmr=True`` the fused candidates are
   re-ordered by maximal marginal relevance (λ = ``mmr_lambda``, 0.5) against the question's
   vector, relevance = the fused score rescaled to [0, 1].
4. Hits are added best-first until ``budget`` tokens are full (``budget=None``: ``k`` hits).
   A hit's ``score`` is its fused RRF score.

Options: ``n_variants``, ``expander`` (``auto`` | ``llm`` | ``prf``), ``mmr``, ``mmr_lambda``,
``fb_docs``, ``fb_terms``, ``orig_weight``, ``candidates`` (hits per ranking), ``llm`` (a
:class:`~arborag.llm.types.ChatLLM`, e.g. a test fake). The result is a list of hits with the
search's :class:`MultiTrace` as ``.trace`` (variants as sent, where they came from, tokens).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from arborag.errors import QueryError
from arborag.llm.types import Usage
from arborag.query.hits import fill_hits

if TYPE_CHECKING:
    from arborag.llm.types import ChatLLM
    from arborag.query.hits import Hit
    from arborag.query.index import Index

__all__ = ["MultiHits", "MultiTrace", "Variant", "query_llm", "search"]

Expander = Literal["auto", "llm", "prf"]

#: index -> its query-time LLM (None: none configured), built once per open index
_LLMS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


@dataclass(slots=True)
class Variant:
    """One query as sent: ``text`` (what the dense side embeds), ``sparse`` (what BM25 ran),
    whether ``sparse`` is Lucene syntax, and how many candidates it returned."""

    text: str
    sparse: str
    lucene: bool
    n_hits: int = 0


@dataclass(slots=True)
class MultiTrace:
    """What one ``multi`` search did: ``source`` of the variants (``llm`` | ``prf``), ``status``
    (``ok`` / ``repaired`` / ``fallback: ...``: why PRF replaced the LLM), the variants (the
    question first), LLM ``usage`` and wall ``seconds``."""

    question: str
    source: str = ""
    status: str = ""
    variants: list[Variant] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    mmr: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MultiHits(list):
    """The hits of a ``multi`` search (a ``list[Hit]``, best first) with its :class:`MultiTrace`."""

    trace: MultiTrace

    def __init__(self, hits: Any = (), trace: MultiTrace | None = None) -> None:
        super().__init__(hits)
        self.trace = trace if trace is not None else MultiTrace(question="")


def query_llm(index: Index) -> ChatLLM | None:
    """The configured LLM of ``index`` (calls cached in ``<corpus>/cache/llm``), made once per
    open index; None when no LLM is configured."""
    try:
        return _LLMS[index]
    except KeyError:
        pass
    from arborag.llm.configured import llm_from_config

    client = llm_from_config(index.config, cache_dir=index.corpus.cache_dir / "llm")
    _LLMS[index] = client
    return client


def search(
    index: Index,
    text: str,
    *,
    budget: int | None,
    k: int,
    levels: Sequence[int] | None,
    doc_ids: Sequence[str] | None,
    vector: np.ndarray | None,
    lucene: bool,
    n_variants: int = 3,
    expander: Expander = "auto",
    mmr: bool = False,
    mmr_lambda: float = 0.5,
    fb_docs: int = 10,
    fb_terms: int = 10,
    orig_weight: float = 0.5,
    candidates: int | None = None,
    question_weight: int = 1,
    llm: ChatLLM | None = None,
) -> MultiHits:
    """Multi-query retrieval (module doc). Raises ``QueryError`` for bad options only."""
    started = time.perf_counter()
    if n_variants < 0:
        raise QueryError(text, f"multi: n_variants must be >= 0, got {n_variants}")
    if expander not in ("auto", "llm", "prf"):
        raise QueryError(text, f"multi: expander must be auto, llm or prf, got {expander!r}")
    if not 0.0 <= mmr_lambda <= 1.0:
        raise QueryError(text, f"multi: mmr_lambda must be in [0, 1], got {mmr_lambda}")
    trace = MultiTrace(question=text, mmr=bool(mmr))
    cand_k = int(candidates) if candidates else max(k, 64) if budget is not None else max(4 * k, 20)
    if vector is None:
        vector = index.embed_queries([text])[0]

    def hybrid(query: str, vec: np.ndarray, as_lucene: bool) -> list[Hit]:
        return index.search(query, mode="hybrid", budget=None, k=cand_k, levels=levels, doc_ids=doc_ids,
                            lucene=as_lucene, vector=vec)

    rankings: list[list[Hit]] = [hybrid(text, vector, lucene)]
    trace.variants.append(Variant(text, text, lucene, len(rankings[0])))

    variants: list[Variant] = []
    if n_variants:
        if expander != "prf":
            chat = llm if llm is not None else query_llm(index)
            if chat is None and expander == "llm":
                from arborag.llm.configured import HOW_TO_CONFIGURE

                raise QueryError(text, "multi: expander='llm' needs an LLM and none is configured.\n" + HOW_TO_CONFIGURE)
            if chat is not None:
                variants, trace.status = _llm_variants(chat, text, n_variants, trace.usage)
                trace.source = "llm" if variants else ""
        if not variants:
            from arborag.query.prf import prf_variants, terms

            fb = rankings[0][: max(1, fb_docs)]
            exps = prf_variants(text, [h.text for h in fb], [h.score for h in fb],
                                n=n_variants, n_terms=fb_terms, orig_weight=orig_weight)
            q_terms = set(terms(text))
            variants = [
                Variant(" ".join([text, *(t for t, _ in e.weighted if t not in q_terms)]), e.lucene(), True)
                for e in exps
            ]
            trace.source = "prf"
            trace.status = trace.status or "ok"
    if variants:
        vecs = index.embed_queries([v.text for v in variants])
        for v, vec in zip(variants, vecs):
            hits = hybrid(v.sparse, vec, v.lucene)
            v.n_hits = len(hits)
            rankings.append(hits)
            trace.variants.append(v)

    # the question's own ranking counts question_weight times in the fusion
    rankings = [rankings[0]] * max(1, int(question_weight)) + rankings[1:]
    ordered = _fuse(index, rankings, vector, mmr=mmr, mmr_lambda=mmr_lambda)
    trace.seconds = time.perf_counter() - started
    return MultiHits(fill_hits(ordered, budget, k), trace)


def _llm_variants(chat: ChatLLM, text: str, n: int, usage: Usage) -> tuple[list[Variant], str]:
    from arborag.llm.prompts import QUERY_VARIANTS
    from arborag.llm.structured import QueryVariants, ask_structured

    got = ask_structured(chat, QUERY_VARIANTS, QueryVariants, fallback=None, usage=usage, n=n, question=text)
    if got.value is None:
        return [], got.status
    seen = {text.strip().lower()}
    out: list[Variant] = []
    for q in got.value.variants:
        if q.lower() not in seen:
            seen.add(q.lower())
            out.append(Variant(q, q, False))
    if not out:
        return [], "fallback: the LLM's variants repeat the question"
    return out[:n], got.status


def _fuse(index: Index, rankings: list[list[Hit]], vector: np.ndarray, *, mmr: bool, mmr_lambda: float) -> list[Hit]:
    from dataclasses import replace

    from arborag.query.fusion import rrf

    by_id: dict[str, Hit] = {}
    for ranking in rankings:
        for h in ranking:
            by_id.setdefault(h.node_id, h)
    fused = rrf([[h.node_id for h in r] for r in rankings], k=index.config.query.rrf_k)
    ordered = [replace(by_id[nid], score=float(s)) for nid, s in fused]
    if mmr and len(ordered) > 1:
        from arborag.query.fusion import mmr as mmr_order

        rows = [index.vectors.row_of[h.node_id] for h in ordered]
        scores = np.array([h.score for h in ordered])
        span = scores.max() - scores.min()
        rel = (scores - scores.min()) / span if span > 0 else np.ones_like(scores)
        picked = mmr_order(vector, index.vectors.matrix[rows], k=len(ordered), lambda_=mmr_lambda, relevance=rel)
        ordered = [ordered[i] for i in picked]
    return ordered
