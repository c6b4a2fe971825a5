"""What an evaluation run compares: the retrieval systems, the segmentation presets, the plan.

One run compares retrieval *systems* (how the index is queried) and segmentation *strategies*
(how leaves are cut) on one dataset, with one embedder and the same token budgets:

| system | mode | levels | what it is |
| --- | --- | --- | --- |
| flat | collapsed | [0] | dense top-k over leaf chunks: the no-tree baseline |
| bm25 | sparse | [0] | BM25 over leaf chunks |
| collapsed | collapsed | all | RAPTOR collapsed tree (every level, best-first to the budget) |
| traversal | traversal | all | RAPTOR tree traversal (top-k per level, root to leaves) |
| hybrid | hybrid | all | dense + BM25 fused by reciprocal rank fusion |
| multi | multi | all | the question + 3 variants (LLM, or RM3 feedback offline), each hybrid, fused by RRF |
| level | level | all | LevelRAG: sub-questions, sparse Lucene rewrites + dense HyDE with feedback (LLM; offline plan without) |
| segments | segments | [0] | dsRAG relevant segment extraction (balanced preset): contiguous runs of reranked leaves, stitched from the document |
| segments-precision | segments | [0] | the same with the precision preset |
| segments-find_all | segments | [0] | the same with the find_all preset |
| rerank | rerank | [0] | leaves rescored by the configured reranker (``rerank.kind``; cosine keeps flat's order), best calibrated first |

The first strategy gets every system; the others only those in ``strategy_systems``.
Everything here is a pure function of its arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from arborag.config import ArboragConfig, Strategy

__all__ = [
    "BASELINE",
    "DEFAULT_STRATEGIES",
    "DEFAULT_STRATEGY_SYSTEMS",
    "STRATEGY_NAMES",
    "STRATEGY_PRESETS",
    "SYSTEMS",
    "SYSTEM_NAMES",
    "SystemName",
    "SystemSpec",
    "default_budget",
    "plan_runs",
    "preset_text",
    "strategy_config",
    "systems_by_strategy",
]

SystemName = Literal["flat", "bm25", "collapsed", "traversal", "hybrid", "multi", "segments", "segments-precision", "segments-find_all", "rerank", "level",
                     "auto", "hybrid-rrf", "auto-rrf", "auto-minmax", "auto-tree", "auto-summaries", "hop", "hop-all", "hop-ppr", "hop-tree"]
SYSTEM_NAMES: tuple[str, ...] = get_args(SystemName)
STRATEGY_NAMES: tuple[str, ...] = get_args(Strategy)


@dataclass(frozen=True, slots=True)
class SystemSpec:
    """How one system queries the index: ``Index.search(mode=..., levels=..., **options)``
    (``options``: a plug-in mode's keyword arguments, e.g. ``(("preset", "balanced"),)``)."""

    name: str
    mode: str
    levels: tuple[int, ...] | None
    description: str
    options: tuple[tuple[str, Any], ...] = field(default=())


SYSTEMS: dict[str, SystemSpec] = {
    "flat": SystemSpec("flat", "collapsed", (0,), "dense top-k over leaves (no tree; the baseline)"),
    "bm25": SystemSpec("bm25", "sparse", (0,), "BM25 over leaves"),
    "collapsed": SystemSpec("collapsed", "collapsed", None, "RAPTOR collapsed tree, all levels"),
    "traversal": SystemSpec("traversal", "traversal", None, "RAPTOR tree traversal, top-k per level"),
    "hybrid": SystemSpec("hybrid", "hybrid", None, "dense + BM25 over every level, fused by query.fusion (z-score)"),
    "multi": SystemSpec("multi", "multi", None, "multi-query: question + 3 variants (LLM, offline RM3 feedback), hybrid each, RRF"),
    "segments": SystemSpec("segments", "segments", (0,), "dsRAG RSE (balanced): contiguous runs of reranked leaves",
                           (("preset", "balanced"),)),
    "segments-precision": SystemSpec("segments-precision", "segments", (0,), "dsRAG RSE, precision preset", (("preset", "precision"),)),
    "segments-find_all": SystemSpec("segments-find_all", "segments", (0,), "dsRAG RSE, find_all preset", (("preset", "find_all"),)),
    "rerank": SystemSpec("rerank", "rerank", (0,), "leaves rescored by the configured reranker (rerank.kind), calibrated"),
    "level": SystemSpec("level", "level", None, "LevelRAG searchers: sub-questions, Lucene rewrites + HyDE with feedback, RRF"),
    # auto: the fused leaf ranking and the variants measured against it (query/auto.py, query/fusion.py)
    "auto": SystemSpec("auto", "auto", None, "dense + BM25 leaves, z-score fusion (0.5/0.5), best-first fill (hop's first hop)"),
    "hybrid-rrf": SystemSpec("hybrid-rrf", "hybrid", None, "dense + BM25 over every level, RRF k=60 (the old hybrid)",
                             (("fusion", "rrf"),)),
    "auto-rrf": SystemSpec("auto-rrf", "auto", None, "dense + BM25 leaves, RRF k=60", (("fusion", "rrf"),)),
    "auto-minmax": SystemSpec("auto-minmax", "auto", None, "dense + BM25 leaves, min-max fusion", (("fusion", "minmax"),)),
    "auto-tree": SystemSpec("auto-tree", "auto", None, "auto + summaries as routers: a leaf gains 0.1 x its best ancestor's score",
                            (("tree", "boost"),)),
    "auto-summaries": SystemSpec("auto-summaries", "auto", None,
                                 "auto + summaries in the context (<= 25% of the budget), a summary and its children never both",
                                 (("summaries", "dedup"),)),
    # hop: multi-hop through the links between leaves (query/hop.py) and the designs measured against it
    "hop": SystemSpec("hop", "hop", None, "the default: auto + one hop from its 5 best leaves into the documents they name (title links, IDF)"),
    "hop-all": SystemSpec("hop-all", "hop", None, "hop arriving through every link (titles and shared capitalised names)",
                          (("kinds", "all"),)),
    "hop-ppr": SystemSpec("hop-ppr", "hop", None, "Personalized PageRank over leaves + entities seeded by auto's 5 best leaves",
                          (("walk", "ppr"),)),
    "hop-tree": SystemSpec("hop-tree", "hop", None, "auto + the leaves sharing a level-1 cluster with auto's 5 best leaves",
                           (("walk", "tree"),)),
}
BASELINE = "flat"

# Segmentation at matched sizes (~100 tokens per leaf), so strategies differ in *where* they
# cut, not in how much a leaf holds. Overlapping strategies use a step of 80 tokens (20 %
# overlap, like rcs's 20-token overlap); dds counts its step in delimiter units.
STRATEGY_PRESETS: dict[str, dict[str, Any]] = {
    "sentence": {"strategy": "sentence", "sentence_max_tokens": 100},
    "ffs": {"strategy": "ffs", "ffs_window": 100, "ffs_step": 80},
    "dfs": {"strategy": "dfs", "dfs_window": 90, "dfs_step": 80},
    "dds": {"strategy": "dds", "dds_window": 80, "dds_step": 6},
    "rcs": {"strategy": "rcs", "rcs_chunk_size": 100, "rcs_overlap": 20},
}
DEFAULT_STRATEGIES: tuple[str, ...] = ("sentence", "ffs", "dfs", "dds", "rcs")
DEFAULT_STRATEGY_SYSTEMS: tuple[str, ...] = ("flat", "collapsed")


def plan_runs(
    strategies: Sequence[str], systems: Sequence[str], strategy_systems: Sequence[str] = DEFAULT_STRATEGY_SYSTEMS
) -> list[tuple[str, str]]:
    """(strategy, system) pairs: the first strategy runs every system, the others only
    ``systems ∩ strategy_systems`` (if that is empty, every system)."""
    runs: list[tuple[str, str]] = []
    for i, strategy in enumerate(strategies):
        chosen = list(systems) if i == 0 else [s for s in systems if s in strategy_systems] or list(systems)
        runs.extend((strategy, s) for s in chosen)
    return runs


def systems_by_strategy(runs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """The systems of each strategy of a plan, in plan order."""
    out: dict[str, list[str]] = {}
    for strategy, system in runs:
        out.setdefault(strategy, []).append(system)
    return out


def strategy_config(base: ArboragConfig, strategy: str) -> ArboragConfig:
    """``base`` with the segment section set to the strategy's matched-size preset."""
    return base.with_overrides(segment=dict(STRATEGY_PRESETS[strategy]))


def default_budget(config: ArboragConfig, budgets: Sequence[int]) -> int:
    """The headline budget: ``query.budget`` when it is one of ``budgets``, else the largest."""
    return config.query.budget if config.query.budget in budgets else max(budgets)


def preset_text(strategy: str) -> str:
    """``key=value, ...`` of a strategy's preset (without the strategy name)."""
    return ", ".join(f"{k}={v}" for k, v in STRATEGY_PRESETS[strategy].items() if k != "strategy")
