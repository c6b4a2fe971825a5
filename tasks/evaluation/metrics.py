"""Evaluation metrics: pure functions over retrieved nodes, gold evidence and answers (docs/METHODS.md §8).

Retrieval-only (no LLM):
    answer_hit        a reference answer appears in the retrieved context (LevelRAG "retrieval success");
                      scored only where ``answer_applicable`` (the answer occurs in the gold evidence)
    evidence_matches  which gold evidence items each retrieved node covers (the basis of the rest)
    recall_at         share of gold evidence covered by the first k nodes (k=None: all, i.e. "at budget")
    recall_at_docs    share of gold evidence covered within the first k distinct documents (HippoRAG 2's recall@5)
    full_support      1.0 when every gold evidence item is covered
    reciprocal_rank   1 / rank of the first node that covers any gold evidence (0 when none)
    ndcg_at           binary-gain nDCG where a node gains 1 when it covers a gold item not covered before
    level_mix         share of retrieved nodes that are summaries (level > 0)
    percentile        latency p50 / p95 (linear interpolation, numpy's default)

Answer quality (needs an LLM that writes an answer): token_f1, exact_match (SQuAD), rouge_l
(rouge-score), bleu (sacrebleu, BLEU-1 / BLEU-4), all maxed over the reference answers.

How nodes count as evidence (documented in docs/EVALUATION.md):
- A *leaf* (level 0) covers a gold item when it comes from the gold item's document (``doc``), when
  its text overlaps the gold text (``text``), or both (``doc+text``, used for FinanceBench where
  the gold item is a passage of a long filing).
- A *summary* node (level > 0) never counts by provenance (its doc_ids are the union of many
  documents); it counts only when its own text overlaps the gold text. So a summary that quotes
  the evidence counts, a summary that merely descends from it does not.
- Answer-in-context uses every retrieved node, summaries included: it asks whether the reader saw
  the answer, whatever node carried it.

Normalization is SQuAD's (lowercase, strip punctuation, drop articles a/an/the, collapse
whitespace), extended to Unicode: NFKC first, and every Unicode punctuation character (category P*)
is stripped as well as ASCII ``string.punctuation``.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol

from arborag.extras import extra

__all__ = [
    "GoldItem",
    "MatchMode",
    "Retrieved",
    "RetrievedLike",
    "answer_applicable",
    "answer_hit",
    "answer_in_text",
    "bleu",
    "corpus_bleu",
    "evidence_matches",
    "exact_match",
    "full_support",
    "is_span_answer",
    "level_mix",
    "mean",
    "ndcg_at",
    "normalize_answer",
    "percentile",
    "recall_at",
    "recall_at_docs",
    "reciprocal_rank",
    "rouge_l",
    "text_overlap",
    "token_f1",
    "tokens",
]

MatchMode = Literal["doc", "text", "doc+text"]

_ASCII_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_NON_ANSWERS = frozenset({"", "yes", "no"})


# --------------------------------------------------------------------------------------------
# Normalization
# --------------------------------------------------------------------------------------------
def _is_punct(ch: str) -> bool:
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


@lru_cache(maxsize=65536)
def normalize_answer(text: str) -> str:
    """SQuAD normalization (Unicode-aware): lowercase, no punctuation, no articles, single spaces."""
    text = unicodedata.normalize("NFKC", text or "").lower()
    text = "".join(" " if _is_punct(ch) else ch for ch in text)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def tokens(text: str) -> list[str]:
    """Normalized word tokens of ``text``."""
    return normalize_answer(text).split()


def is_span_answer(answer: str) -> bool:
    """True when an answer can be looked for in text: not empty, not a bare yes/no."""
    return normalize_answer(answer) not in _NON_ANSWERS


# --------------------------------------------------------------------------------------------
# Answer in context
# --------------------------------------------------------------------------------------------
def answer_in_text(answers: Iterable[str], text: str) -> bool:
    """Some span answer occurs in ``text`` as whole words after normalization."""
    hay = f" {normalize_answer(text)} "
    return any(f" {normalize_answer(a)} " in hay for a in answers if is_span_answer(a))


def answer_hit(answers: Sequence[str], contexts: Sequence[str]) -> float | None:
    """1.0 if a reference answer appears in the retrieved context, else 0.0; None if not applicable.

    The context is the retrieved texts joined in retrieval order (what a reader sees), so an
    answer that spans the end of one node and the start of the next counts when those nodes are
    adjacent in the result list. Yes/no and empty answers are not applicable (None): finding
    "yes" in a context says nothing.
    """
    span_answers = [a for a in answers if is_span_answer(a)]
    if not span_answers:
        return None
    return 1.0 if answer_in_text(span_answers, " ".join(contexts)) else 0.0


def answer_applicable(answers: Sequence[str], gold_texts: Sequence[str] | None = None) -> bool:
    """Whether answer-in-context can be scored: a span answer exists and, when gold evidence
    texts are given, one of them contains it (else no retrieval could ever "find" the answer,
    e.g. NarrativeQA's free-form answers or FinanceBench's long-form ones)."""
    spans = [a for a in answers if is_span_answer(a)]
    if not spans:
        return False
    texts = [t for t in (gold_texts or []) if t]
    return not texts or answer_in_text(spans, " ".join(texts))


# --------------------------------------------------------------------------------------------
# Gold evidence
# --------------------------------------------------------------------------------------------
class RetrievedLike(Protocol):
    @property
    def level(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def doc_ids(self) -> Sequence[str]: ...


@dataclass(frozen=True, slots=True)
class Retrieved:
    """A retrieved node as the metrics see it (``query.Hit`` has the same fields)."""

    level: int
    text: str
    doc_ids: tuple[str, ...] = ()
    n_tokens: int = 0


@dataclass(frozen=True, slots=True)
class GoldItem:
    """One gold evidence item: the documents it lives in and (optionally) its text."""

    gold_id: str
    doc_ids: frozenset[str] = frozenset()
    text: str = ""


def _ngrams(toks: Sequence[str], n: int) -> set[tuple[str, ...]]:
    if not toks:
        return set()
    n = max(1, min(n, len(toks)))
    return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


def text_overlap(a: str, b: str, *, n: int = 5) -> float:
    """Containment of word n-grams: max(|A∩B|/|A|, |A∩B|/|B|) in [0, 1].

    1.0 when one normalized text lies inside the other (a chunk inside a gold passage, or a
    short gold sentence inside a chunk). Texts shorter than n words use n = their length.
    """
    ta, tb = tokens(a), tokens(b)
    if not ta or not tb:
        return 0.0
    m = min(n, len(ta), len(tb))
    ga, gb = _ngrams(ta, m), _ngrams(tb, m)
    inter = len(ga & gb)
    return max(inter / len(ga), inter / len(gb))


def evidence_matches(
    hits: Sequence[RetrievedLike],
    gold: Sequence[GoldItem],
    *,
    match: MatchMode = "doc",
    min_overlap: float = 0.5,
    ngram: int = 5,
) -> list[frozenset[int]]:
    """For each hit (in rank order), the indices of the gold items it covers.

    Leaves count by ``match`` (see the module docstring); summaries (level > 0) count only by
    text overlap >= ``min_overlap`` with the gold text.
    """
    out: list[frozenset[int]] = []
    for hit in hits:
        covered: set[int] = set()
        hit_docs = set(hit.doc_ids)
        for gi, g in enumerate(gold):
            if hit.level > 0:
                ok = bool(g.text) and text_overlap(hit.text, g.text, n=ngram) >= min_overlap
            elif match == "doc":
                ok = bool(hit_docs & g.doc_ids)
            elif match == "text":
                ok = bool(g.text) and text_overlap(hit.text, g.text, n=ngram) >= min_overlap
            else:  # doc+text
                ok = (
                    bool(hit_docs & g.doc_ids)
                    and bool(g.text)
                    and text_overlap(hit.text, g.text, n=ngram) >= min_overlap
                )
            if ok:
                covered.add(gi)
        out.append(frozenset(covered))
    return out


def recall_at(matches: Sequence[frozenset[int]], n_gold: int, k: int | None = None) -> float | None:
    """Share of the ``n_gold`` items covered by the first ``k`` hits (all hits when k is None)."""
    if n_gold <= 0:
        return None
    top = matches if k is None else matches[:k]
    covered = set().union(*top) if top else set()
    return len(covered) / n_gold


def recall_at_docs(matches: Sequence[frozenset[int]], doc_keys: Sequence[str | None], n_gold: int, k: int = 5) -> float | None:
    """Share of the ``n_gold`` items covered before the ``k+1``-th distinct document appears in
    the ranking (``doc_keys[i]``: hit i's document, None for a summary, which counts as its own).
    HippoRAG 2 counts recall@5 over passages: here, the first ``k`` distinct documents."""
    if n_gold <= 0:
        return None
    seen: set[str] = set()
    covered: set[int] = set()
    for i, (m, key) in enumerate(zip(matches, doc_keys)):
        doc = key if key is not None else f"#summary{i}"
        if doc not in seen:
            if len(seen) == k:
                break
            seen.add(doc)
        covered |= m
    return len(covered) / n_gold


def full_support(matches: Sequence[frozenset[int]], n_gold: int, k: int | None = None) -> float | None:
    """1.0 when every gold item is covered by the first ``k`` hits (all when None), else 0.0."""
    r = recall_at(matches, n_gold, k)
    return None if r is None else (1.0 if r >= 1.0 else 0.0)


def reciprocal_rank(matches: Sequence[frozenset[int]], n_gold: int | None = None) -> float | None:
    """1 / (1-based rank of the first hit covering any gold item); 0.0 when none does."""
    if n_gold is not None and n_gold <= 0:
        return None
    for rank, m in enumerate(matches, start=1):
        if m:
            return 1.0 / rank
    return 0.0


def ndcg_at(matches: Sequence[frozenset[int]], n_gold: int, k: int = 10) -> float | None:
    """nDCG@k with binary, novelty-aware gains.

    A hit gains 1 when it covers at least one gold item that no earlier hit covered (a second
    chunk of the same gold paragraph gains nothing), discounted by 1/log2(rank + 1). The ideal
    ranking covers one new gold item per rank: IDCG = sum over ranks 1..min(n_gold, k).
    """
    if n_gold <= 0:
        return None
    seen: set[int] = set()
    dcg = 0.0
    for rank, m in enumerate(matches[:k], start=1):
        new = m - seen
        if new:
            dcg += 1.0 / math.log2(rank + 1)
            seen |= new
    idcg = sum(1.0 / math.log2(r + 1) for r in range(1, min(n_gold, k) + 1))
    return dcg / idcg


def level_mix(levels: Sequence[int]) -> float | None:
    """Share of retrieved nodes that are summaries (level > 0); None for an empty retrieval."""
    if not levels:
        return None
    return sum(1 for lv in levels if lv > 0) / len(levels)


# --------------------------------------------------------------------------------------------
# Aggregates
# --------------------------------------------------------------------------------------------
def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the non-None, non-NaN values; None when there are none."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between order statistics."""
    vals = sorted(float(v) for v in values if v is not None and not math.isnan(v))
    if not vals:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    pos = (len(vals) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


# --------------------------------------------------------------------------------------------
# Answer quality (with an LLM)
# --------------------------------------------------------------------------------------------
def exact_match(prediction: str, references: Sequence[str]) -> float:
    """SQuAD exact match, maxed over references."""
    p = normalize_answer(prediction)
    return 1.0 if any(p == normalize_answer(r) for r in references) else 0.0


def _f1(pred: list[str], ref: list[str]) -> float:
    if not pred or not ref:
        return 1.0 if pred == ref else 0.0
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(ref)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, references: Sequence[str]) -> float:
    """SQuAD token F1 (bag of normalized tokens), maxed over references; 0.0 with no references."""
    pred = tokens(prediction)
    return max((_f1(pred, tokens(r)) for r in references), default=0.0)


class _WordTokenizer:
    """Unicode-aware tokenizer for rouge-score (its default drops every non-ASCII letter)."""

    _word = re.compile(r"\w+", re.UNICODE)

    def tokenize(self, text: str) -> list[str]:
        return self._word.findall(unicodedata.normalize("NFKC", text).lower())


@lru_cache(maxsize=1)
def _rouge_scorer():  # type: ignore[no-untyped-def]
    with extra("eval", "ROUGE and BLEU scores (arborag eval)"):
        from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=_WordTokenizer())


