"""The report's PNG plots (matplotlib, Agg): hit rate vs budget, level mix, strategy × system.

Each plot is a pure function of a RESULTS table (one row per query × strategy × system × budget);
the numbers come from :func:`arborag.tasks.evaluation.aggregate.aggregate` (polars).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from arborag.extras import extra
from arborag.tasks.evaluation.aggregate import (
    STRATEGY_ORDER,
    SYSTEM_ORDER,
    Frame,
    aggregate,
    distinct_count,
    lazy,
    order,
    unique_values,
)

__all__ = ["plot_hit_rate_vs_budget", "plot_level_mix", "plot_strategy_heatmap"]


def _plt():  # type: ignore[no-untyped-def]
    with extra("eval", "the evaluation plots (arborag eval)"):
        import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: Path, title: str, **title_kw: Any) -> Path:
    """Title ``fig``, write it to ``path`` (PNG, 110 dpi) and close it; returns ``path``."""
    fig.suptitle(title, **title_kw)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


_COLORS = {"flat": "#444444", "bm25": "#1f77b4", "collapsed": "#d62728", "traversal": "#ff7f0e", "hybrid": "#2ca02c",
           "auto": "#9467bd", "hybrid-rrf": "#8c564b", "auto-rrf": "#e377c2", "auto-minmax": "#bcbd22", "auto-tree": "#17becf",
           "auto-summaries": "#7f7f7f"}


def plot_hit_rate_vs_budget(results: Frame, path: Path, *, strategy: str, dataset: str = "") -> Path:
    """Hit rate and evidence recall vs token budget, one line per system (one strategy)."""
    plt = _plt()
    rows = lazy(results).filter(pl.col("strategy") == strategy)
    agg = aggregate(rows, ["system", "budget"])
    systems = order(unique_values(rows, "system"), SYSTEM_ORDER)
    budgets = sorted(unique_values(rows, "budget"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for ax, (col, label) in zip(axes, (("answer_hit", "answer-in-context hit rate"), ("recall_at_budget", "gold-evidence recall at budget"))):
        for s in systems:
            ys = [agg.get((s, b), {}).get(col) for b in budgets]
            ys = [float("nan") if y is None else y for y in ys]
            ax.plot(budgets, ys, marker="o", lw=2, color=_COLORS.get(s), ls="--" if s == "flat" else "-", label=s)
        if all(agg.get((s, b), {}).get(col) is None for s in systems for b in budgets):
            ax.text(0.5, 0.5, "not applicable:\nno answer occurs verbatim\nin the gold evidence", ha="center", va="center",
                    transform=ax.transAxes, color="#777777")
        ax.set_xlabel("token budget")
        ax.set_ylabel(label)
        ax.set_ylim(0, 1.02)
        ax.set_xticks(budgets)
        ax.grid(alpha=0.3)
        ax.set_title(label)
    axes[0].legend(loc="lower right", fontsize=9)
    return _save(plt, fig, path, f"{dataset}: retrieval vs token budget (strategy {strategy}; dashed = flat baseline)")


def plot_level_mix(results: Frame, path: Path, *, budget: int, dataset: str = "") -> Path:
    """Stacked bars: share of retrieved nodes at each tree level, per strategy/system."""
    plt = _plt()
    agg = aggregate(lazy(results).filter(pl.col("budget") == budget), ["strategy", "system"])
    keys = [(st, s) for st in order((k[0] for k in agg), STRATEGY_ORDER) for s in order((k[1] for k in agg), SYSTEM_ORDER) if (st, s) in agg]
    max_level = max((lv for a in agg.values() for lv in a["level_counts"]), default=0)
    levels = list(range(max_level + 1))
    cmap = plt.get_cmap("viridis", max(2, len(levels)))
    fig, ax = plt.subplots(figsize=(9, 0.38 * len(keys) + 1.9))
    labels = [f"{st} / {s}" for st, s in keys]
    left = [0.0] * len(keys)
    for lv in levels:
        shares = []
        for key in keys:
            counts = agg[key]["level_counts"]
            total = sum(counts.values())
            shares.append(counts.get(lv, 0) / total if total else 0.0)
        ax.barh(labels, shares, left=left, color=cmap(lv), label=f"level {lv}" + (" (leaves)" if lv == 0 else ""))
        left = [a + b for a, b in zip(left, shares)]
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of retrieved nodes")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(levels), fontsize=9, frameon=False)
    return _save(plt, fig, path, f"{dataset}: level mix of retrieved nodes at budget {budget}")


def plot_strategy_heatmap(results: Frame, path: Path, *, budget: int, dataset: str = "") -> Path:
    """Heat maps strategy × system of hit rate and evidence recall at the budget."""
    plt = _plt()
    rows = lazy(results).filter(pl.col("budget") == budget)
    agg = aggregate(rows, ["strategy", "system"])
    strategies = order((k[0] for k in agg), STRATEGY_ORDER)
    systems = order((k[1] for k in agg), SYSTEM_ORDER)
    if len(strategies) > 1:  # the map compares strategies: keep the systems run on several of them
        shared = [s for s in systems if sum((st, s) in agg for st in strategies) > 1]
        systems = shared or systems
    fig, axes = plt.subplots(1, 2, figsize=(3.2 + 1.5 * len(systems), 1.6 + 0.5 * len(strategies)))
    cmap = plt.get_cmap("YlGn").with_extremes(bad="#eeeeee")
    for ax, (col, label) in zip(axes, (("answer_hit", "answer-in-context hit rate"), ("recall_at_budget", "gold-evidence recall at budget"))):
        grid = [[(agg.get((st, s), {}).get(col)) for s in systems] for st in strategies]
        data = [[float("nan") if v is None else v for v in row] for row in grid]
        # The colour scale spans the observed values (the numbers in the cells are exact), so
        # differences of a few points between strategies stay visible.
        vals = [v for row in grid for v in row if v is not None]
        lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
        if hi - lo < 0.05:
            lo, hi = max(0.0, hi - 0.05), max(hi, 0.05)
        im = ax.imshow(data, cmap=cmap, vmin=lo, vmax=hi, aspect="auto")
        ax.set_xticks(range(len(systems)), systems)
        ax.set_yticks(range(len(strategies)), strategies)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, "–" if v is None else f"{v:.3f}", ha="center", va="center", fontsize=9,
                        color="white" if v is not None and (v - lo) / (hi - lo) > 0.6 else "black")
        n_q = distinct_count(rows, "qid", where=pl.col(col).is_not_null())
        ax.set_title(f"{label}\n(n = {n_q} questions: one question = {1 / n_q:.3f})" if n_q else label, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return _save(plt, fig, path, f"{dataset}: segmentation strategy × system at budget {budget}\n(colour scale = observed range; – = not run)", fontsize=11)
