"""Scoring: one RESULTS row (``storage.schemas.RESULTS``) per HITS row.

The bookkeeping columns (question type, counts, token sums, config hash) come from a polars join
of the hits with the queries; the text metrics of :mod:`arborag.tasks.evaluation.metrics` run once per hit
row (they compare each retrieval's texts with its question's gold evidence: a loop by nature).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from arborag.storage.corpus import Corpus
from arborag.storage.schemas import HITS, RESULTS
from arborag.tasks.evaluation import metrics as M
from arborag.tasks.evaluation.datasets import PreparedDataset
from arborag.tasks.evaluation.evidence import evidence_found_counts
from arborag.tasks.evaluation.gold import evidence_page_texts, gold_items, resolve_gold
from arborag.tasks.evaluation.write import write_results

__all__ = ["PredictionKey", "run_score", "score_hits", "score_row", "unresolved_gold"]

PredictionKey = tuple[str, str, str, int]  # (qid, strategy, system, budget)
_METRIC_COLUMNS = ("answer_hit", "recall_at_5", "recall_at_5_docs", "recall_at_10", "recall_at_budget", "full_support", "mrr", "ndcg_at_10", "level_mix",
                   "n_gold_resolved", "prediction", "f1", "em", "rouge_l", "bleu_1", "bleu_4")
_NUMERIC = {c: pl.Float64 for c in _METRIC_COLUMNS} | {"n_gold_resolved": pl.Int32, "prediction": pl.String}


def score_row(
    levels: Sequence[int],
    texts: Sequence[str],
    doc_ids: Sequence[Sequence[str] | None],
    golds: Sequence[M.GoldItem],
    answers: Sequence[str],
    *,
    applicable: bool,
    failed: bool,
    match: M.MatchMode,
    prediction: str | None = None,
) -> dict[str, Any]:
    """The metric columns of one retrieval (see :mod:`arborag.tasks.evaluation.metrics`); a failed search
    has no retrieval metrics, a question whose answer is not in its evidence no hit rate."""
    retrieved = [M.Retrieved(level=lv, text=t, doc_ids=tuple(d or ())) for lv, t, d in zip(levels, texts, doc_ids)]
    matches = M.evidence_matches(retrieved, golds, match=match)
    n_gold = len(golds)
    row: dict[str, Any] = {
        "answer_hit": None if failed or not applicable else M.answer_hit(answers, texts),
        "recall_at_5": None if failed else M.recall_at(matches, n_gold, 5),
        "recall_at_5_docs": None if failed else M.recall_at_docs(matches, [(d[0] if lv == 0 and d else None) for lv, d in zip(levels, doc_ids)],
                                                                 n_gold, 5),
        "recall_at_10": None if failed else M.recall_at(matches, n_gold, 10),
        "recall_at_budget": None if failed else M.recall_at(matches, n_gold),
        "full_support": None if failed else M.full_support(matches, n_gold),
        "mrr": None if failed else M.reciprocal_rank(matches, n_gold),
        "ndcg_at_10": None if failed else M.ndcg_at(matches, n_gold, 10),
        "level_mix": None if failed else M.level_mix(levels),
        "n_gold_resolved": sum(1 for g in golds if g.doc_ids),
        "prediction": None, "f1": None, "em": None, "rouge_l": None, "bleu_1": None, "bleu_4": None,
    }
    if prediction is not None and answers:
        row.update(
            prediction=prediction,
            f1=M.token_f1(prediction, answers),
            em=M.exact_match(prediction, answers),
            rouge_l=M.rouge_l(prediction, answers),
            bleu_1=M.bleu(prediction, answers, n=1),
            bleu_4=M.bleu(prediction, answers, n=4),
        )
    return row


def score_hits(
    hits: pa.Table,
    queries: pa.Table,
    gold_docs: dict[str, dict[str, frozenset[str]]],
    *,
    dataset: str,
    match: M.MatchMode,
    config_hashes: dict[str, str] | None = None,
    predictions: dict[PredictionKey, str] | None = None,
    gold_pages: dict[str, dict[str, str]] | None = None,
) -> pa.Table:
    """One RESULTS row per HITS row whose question is in ``queries`` (hits order kept).

    ``gold_docs[strategy]`` maps gold ids to doc_ids of that strategy's built corpus;
    ``predictions`` maps (qid, strategy, system, budget) to an LLM answer; ``gold_pages[strategy]``
    maps page-level gold ids to their page text (:func:`~arborag.tasks.evaluation.gold.evidence_page_texts`)."""
    q = pl.DataFrame(queries.select(["qid", "answers", "gold_ids", "gold_texts", "type"])).unique("qid", keep="last", maintain_order=True)
    h = pl.DataFrame(hits.select(HITS.names)).with_row_index("_row")
    df = h.join(q, on="qid", how="inner").sort("_row")
    predictions = predictions or {}
    applicable: dict[str, bool] = {}
    scored: list[dict[str, Any]] = []
    for r in df.select("qid", "strategy", "system", "budget", "levels", "texts", "doc_ids", "error", "answers", "gold_ids", "gold_texts").iter_rows():
        qid, strategy, system, budget, levels, texts, doc_ids, error, answers, gold_ids, gold_texts = r
        answers = answers or []
        if qid not in applicable:
            applicable[qid] = M.answer_applicable(answers, gold_texts)
        golds = gold_items(gold_ids or [], gold_texts, gold_docs.get(strategy, {}), (gold_pages or {}).get(strategy))
        scored.append(score_row(levels or [], texts or [], doc_ids or [], golds, answers, applicable=applicable[qid],
                                failed=error is not None, match=match, prediction=predictions.get((qid, strategy, system, budget))))
    metrics = pl.DataFrame(scored, schema=_NUMERIC) if scored else pl.DataFrame(schema=_NUMERIC)
    hashes = config_hashes or {}
    out = pl.concat([df, metrics], how="horizontal").select(
        pl.lit(dataset, pl.String).alias("dataset"),
        "qid", "type", "strategy", "system", "mode", "budget",
        pl.col("levels").list.len().cast(pl.Int32).alias("n_hits"),
        pl.col("n_tokens").list.sum().fill_null(0).cast(pl.Int32).alias("context_tokens"),
        "levels", *_METRIC_COLUMNS[:9], "latency_ms", "embed_ms",
        pl.col("gold_ids").list.len().fill_null(0).cast(pl.Int32).alias("n_gold"),
        *_METRIC_COLUMNS[9:], "error",
        pl.col("strategy").replace_strict(hashes, default=None, return_dtype=pl.String).alias("config_hash"),
    )
    return out.to_arrow().select(RESULTS.names).cast(RESULTS)


def unresolved_gold(queries: pa.Table, gold_docs: dict[str, frozenset[str]]) -> int:
    """How many distinct gold ids the queries need that map to no document of the corpus."""
    resolved = [g for g, docs in gold_docs.items() if docs]
    needed = pl.DataFrame(queries.select(["gold_ids"])).get_column("gold_ids").explode().drop_nulls().unique()
    return int((~needed.is_in(resolved)).sum())


def run_score(
    prepared: PreparedDataset,
    records: dict[str, dict[str, Any]],
    hits_paths: dict[str, Path],
    out_dir: Path,
    *,
    predictions: dict[PredictionKey, str] | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    """Runner: resolve gold evidence in each strategy's built corpus, score every HITS file,
    write ``out_dir/results.parquet``; returns the results and ``{"unresolved_gold": ...,
    "evidence_found": ...}`` (:func:`~arborag.tasks.evaluation.evidence.evidence_found_counts`)."""
    queries = prepared.queries()
    evidence = prepared.evidence()
    gold_docs: dict[str, dict[str, frozenset[str]]] = {}
    gold_pages: dict[str, dict[str, str]] = {}
    unresolved: dict[str, int] = {}
    for strategy, rec in records.items():
        documents = Corpus(rec["corpus_dir"]).read("documents")
        gold_docs[strategy] = resolve_gold(evidence, documents)
        gold_pages[strategy] = evidence_page_texts(evidence, documents, gold_docs[strategy])
        unresolved[strategy] = unresolved_gold(queries, gold_docs[strategy])
    tables = [pq.read_table(p) for p in hits_paths.values() if Path(p).exists()]
    hits = pa.concat_tables([t.cast(HITS) for t in tables]) if tables else HITS.empty_table()
    results = score_hits(
        hits,
        queries,
        gold_docs,
        dataset=prepared.name,
        match=prepared.match,
        config_hashes={s: r["config_hash"] for s, r in records.items()},
        predictions=predictions,
        gold_pages=gold_pages,
    )
    write_results(results, out_dir)
    return results, {"unresolved_gold": unresolved, "evidence_found": evidence_found_counts(hits, queries)}