def rouge_l(prediction: str, references: Sequence[str]) -> float:
    """ROUGE-L F-measure (rouge-score, Unicode word tokens, no stemming), maxed over references."""
    if not references:
        return 0.0
    scorer = _rouge_scorer()
    return max(scorer.score(r, prediction)["rougeL"].fmeasure for r in references)


@lru_cache(maxsize=8)
def _bleu_metric(n: int):  # type: ignore[no-untyped-def]
    with extra("eval", "ROUGE and BLEU scores (arborag eval)"):
        from sacrebleu.metrics import BLEU

    return BLEU(max_ngram_order=n, effective_order=True, lowercase=True)


def bleu(prediction: str, references: Sequence[str], *, n: int = 4) -> float:
    """Sentence BLEU-n in [0, 1] (sacrebleu, 13a tokens, lowercase, effective order) vs all references."""
    if not references or not prediction.strip():
        return 0.0
    return _bleu_metric(n).sentence_score(prediction, list(references)).score / 100.0


def corpus_bleu(predictions: Sequence[str], references: Sequence[Sequence[str]], *, n: int = 4) -> float:
    """Corpus BLEU-n in [0, 1]; ``references[i]`` are the references of ``predictions[i]``.

    Questions with fewer references are padded by repeating their first one (sacrebleu wants
    reference streams of equal length).
    """
    if not predictions:
        return 0.0
    with extra("eval", "ROUGE and BLEU scores (arborag eval)"):
        from sacrebleu.metrics import BLEU

    width = max(len(r) for r in references)
    streams = [[(refs[i] if i < len(refs) else refs[0]) for refs in references] for i in range(width)]
    return BLEU(max_ngram_order=n, lowercase=True).corpus_score(list(predictions), streams).score / 100.0
