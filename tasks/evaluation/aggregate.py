"""Aggregates of a RESULTS table, computed with polars: the numbers of every report table.

``aggregate(results, keys)`` groups the rows by ``keys`` and gives, per group, the mean of every
metric (null and NaN skipped), counts, latency percentiles and the level mix of the retrieved
nodes. The means and percentiles are computed exactly as :func:`arborag.tasks.evaluation.metrics.mean` and
:func:`~arborag.tasks.evaluation.metrics.percentile` compute them (sequential sum in row order; linear
interpolation at ``(n - 1) * q / 100``), so the tables do not move by a rounding step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import polars as pl
import pyarrow as pa

__all__ = [
    "ANSWER_METRICS",
    "METRICS",
    "STRATEGY_ORDER",
    "SYSTEM_ORDER",
    "Frame",
    "aggregate",
    "distinct_count",
    "lazy",
    "mean_expr",
    "order",
    "percentile_expr",
    "type_label",
    "unique_values",
]

# (column, short label) of the retrieval metrics, in table order.
METRICS: tuple[tuple[str, str], ...] = (
    ("answer_hit", "hit rate"),
    ("recall_at_5", "R@5"),
    ("recall_at_5_docs", "R@5 docs"),
    ("recall_at_10", "R@10"),
    ("recall_at_budget", "R@budget"),
    ("full_support", "full support"),
    ("mrr", "MRR"),
    ("ndcg_at_10", "nDCG@10"),
    ("level_mix", "non-leaf"),
)
ANSWER_METRICS: tuple[tuple[str, str], ...] = (
    ("f1", "F1"),
    ("em", "EM"),
    ("rouge_l", "ROUGE-L"),
    ("bleu_1", "BLEU-1"),
    ("bleu_4", "BLEU-4"),
)
SYSTEM_ORDER = ("auto", "hop", "flat", "bm25", "collapsed", "traversal", "hybrid", "hybrid-rrf", "auto-rrf", "auto-minmax", "auto-tree",
                "auto-summaries")
STRATEGY_ORDER = ("sentence", "ffs", "dfs", "dds", "rcs")

Frame: TypeAlias = pa.Table | pl.DataFrame | pl.LazyFrame


def lazy(results: Frame) -> pl.LazyFrame:
    """A lazy frame over ``results`` (zero-copy from Arrow)."""
    if isinstance(results, pl.LazyFrame):
        return results
    if isinstance(results, pl.DataFrame):
        return results.lazy()
    return pl.DataFrame(results).lazy()


def order(values: Iterable[Any], preferred: Sequence[str]) -> list[Any]:
    """Distinct ``values``: those in ``preferred`` first, in its order, then the rest sorted."""
    vals = list(dict.fromkeys(values))
    return sorted(vals, key=lambda v: (preferred.index(v) if v in preferred else len(preferred), v))


def type_label() -> pl.Expr:
    """The question type as the report shows it ("–" for none)."""
    t = pl.col("type")
    return pl.when(t.is_null() | (t == "")).then(pl.lit("–")).otherwise(t).alias("type_label")


def _clean(name: str) -> pl.Expr:
    return pl.col(name).cast(pl.Float64).fill_nan(None)


def mean_expr(name: str) -> pl.Expr:
    """metrics.mean: left-to-right sum of the non-null, non-NaN values over their count."""
    return (_clean(name).drop_nulls().cum_sum().last() / _clean(name).count()).alias(name)


def percentile_expr(values: pl.Expr, q: int) -> pl.Expr:
    """metrics.percentile of ``values`` (per group in an aggregation; nulls and NaN dropped),
    interpolated exactly as it does: ``v[lo] + (v[hi] - v[lo]) * (pos - lo)``, pos = (n - 1) * q / 100."""
    v = values.cast(pl.Float64).fill_nan(None).drop_nulls().sort()
    n = v.len().cast(pl.Int64)
    # a column divisor, since polars turns division by a scalar literal into multiplication by
    # its reciprocal (37.05 would come out 37.050000000000004)
    pos = ((n - 1) * q).cast(pl.Float64) / (n * 0 + 100).cast(pl.Float64)
    lo = pos.floor().cast(pl.Int64)
    hi = pl.min_horizontal(lo + 1, n - 1)
    v_lo = v.get(lo, null_on_oob=True)
    v_hi = v.get(hi, null_on_oob=True)
    return pl.when(n > 0).then(v_lo + (v_hi - v_lo) * (pos - lo.cast(pl.Float64)))


def _group_plan(lf: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    latency = pl.col("latency_ms").cast(pl.Float64)
    search = pl.when(latency.is_not_null()).then(latency - pl.col("embed_ms").cast(pl.Float64).fill_null(0.0))
    means = [c for c, _ in METRICS + ANSWER_METRICS] + ["context_tokens", "n_hits"]
    return lf.group_by(keys, maintain_order=True).agg(
        pl.len().alias("n"),
        *[mean_expr(c) for c in means],
        pl.col("answer_hit").is_not_null().sum().alias("n_answerable"),
        (pl.col("error").is_not_null() & (pl.col("error") != "")).sum().alias("errors"),
        percentile_expr(latency, 50).alias("p50_ms"),
        percentile_expr(latency, 95).alias("p95_ms"),
        percentile_expr(search, 50).alias("p50_search_ms"),
    )


def _level_plan(lf: pl.LazyFrame, keys: list[str]) -> pl.LazyFrame:
    return (
        lf.select(*keys, pl.col("levels"))
        .explode("levels")
        .drop_nulls("levels")
        .group_by([*keys, "levels"])
        .len()
        .sort("levels")
    )


def aggregate(results: Frame, keys: Sequence[str]) -> dict[tuple, dict[str, Any]]:
    """Group RESULTS rows by ``keys``: ``{key tuple: {n, <metric means>, n_answerable, errors,
    p50_ms, p95_ms, p50_search_ms, context_tokens, n_hits, level_counts}}`` (a metric with no
    value in a group is None; ``level_counts`` maps level -> retrieved nodes, in level order)."""
    keys = list(keys)
    lf = lazy(results)
    groups, levels = pl.collect_all([_group_plan(lf, keys), _level_plan(lf, keys)])
    counts: dict[tuple, dict[int, int]] = {}
    for row in levels.iter_rows():
        counts.setdefault(tuple(row[: len(keys)]), {})[int(row[len(keys)])] = int(row[-1])
    out: dict[tuple, dict[str, Any]] = {}
    for agg in groups.iter_rows(named=True):
        key = tuple(agg.pop(k) for k in keys)
        agg["level_counts"] = counts.get(key, {})
        out[key] = agg
    return out


def distinct_count(results: Frame, column: str, *, where: pl.Expr | None = None) -> int:
    """Distinct values of ``column`` (e.g. qid) among the rows ``where`` holds."""
    lf = lazy(results)
    if where is not None:
        lf = lf.filter(where)
    return int(lf.select(pl.col(column).n_unique()).collect().item())


def unique_values(results: Frame, column: str, *, where: pl.Expr | None = None) -> list[Any]:
    """The distinct values of ``column`` among the rows ``where`` holds, in first-seen order."""
    lf = lazy(results)
    if where is not None:
        lf = lf.filter(where)
    return lf.select(pl.col(column).unique(maintain_order=True)).collect().to_series().to_list()
