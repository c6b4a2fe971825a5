"""``benchmarks/umap_epochs.py``'s pooled test of a setting against seed noise (its
``permutation_test``): the arithmetic of the statistic, the exact null and its p-values."""

from __future__ import annotations

from math import comb
from pathlib import Path

import pytest
from helpers.ops import benchmark_module


@pytest.fixture(scope="module")
def umap_epochs():
    return benchmark_module("umap_epochs")


def test_no_difference_is_never_significant(umap_epochs) -> None:
    got = umap_epochs.permutation_test([([0.5, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5])])
    assert got["delta"] == 0.0 and got["p_two"] == 1.0 and got["p_low"] == 1.0
    assert got["labelings"] == comb(8, 4) and got["exhaustive"]


def test_a_clean_drop_has_the_exact_permutation_p(umap_epochs) -> None:
    """4 runs a side, every setting run below every default run: of the 70 relabelings only this
    one is as low, and it and its mirror image are as far from 0."""
    got = umap_epochs.permutation_test([([0.60, 0.61, 0.62, 0.63], [0.50, 0.51, 0.52, 0.53])])
    assert got["delta"] == pytest.approx(-0.10)
    assert got["p_low"] == pytest.approx(1 / 70) and got["p_two"] == pytest.approx(2 / 70)


def test_datasets_pool_by_their_mean_and_relabel_independently(umap_epochs) -> None:
    a = ([0.6, 0.7, 0.8, 0.9], [0.6, 0.7, 0.8, 0.9])  # no change
    b = ([0.2, 0.3], [0.1, 0.2])  # a drop of 0.1 at two runs a side
    got = umap_epochs.permutation_test([a, b])
    assert got["per_dataset"] == pytest.approx([0.0, -0.1]) and got["delta"] == pytest.approx(-0.05)
    assert got["labelings"] == comb(8, 4) * comb(4, 2)
    assert 0.0 < got["p_low"] < got["p_two"] <= 1.0


def test_too_many_relabelings_are_drawn_with_a_fixed_seed(umap_epochs) -> None:
    groups = [([0.60, 0.61, 0.62, 0.63], [0.50, 0.51, 0.52, 0.53])] * 3  # 70**3 = 343,000 relabelings
    drawn = umap_epochs.permutation_test(groups, draws=5000)
    assert not drawn["exhaustive"] and drawn["labelings"] == 5000
    assert drawn == umap_epochs.permutation_test(groups, draws=5000)  # the same draws every time
    assert drawn["p_low"] < 0.01  # a drop in every dataset: as low only by rare chance


def _run(folder: Path, hits: dict[tuple[str, int], float]) -> str:
    """An `arborag eval` run folder with one question per (system, budget): its hit and recall."""
    import json

    import polars as pl

    folder.mkdir(parents=True)
    rows = [{"strategy": "sentence", "system": s, "budget": b, "answer_hit": h, "recall_at_budget": h / 2} for (s, b), h in hits.items()]
    pl.DataFrame(rows).write_parquet(folder / "results.parquet")
    (folder / "run.json").write_text(json.dumps({"primary_strategy": "sentence"}), encoding="utf-8")
    return str(folder)


def test_pooled_part_counts_each_run_once_and_leaves_the_leaf_only_systems_out(umap_epochs, tmp_path: Path) -> None:
    def run(name: str, tree: tuple[float, float]) -> str:
        return _run(tmp_path / name, {("flat", 500): 1.0, ("flat", 1000): 1.0, ("collapsed", 500): tree[0], ("collapsed", 1000): tree[1]})

    d1, d2, b1, b2 = run("d1", (0.6, 0.8)), run("d2", (0.8, 1.0)), run("b1", (0.4, 0.6)), run("b2", (0.6, 0.8))
    # two --eval pairs over the same two default runs (seeds swapped): each default run counts once
    evals = [{"dataset": "hotpotqa", "dirs": {"default": d1, "other seed": d2, "200+2": b1}},
             {"dataset": "hotpotqa", "dirs": {"default": d2, "other seed": d1, "200+2": b2}}]
    got = umap_epochs.pooled_part(evals)
    assert {(r["system"], r["metric"]) for r in got} == {("collapsed", "hit"), ("collapsed", "recall")}
    hit = next(r for r in got if r["metric"] == "hit")
    assert hit["setting"] == "200+2" and hit["datasets"] == ["hotpotqa (2/2)"]
    assert hit["delta"] == pytest.approx((0.5 + 0.7) / 2 - (0.7 + 0.9) / 2)  # each run's mean over its budgets
    assert hit["labelings"] == comb(4, 2)
    assert umap_epochs.pooled_part(evals[:1]) == []  # one run a side: nothing to pool
