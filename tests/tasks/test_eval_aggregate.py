"""Report aggregates with polars (arborag.tasks.evaluation.aggregate), pinned to the Python
definitions the report used before (metrics.mean / metrics.percentile over row dicts)."""

from __future__ import annotations

import math
import random
from typing import Any

import polars as pl
import pyarrow as pa

from arborag.storage.schemas import RESULTS
from arborag.tasks.evaluation.aggregate import (
    ANSWER_METRICS,
    METRICS,
    aggregate,
    distinct_count,
    order,
    unique_values,
)
from arborag.tasks.evaluation.metrics import mean, percentile


def _reference(rows: list[dict[str, Any]], keys: list[str]) -> dict[tuple, dict[str, Any]]:
    """The row-by-row aggregation the report did before polars (the definition)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = {}
    for key, rs in groups.items():
        agg: dict[str, Any] = {"n": len(rs)}
        for col, _ in METRICS + ANSWER_METRICS:
            agg[col] = mean(r.get(col) for r in rs)
        agg["n_answerable"] = sum(1 for r in rs if r.get("answer_hit") is not None)
        agg["errors"] = sum(1 for r in rs if r.get("error"))
        lat = [r["latency_ms"] for r in rs if r.get("latency_ms") is not None]
        agg["p50_ms"], agg["p95_ms"] = percentile(lat, 50), percentile(lat, 95)
        agg["p50_search_ms"] = percentile([r["latency_ms"] - (r.get("embed_ms") or 0.0) for r in rs if r.get("latency_ms") is not None], 50)
        agg["context_tokens"] = mean(r.get("context_tokens") for r in rs)
        agg["n_hits"] = mean(r.get("n_hits") for r in rs)
        counts: dict[int, int] = {}
        for r in rs:
            for lv in r.get("levels") or []:
                counts[int(lv)] = counts.get(int(lv), 0) + 1
        agg["level_counts"] = dict(sorted(counts.items()))
        out[key] = agg
    return out


def _results(n: int, seed: int = 3) -> pa.Table:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        failed = rng.random() < 0.1
        rows.append({
            "dataset": "t", "qid": f"q{i % 17}", "type": rng.choice(["bridge", "comparison", None, ""]),
            "strategy": rng.choice(["sentence", "dds", "zz"]), "system": rng.choice(["flat", "hybrid", "bm25", "new"]),
            "mode": "collapsed", "budget": rng.choice([500, 2000]),
            "n_hits": None if failed else rng.randint(0, 9), "context_tokens": rng.randint(0, 2000),
            "levels": None if failed else [rng.choice([0, 0, 1, 2]) for _ in range(rng.randint(0, 5))],
            **{c: (None if failed or rng.random() < 0.2 else (math.nan if rng.random() < 0.05 else rng.random()))
               for c, _ in METRICS + ANSWER_METRICS},
            "latency_ms": None if failed else (math.nan if rng.random() < 0.03 else rng.random() * 50),
            "embed_ms": None if failed or rng.random() < 0.3 else (math.nan if rng.random() < 0.05 else rng.random() * 10),
            "n_gold": 2, "n_gold_resolved": 2, "prediction": None,
            "error": "QueryError: x" if failed else rng.choice([None, None, ""]), "config_hash": "h",
        })
    return pa.Table.from_pylist(rows, schema=RESULTS)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def test_aggregate_equals_the_row_by_row_definition_bit_for_bit() -> None:
    table = _results(600)
    rows = table.to_pylist()
    for keys in (["system"], ["system", "budget"], ["strategy", "system"], ["system", "type"], ["strategy", "system", "budget"]):
        got, want = aggregate(table, keys), _reference(rows, keys)
        assert set(got) == set(want), keys
        for key, agg in want.items():
            assert set(got[key]) == set(agg)
            for field, value in agg.items():
                assert _same(got[key][field], value), (keys, key, field, got[key][field], value)


def test_aggregate_takes_frames_and_lazy_frames() -> None:
    table = _results(50)
    df = pl.from_arrow(table)
    assert aggregate(df, ["system"]) == aggregate(table, ["system"]) == aggregate(df.lazy(), ["system"])
    assert aggregate(RESULTS.empty_table(), ["system"]) == {}


def test_aggregate_by_hand() -> None:
    base = {c: None for c in RESULTS.names}
    rows = [
        {**base, "dataset": "t", "qid": "a", "strategy": "s", "system": "flat", "mode": "m", "budget": 10, "answer_hit": 1.0,
         "latency_ms": 10.0, "embed_ms": 4.0, "levels": [0, 1], "n_hits": 2, "context_tokens": 9},
        {**base, "dataset": "t", "qid": "b", "strategy": "s", "system": "flat", "mode": "m", "budget": 10, "answer_hit": 0.0,
         "latency_ms": 20.0, "levels": [0], "n_hits": 1, "context_tokens": 3, "error": ""},
        {**base, "dataset": "t", "qid": "c", "strategy": "s", "system": "flat", "mode": "m", "budget": 10, "error": "E: x"},
    ]
    (agg,) = aggregate(pa.Table.from_pylist(rows, schema=RESULTS), ["system"]).values()
    assert agg["n"] == 3 and agg["n_answerable"] == 2 and agg["errors"] == 1
    assert agg["answer_hit"] == 0.5 and agg["mrr"] is None
    assert agg["p50_ms"] == 15.0 and agg["p95_ms"] == 19.5 and agg["p50_search_ms"] == 13.0
    assert agg["context_tokens"] == 6.0 and agg["n_hits"] == 1.5
    assert agg["level_counts"] == {0: 2, 1: 1}


def test_order_unique_values_and_distinct_counts() -> None:
    assert order(["zz", "hybrid", "flat", "aa", "flat"], ("flat", "bm25", "hybrid")) == ["flat", "hybrid", "aa", "zz"]
    table = _results(40)
    assert unique_values(table, "budget") == list(dict.fromkeys(table.column("budget").to_pylist()))
    want = len({r["qid"] for r in table.to_pylist() if r["answer_hit"] is not None})
    assert distinct_count(table, "qid", where=pl.col("answer_hit").is_not_null()) == want
