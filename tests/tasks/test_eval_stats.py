"""Corpus facts for the report: nodes per level, leaf sizes (arborag.tasks.evaluation.stats)."""

from __future__ import annotations

import random

import pyarrow as pa

from arborag.tasks.evaluation.stats import leaf_stats, nodes_per_level
from arborag.tasks.evaluation.metrics import percentile


def test_nodes_per_level_in_level_order() -> None:
    nodes = pa.table({"level": pa.array([2, 0, 1, 0, 0, 1], pa.int32())})
    assert nodes_per_level(nodes) == {0: 3, 1: 2, 2: 1}
    assert list(nodes_per_level(nodes)) == [0, 1, 2]


def test_leaf_stats_match_the_python_definitions_exactly() -> None:
    rng = random.Random(7)
    for n in (1, 2, 5, 19, 101, 1814):
        toks = [rng.randint(1, 150) for _ in range(n)]
        stats = leaf_stats(pa.array(toks, pa.int32()))
        assert stats == {
            "leaves": n,
            "mean_tokens": sum(toks) / n,
            "p50_tokens": percentile(toks, 50),
            "p95_tokens": percentile(toks, 95),
            "max_tokens": max(toks),
        }
        assert isinstance(stats["leaves"], int) and isinstance(stats["max_tokens"], int)
    assert leaf_stats(pa.array([], pa.int32())) == {}
    assert leaf_stats(pa.array([None, 4], pa.int32()))["leaves"] == 1
