"""The typed statistics of the tree stages (tasks/tree/stats.py) and their stage summaries: only the
fields that apply reach ``runs.counts``; a stage's entry and its report come from one frozen object."""

from __future__ import annotations

from prefect.serializers import JSONSerializer

from arborag.tasks.stages.tree import TreeSummary
from arborag.tasks.stages.tree_update import TreeUpdateSummary
from arborag.tasks.tree.stats import LevelStats, UpdateLevelStats, fallback_summary


def test_level_counts_leave_out_what_did_not_apply() -> None:
    assert LevelStats(0, 12, n_docs=3).counts() == {"level": 0, "n_nodes": 12, "n_docs": 3}
    lvl = LevelStats(1, 4, n_trees=1, n_input=12, n_clusters=4, n_fallback=0, fallback_reasons={}, tokens_in=0, tokens_out=0)
    assert lvl.counts() == {"level": 1, "n_nodes": 4, "n_trees": 1, "n_input": 12, "n_clusters": 4, "n_fallback": 0,
                            "fallback_reasons": {}, "tokens_in": 0, "tokens_out": 0}
    assert lvl.summaries == 4 and LevelStats(0, 12).summaries == 0
    up = UpdateLevelStats(2, 0, documents=0, documents_kept=5, documents_dropped=1)
    assert up.counts() == {"level": 2, "rewritten": 0, "documents": 0, "documents_kept": 5, "documents_dropped": 1}


def test_fallbacks_are_summed_over_the_levels_most_frequent_reason_first() -> None:
    stats = [UpdateLevelStats(1, 3, fallback_reasons={"timeout": 1, "empty": 2}), UpdateLevelStats(2, 1),
             UpdateLevelStats(3, 1, fallback_reasons={"timeout": 2})]
    assert fallback_summary(stats) == (5, {"timeout": 3, "empty": 2})
    assert list(fallback_summary(stats)[1]) == ["timeout", "empty"]
    assert fallback_summary([]) == (0, {})


def test_stage_summaries_of_the_build_and_the_update() -> None:
    levels = [LevelStats(0, 10, n_docs=2), LevelStats(1, 3, n_clusters=3, fallback_reasons={}, local_ks=[2, 1])]
    build = TreeSummary(nodes=13, edges=10, levels={0: 10, 1: 3}, summaries=3, fallbacks=0, fallback_reasons={}, stats=levels)
    assert build.counts() == {"nodes": 13, "edges": 10, "levels": {0: 10, 1: 3}, "summaries": 3, "fallbacks": 0, "fallback_reasons": {},
                              "stats": [{"level": 0, "n_nodes": 10, "n_docs": 2},
                                        {"level": 1, "n_nodes": 3, "local_ks": [2, 1], "n_clusters": 3, "fallback_reasons": {}}]}
    assert build.report() == dict(build) == {"nodes": 13, "edges": 10, "fallbacks": 0, "fallback_reasons": {}}
    update = TreeUpdateSummary(nodes=14, edges=11, levels={0: 11, 1: 3}, leaves_added=1, leaves_removed=0, clusters_touched={"1": 1},
                               clusters_opened={"1": 1}, summaries=1, fallbacks=0, fallback_reasons={}, drift={"fitted": 10, "changed": 1, "share": 0.1},
                               stats=[UpdateLevelStats(1, 1, assigned_leaves=1, rejected=1, opened=1)])
    assert set(update.counts()) == {"nodes", "edges", "levels", "leaves_added", "leaves_removed", "clusters_touched", "clusters_opened",
                                    "summaries", "fallbacks", "fallback_reasons", "drift", "stats"}
    assert update.counts()["stats"] == [{"level": 1, "rewritten": 1, "assigned_leaves": 1, "rejected": 1, "opened": 1}]
    assert update.report() == {"nodes": 14, "edges": 11, "leaves_added": 1, "leaves_removed": 0, "clusters_touched": {"1": 1},
                               "clusters_opened": {"1": 1}, "summaries": 1, "fallbacks": 0, "fallback_reasons": {}}
    # a Prefect cache hit rebuilds the same summary (typed level stats included) from its JSON
    serializer = JSONSerializer()
    for summary in (build, update):
        again = serializer.loads(serializer.dumps(summary))
        assert type(again) is type(summary) and again == summary
