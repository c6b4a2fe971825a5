"""The evaluation plan: systems × strategies, presets (arborag.tasks.evaluation.plan)."""

from __future__ import annotations

from arborag.config import ArboragConfig
from arborag.tasks.evaluation.plan import STRATEGY_PRESETS, plan_runs, preset_text, strategy_config, systems_by_strategy


def test_plan_runs() -> None:
    runs = plan_runs(["sentence", "dds"], ["flat", "bm25", "collapsed", "traversal", "hybrid"])
    assert [r for r in runs if r[0] == "sentence"] == [("sentence", s) for s in ["flat", "bm25", "collapsed", "traversal", "hybrid"]]
    assert [r for r in runs if r[0] == "dds"] == [("dds", "flat"), ("dds", "collapsed")]
    # a strategy whose systems do not intersect the strategy systems gets the chosen systems
    assert plan_runs(["ffs", "rcs"], ["bm25"]) == [("ffs", "bm25"), ("rcs", "bm25")]


def test_strategy_presets_are_valid_configs() -> None:
    base = ArboragConfig()
    for name in STRATEGY_PRESETS:
        cfg = strategy_config(base, name)
        assert cfg.segment.strategy == name
    assert strategy_config(base, "ffs").segment.ffs_window == 100
    assert len({strategy_config(base, n).config_hash() for n in STRATEGY_PRESETS}) == len(STRATEGY_PRESETS)



def test_systems_by_strategy_and_preset_text() -> None:
    runs = plan_runs(["sentence", "dds"], ["flat", "bm25", "collapsed"])
    assert systems_by_strategy(runs) == {"sentence": ["flat", "bm25", "collapsed"], "dds": ["flat", "collapsed"]}
    assert preset_text("ffs") == "ffs_window=100, ffs_step=80"
