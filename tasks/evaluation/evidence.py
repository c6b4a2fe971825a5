"""Evidence found: does a retrieved context hold a question's gold evidence text?

FinanceBench answers are long-form and never occur verbatim in their evidence, so answer-in-context
cannot be scored there; page-level recall (:mod:`.gold`) only says a leaf of the evidence page was
retrieved, not that the part a reader needs is in the context. This module asks the question a
reader would: is the evidence *text* in the context? Two measures, both over the context as the
query returns it (the packed hits within the token budget):

- **figure share**: the share of the evidence's distinct figures (:func:`figures`: amounts,
  percentages, decimals and counts of 100 or more, normalised so that ``$1,234.50`` and
  ``1234.5`` are one figure; years, days of the month and footnote marks are not figures: a
  filing repeats them everywhere) that occur among the context's figures;
- **5-gram share**: the share of the evidence's distinct word 5-grams (normalised as in
  :func:`~arborag.tasks.evaluation.metrics.tokens`) that occur in some hit (5-grams are taken
  inside each hit, never across two).

The rule (:func:`evidence_found`; docs/EVALUATION.md, "FinanceBench: evidence found"): an evidence
item is found when its 5-gram share is at least :data:`MIN_NGRAM_SHARE` (0.4: FinanceBench's
evidence is a page extract of which a reader needs a part), or when its figure share is at least
:data:`MIN_FIGURE_SHARE` (0.5) and its 5-gram share at least :data:`MIN_FIGURE_NGRAM_SHARE` (0.2: the
figures in a table whose layout the PDF text reorders, but not figures that some other passage
merely repeats, such as an exhibit list naming the same notes); a question's evidence is found
when every one of its items is.
Everything here is a pure function of its arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

import polars as pl
import pyarrow as pa

from arborag.tasks.evaluation.metrics import tokens

__all__ = [
    "MIN_FIGURE_NGRAM_SHARE",
    "MIN_FIGURE_SHARE",
    "MIN_NGRAM_SHARE",
    "NGRAM",
    "EvidenceCoverage",
    "evidence_coverage",
    "evidence_found",
    "evidence_found_counts",
    "figures",
]

MIN_NGRAM_SHARE = 0.4
MIN_FIGURE_SHARE = 0.5
MIN_FIGURE_NGRAM_SHARE = 0.2
NGRAM = 5

# a number: digits with optional thousands separators and decimals, an optional "$" before and
# "%" after (spaces allowed: PDF tables print "3.6 %" and "$ 348")
_NUMBER = re.compile(r"(\$\s*)?(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w])(\s*%)?")


def _canonical(integer: str, fraction: str | None) -> str | None:
    try:
        value = Decimal(integer.replace(",", "") + (fraction or ""))
    except InvalidOperation:  # pragma: no cover - the pattern only matches digits
        return None
    text = format(value.normalize(), "f")
    return text


def figures(text: str) -> frozenset[str]:
    """The distinct figures of ``text``, normalised: thousands separators and trailing decimal
    zeros dropped, ``%`` kept (``3.6 %`` -> ``3.6%``), ``$`` dropped (``$ 348`` -> ``348``).

    A figure carries ``$`` or ``%``, has decimals or thousands separators, or is an integer of
    100 or more that is not a year (1900-2099). Bare small integers (footnote marks "(1)", "Item
    8", days of the month) and bare years are not figures: a filing repeats them on every page."""
    out: set[str] = set()
    for m in _NUMBER.finditer(text or ""):
        dollar, integer, fraction, percent = m.groups()
        if not (dollar or percent or fraction or "," in integer):
            value = int(integer)
            if value < 100 or (len(integer) == 4 and 1900 <= value <= 2099):
                continue
        canon = _canonical(integer, fraction)
        if canon is None:
            continue
        out.add(canon + ("%" if percent else ""))
    return frozenset(out)


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    toks = tokens(text)
    return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


@dataclass(frozen=True, slots=True)
class EvidenceCoverage:
    """How much of one evidence text a context holds."""

    n_figures: int  # distinct figures of the evidence
    figures_found: int  # of those, in the context
    n_ngrams: int  # distinct word n-grams of the evidence
    ngrams_found: int  # of those, in some hit

    @property
    def figure_share(self) -> float | None:
        """Share of the evidence's figures in the context (None: the evidence has none)."""
        return self.figures_found / self.n_figures if self.n_figures else None

    @property
    def ngram_share(self) -> float | None:
        """Share of the evidence's word n-grams in the context (None: shorter than n words)."""
        return self.ngrams_found / self.n_ngrams if self.n_ngrams else None

    def found(self, *, min_ngram_share: float = MIN_NGRAM_SHARE, min_figure_share: float = MIN_FIGURE_SHARE,
              min_figure_ngram_share: float = MIN_FIGURE_NGRAM_SHARE) -> bool:
        """The rule of :func:`evidence_found` for this one evidence text."""
        fs, ns = self.figure_share, self.ngram_share or 0.0
        return ns >= min_ngram_share or (fs is not None and fs >= min_figure_share and ns >= min_figure_ngram_share)


def evidence_coverage(evidence: str, contexts: Sequence[str], *, n: int = NGRAM) -> EvidenceCoverage:
    """Figures and word ``n``-grams of ``evidence`` that occur in ``contexts`` (the hits' texts,
    in any order). An evidence text shorter than ``n`` words is compared by its whole token run."""
    ev_figs = figures(evidence)
    ctx_figs: set[str] = set()
    for text in contexts:
        ctx_figs |= figures(text)
    n_ev = min(n, len(tokens(evidence))) or n
    ev_grams = _ngrams(evidence, n_ev)
    ctx_grams: set[tuple[str, ...]] = set()
    for text in contexts:
        ctx_grams |= _ngrams(text, n_ev)
    return EvidenceCoverage(
        n_figures=len(ev_figs),
        figures_found=len(ev_figs & ctx_figs),
        n_ngrams=len(ev_grams),
        ngrams_found=len(ev_grams & ctx_grams),
    )


def evidence_found(
    evidence: Iterable[str],
    contexts: Sequence[str],
    *,
    min_ngram_share: float = MIN_NGRAM_SHARE,
    min_figure_share: float = MIN_FIGURE_SHARE,
    min_figure_ngram_share: float = MIN_FIGURE_NGRAM_SHARE,
    n: int = NGRAM,
) -> bool | None:
    """Whether ``contexts`` (the packed hits of one search) hold every evidence text: each one's
    n-gram share >= ``min_ngram_share``, or its figure share >= ``min_figure_share`` and its
    n-gram share >= ``min_figure_ngram_share``.

    None when there is no evidence text to look for (nothing to score); an empty context finds
    nothing (False)."""
    items = [e for e in evidence if e and e.strip()]
    if not items:
        return None
    return all(
        evidence_coverage(e, contexts, n=n).found(min_ngram_share=min_ngram_share, min_figure_share=min_figure_share,
                                                  min_figure_ngram_share=min_figure_ngram_share)
        for e in items
    )


def evidence_found_counts(hits: pa.Table, queries: pa.Table) -> list[dict[str, Any]]:
    """Per (strategy, system, budget) of a HITS table: how many questions have their evidence
    found (:func:`evidence_found` over the row's ``texts`` and the question's ``gold_texts``).

    Rows, in first-seen order: ``{"strategy", "system", "budget", "found", "scored"}``; ``scored``
    counts the questions with an evidence text and a search that did not fail (a failed search
    counts as scored and not found: it returned nothing). Questions without evidence text are
    not counted."""
    q = pl.DataFrame(queries.select(["qid", "gold_texts"])).unique("qid", keep="last", maintain_order=True)
    h = pl.DataFrame(hits.select(["qid", "strategy", "system", "budget", "texts"]))
    df = h.with_row_index("_row").join(q, on="qid", how="inner").sort("_row")
    counts: dict[tuple[str, str, int], list[int]] = {}
    for strategy, system, budget, texts, gold_texts in df.select("strategy", "system", "budget", "texts", "gold_texts").iter_rows():
        found = evidence_found(gold_texts or [], texts or [])
        if found is None:
            continue
        c = counts.setdefault((strategy, system, int(budget)), [0, 0])
        c[0] += int(found)
        c[1] += 1
    return [{"strategy": s, "system": y, "budget": b, "found": f, "scored": n} for (s, y, b), (f, n) in counts.items()]
