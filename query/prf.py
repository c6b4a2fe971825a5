"""Pseudo-relevance feedback (RM3), the offline source of ``multi``'s query variants.

RM3 (Abdul-Jaleel et al., 2004; Lavrenko & Croft's relevance model 1, interpolated with the
query): take the top-k hits of a first search as if they were relevant, estimate

    P(w | R) = Σ_d  P(w | d) · P(d | q),      P(w | d) = tf(w, d) / |d|,   P(d | q) ∝ score(d)

over their terms (stop words removed), keep the ``n_terms`` heaviest, and interpolate with the
query's own term distribution:

    P'(w) = λ · P(w | q) + (1 − λ) · P(w | R)      (λ = ``orig_weight``, 0.5 as in Anserini)

An :class:`Expansion` is that weighted term list; it renders as a Lucene query with boosts
(``term^0.213 ...``, executed by the sparse engine) and as plain text (for the embedder).

:func:`prf_variants` makes ``n`` variants: the first is RM3 over all feedback documents; each
next one is RM3 over a single feedback document (the 1st, 2nd, ... hit), so the variants pull
toward different passages — for a multi-hop question, toward the entity of a second hop.

Everything here is pure: text in, weighted terms out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["STOP_WORDS", "Expansion", "prf_variants", "relevance_model", "rm3", "terms"]

# English stop words: Lucene's/Elasticsearch's list plus the common function words of
# question text (NLTK-like); Lucene operators (and, or, not, to) are among them.
STOP_WORDS: frozenset[str] = frozenset(
    """a about above after again against all also am an and any are aren as at be because been before being
    below between both but by can could did didn do does doesn doing don down during each else even ever
    few for from further get got had has hasn have haven having he her here hers herself him himself his
    how however i if in into is isn it its itself just let like ll made make many may me might more most
    much must my myself no nor not now of off often on once one only or other our ours ourselves out over
    own per quite rather re s same say says said shall she should shouldn since so some such t than that
    the their theirs them themselves then there these they this those though through thus to too under
    until up upon us use used using ve very via was wasn we were weren what whatever when where whether
    which while who whom whose why will with within without won would wouldn yet you your yours yourself
    yourselves""".split()
)

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


def terms(text: str) -> list[str]:
    """Lower-cased word tokens of ``text`` without stop words and one-character tokens."""
    return [t for t in _TOKEN.findall(text.lower()) if len(t) > 1 and t not in STOP_WORDS]


@dataclass(frozen=True, slots=True)
class Expansion:
    """A weighted query: ``(term, weight)`` pairs, heaviest first, weights summing to 1."""

    weighted: tuple[tuple[str, float], ...]

    def lucene(self) -> str:
        """``term^w`` clauses (SHOULD), the weights scaled so the heaviest term has boost 1..
        Terms are plain word tokens, so the string always parses."""
        if not self.weighted:
            return ""
        top = self.weighted[0][1]
        return " ".join(f"{t}^{max(w / top, 0.01):.3f}" for t, w in self.weighted)

    def text(self) -> str:
        """The terms as plain text, heaviest first (what the dense side embeds)."""
        return " ".join(t for t, _ in self.weighted)

    def __bool__(self) -> bool:
        return bool(self.weighted)


def _normalise(weights: dict[str, float]) -> dict[str, float]:
    total = sum(weights.values())
    return {t: w / total for t, w in weights.items()} if total > 0 else {}


def relevance_model(
    docs: Sequence[str], doc_weights: Sequence[float] | None = None, *, n_terms: int = 10
) -> list[tuple[str, float]]:
    """RM1: the ``n_terms`` heaviest ``(term, P(w|R))`` over ``docs``, normalised to sum 1.

    ``doc_weights`` (default: uniform) are the documents' retrieval scores; negative ones count
    as 0. Ties keep the term seen first.
    """
    if doc_weights is None:
        doc_weights = [1.0] * len(docs)
    if len(doc_weights) != len(docs):
        raise ValueError(f"relevance_model: {len(docs)} docs but {len(doc_weights)} weights")
    dw = [max(float(w), 0.0) for w in doc_weights]
    total = sum(dw)
    if total <= 0:
        dw, total = [1.0] * len(docs), float(len(docs))
    model: dict[str, float] = {}
    for text, w in zip(docs, dw):
        toks = terms(text)
        if not toks or w <= 0:
            continue
        for term, tf in Counter(toks).items():
            model[term] = model.get(term, 0.0) + (tf / len(toks)) * (w / total)
    order = {t: i for i, t in enumerate(model)}
    best = sorted(model, key=lambda t: (-model[t], order[t]))[: max(0, n_terms)]
    return sorted(_normalise({t: model[t] for t in best}).items(), key=lambda tw: (-tw[1], order[tw[0]]))


def rm3(
    query: str,
    docs: Sequence[str],
    doc_weights: Sequence[float] | None = None,
    *,
    n_terms: int = 10,
    orig_weight: float = 0.5,
) -> Expansion:
    """RM3: the query's terms (weight ``orig_weight`` in all) interpolated with the relevance
    model of ``docs`` (weight ``1 - orig_weight``). A query with no content terms is all
    feedback; no feedback terms leaves the query alone."""
    if not 0.0 <= orig_weight <= 1.0:
        raise ValueError(f"rm3: orig_weight must be in [0, 1], got {orig_weight}")
    q = _normalise(dict(Counter(terms(query))))
    fb = dict(relevance_model(docs, doc_weights, n_terms=n_terms))
    lam = orig_weight if q and fb else (1.0 if q else 0.0)
    mixed: dict[str, float] = {}
    for t, w in q.items():
        mixed[t] = mixed.get(t, 0.0) + lam * w
    for t, w in fb.items():
        mixed[t] = mixed.get(t, 0.0) + (1.0 - lam) * w
    order = {t: i for i, t in enumerate(mixed)}
    ranked = sorted(mixed.items(), key=lambda tw: (-tw[1], order[tw[0]]))
    return Expansion(tuple((t, w) for t, w in ranked if w > 0))


def prf_variants(
    query: str,
    docs: Sequence[str],
    doc_weights: Sequence[float] | None = None,
    *,
    n: int = 3,
    n_terms: int = 10,
    orig_weight: float = 0.5,
) -> list[Expansion]:
    """``n`` RM3 expansions of ``query``: over all ``docs``, then over ``docs[0]``, ``docs[1]``, ...
    alone (see the module doc). Duplicates and empty expansions are dropped, so fewer than
    ``n`` may come back (none without feedback documents)."""
    if n < 1 or not docs:
        return []
    weights = list(doc_weights) if doc_weights is not None else [1.0] * len(docs)
    candidates = [rm3(query, docs, weights, n_terms=n_terms, orig_weight=orig_weight)]
    candidates += [rm3(query, [d], [1.0], n_terms=n_terms, orig_weight=orig_weight) for d in docs[: n - 1]]
    out: list[Expansion] = []
    seen: set[tuple[str, ...]] = set()
    for exp in candidates:
        key = tuple(sorted(t for t, _ in exp.weighted))
        if exp and key not in seen:
            seen.add(key)
            out.append(exp)
    return out[:n]
