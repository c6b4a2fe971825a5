"""The human-readable evaluation report: summary.md tables and PNG plots (matplotlib, Agg).

Input is the RESULTS table of :mod:`arborag.flows.evaluate` (one row per query × strategy × system ×
budget) and a ``meta`` dict describing the run (dataset, corpus, config hash, seed, machine,
builds, timings). Everything here is a pure function of those two; no model, no Prefect.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from arborag.tasks.metrics import mean, percentile

__all__ = [
    "METRICS",
    "aggregate",
    "plot_hit_rate_vs_budget",
    "plot_level_mix",
    "plot_strategy_heatmap",
    "render_summary",
    "write_report",
]

# (column, short label) of the retrieval metrics, in table order.
METRICS: tuple[tuple[str, str], ...] = (
    ("answer_hit", "hit rate"),
    ("recall_at_5", "R@5"),
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
SYSTEM_ORDER = ("flat", "bm25", "collapsed", "traversal", "hybrid")
STRATEGY_ORDER = ("sentence", "ffs", "dfs", "dds", "rcs")


# --------------------------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------------------------
def _order(values: Iterable[str], preferred: Sequence[str]) -> list[str]:
    vals = list(dict.fromkeys(values))
    return sorted(vals, key=lambda v: (preferred.index(v) if v in preferred else len(preferred), v))


def aggregate(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[tuple, dict[str, Any]]:
    """Group result rows by ``keys``: mean of every metric (None/NaN skipped), counts, latency."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out: dict[tuple, dict[str, Any]] = {}
    for key, rs in groups.items():
        agg: dict[str, Any] = {"n": len(rs)}
        for col, _ in METRICS + ANSWER_METRICS:
            agg[col] = mean(r.get(col) for r in rs)
        agg["n_answerable"] = sum(1 for r in rs if r.get("answer_hit") is not None)
        agg["errors"] = sum(1 for r in rs if r.get("error"))
        lat = [r["latency_ms"] for r in rs if r.get("latency_ms") is not None]
        agg["p50_ms"] = percentile(lat, 50)
        agg["p95_ms"] = percentile(lat, 95)
        search = [r["latency_ms"] - (r.get("embed_ms") or 0.0) for r in rs if r.get("latency_ms") is not None]
        agg["p50_search_ms"] = percentile(search, 50)
        agg["context_tokens"] = mean(r.get("context_tokens") for r in rs)
        agg["n_hits"] = mean(r.get("n_hits") for r in rs)
        level_counts: dict[int, int] = {}
        for r in rs:
            for lv in r.get("levels") or []:
                level_counts[int(lv)] = level_counts.get(int(lv), 0) + 1
        agg["level_counts"] = dict(sorted(level_counts.items()))
        out[key] = agg
    return out


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------
def _f(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _n(v: Any, digits: int = 1) -> str:
    """A count or size: integers as is, floats with ``digits`` decimals."""
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _delta(v: Any, base: Any) -> str:
    if v is None or base is None:
        return "–"
    d = v - base
    return f"{d:+.3f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    align = align or ("l" + "r" * (len(header) - 1))
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(_f(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _level_text(counts: dict[int, int]) -> str:
    total = sum(counts.values())
    if not total:
        return "–"
    return " · ".join(f"L{lv} {100 * n / total:.0f}%" for lv, n in counts.items())


def render_summary(results: pa.Table, meta: dict[str, Any]) -> str:
    """summary.md: run facts, then tables per system, budget, question type and strategy."""
    rows = results.to_pylist()
    budget = int(meta.get("default_budget") or max((r["budget"] for r in rows), default=2000))
    primary = meta.get("primary_strategy") or (rows[0]["strategy"] if rows else "sentence")
    systems = _order((r["system"] for r in rows), SYSTEM_ORDER)
    strategies = _order((r["strategy"] for r in rows), STRATEGY_ORDER)
    budgets = sorted({r["budget"] for r in rows})
    types = sorted({r["type"] or "–" for r in rows})
    by_sys = aggregate([r for r in rows if r["strategy"] == primary and r["budget"] == budget], ["system"])
    base = by_sys.get((meta.get("baseline", "flat"),), {})
    m = meta.get("machine", {})
    md: list[str] = []
    md.append(f"# arborag evaluation: {meta.get('dataset', '?')}\n")
    md.append("## Run\n")
    facts = [
        ("Corpus", f"{meta.get('corpus_files', '?')} files prepared from {', '.join(meta.get('sources', [])) or '?'}"),
        ("Questions", f"{meta.get('questions', '?')}" + _limit_text(meta)),
        ("Dataset fingerprint", f"`{meta.get('fingerprint', '?')}`"),
        ("Config hash", f"`{meta.get('config_hash', '?')}` (base); per strategy: "
         + ", ".join(f"{s} `{h[:12]}`" for s, h in (meta.get("strategy_config_hashes") or {}).items())),
        ("Seed", f"{meta.get('seed', '?')} (cluster.seed: UMAP + GMM)"),
        ("Embedder / summarizer / sparse", f"{meta.get('embedder', '?')} / {meta.get('summarizer', '?')} / {meta.get('sparse_backend', '?')}"),
        ("Budgets", f"{', '.join(str(b) for b in budgets)} tokens (headline tables: {budget}); traversal k = {meta.get('k', '?')}"),
        ("Baseline", f"`{meta.get('baseline', 'flat')}` (dense top-k over leaves, no tree) on `{primary}` chunks; Δ columns are against it"),
        ("Evidence matching", _match_text(meta.get("match", "doc"))),
        ("Machine", f"{m.get('platform', '?')}, {m.get('cpu_count', '?')} CPUs, Python {m.get('python', '?')}"),
        ("Started", f"{meta.get('started_at', '?')}; orchestrated by {'Prefect' if meta.get('prefect') else 'plain calls'}"),
        ("Timings (s)", ", ".join(f"{k} {v}" for k, v in (meta.get("timings_s") or {}).items() if k != "report")),
    ]
    md.append(_table(["", ""], facts, "ll"))
    unresolved = {s: n for s, n in (meta.get("unresolved_gold") or {}).items() if n}
    if unresolved:
        md.append(f"\n**Gold ids not found in the built corpus** (never retrievable): {unresolved}")
    if meta.get("failures"):
        md.append("\n**Failures**: " + "; ".join(f"{s}: {e}" for s, e in meta["failures"].items()))
    errors = sum(1 for r in rows if r.get("error"))
    if errors:
        md.append(f"\n**{errors} searches raised** (recorded in results.parquet `error`; their metrics are empty).")

    # Strategies
    md.append("\n## Segmentation strategies (one build each)\n")
    srows = []
    for s in strategies:
        st = (meta.get("chunk_stats") or {}).get(s, {})
        b = (meta.get("builds") or {}).get(s, {})
        preset = ", ".join(f"{k}={v}" for k, v in (meta.get("presets") or {}).get(s, {}).items() if k != "strategy")
        srows.append([s, preset or "–", _n(st.get("leaves")), _n(st.get("mean_tokens")), _n(st.get("p95_tokens")),
                      " / ".join(str(v) for v in (st.get("nodes_per_level") or {}).values()) or "–",
                      _n(b.get("seconds")), "reused" if b.get("noop") else "built"])
    md.append(_table(["strategy", "parameters", "leaves", "mean tokens", "p95 tokens", "nodes per level (L0 / L1 / …)", "build s", ""], srows, "llrrrlrl"))

    # Systems at the headline budget
    n_ans = max((a["n_answerable"] for a in by_sys.values()), default=0)
    md.append(f"\n## Systems at budget {budget} (strategy `{primary}`)\n")
    md.append(f"hit rate = answer in retrieved context, scored on the {n_ans} of {meta.get('questions', '?')} questions whose "
              "reference answer occurs verbatim in their gold evidence (yes/no and free-form answers are excluded); R@k = gold-evidence recall in the top k nodes; R@budget = within the budget; "
              "full support = every gold item retrieved; non-leaf = share of retrieved nodes that are summaries; "
              "latency = search + the question's embedding (dense modes), p50 search ms = without the embedding.\n")
    header = ["system"] + [label for _, label in METRICS] + ["Δ hit vs flat", "Δ R@budget vs flat", "ctx tokens", "p50 ms", "p95 ms", "p50 search ms"]
    trows = []
    for s in systems:
        a = by_sys.get((s,))
        if not a:
            continue
        trows.append([s] + [a[c] for c, _ in METRICS]
                     + [_delta(a["answer_hit"], base.get("answer_hit")), _delta(a["recall_at_budget"], base.get("recall_at_budget")),
                        _n(a["context_tokens"], 0), _n(a["p50_ms"]), _n(a["p95_ms"]), _n(a["p50_search_ms"], 2)])
    md.append(_table(header, trows))
    if any(a.get("f1") is not None for a in by_sys.values()):
        md.append(f"\n### Answer quality with the LLM (budget {budget})\n")
        md.append(_table(["system"] + [l for _, l in ANSWER_METRICS], [[s] + [by_sys[(s,)][c] for c, _ in ANSWER_METRICS] for s in systems if (s,) in by_sys]))

    # Budgets
    md.append(f"\n## By token budget (strategy `{primary}`)\n")
    by_budget = aggregate([r for r in rows if r["strategy"] == primary], ["system", "budget"])
    for col, label in (("answer_hit", "Answer-in-context hit rate"), ("recall_at_budget", "Gold-evidence recall at budget"), ("level_mix", "Non-leaf share")):
        if all(a.get(col) is None for a in by_budget.values()):
            continue  # e.g. no question has an answer that occurs verbatim in its evidence
        md.append(f"\n{label}:\n")
        md.append(_table(["system"] + [str(b) for b in budgets],
                         [[s] + [by_budget.get((s, b), {}).get(col) for b in budgets] for s in systems]))

    # Question types
    md.append(f"\n## By question type (budget {budget}, strategy `{primary}`)\n")
    by_type = aggregate([r for r in rows if r["strategy"] == primary and r["budget"] == budget], ["system", "type"])
    counts = {t: len({r["qid"] for r in rows if (r["type"] or "–") == t}) for t in types}
    md.append("hit rate / R@budget / full support\n")
    md.append(_table(["system"] + [f"{t} (n={counts[t]})" for t in types],
                     [[s] + [_triple(by_type.get((s, t if t != "–" else None)) or by_type.get((s, t))) for t in types] for s in systems]))

    # Strategy x system
    if len(strategies) > 1:
        md.append(f"\n## Strategy × system (budget {budget})\n")
        by_ss = aggregate([r for r in rows if r["budget"] == budget], ["strategy", "system"])
        ss_systems = [s for s in systems if any((st, s) in by_ss for st in strategies if st != primary)] or systems
        for col, label in (("answer_hit", "Answer-in-context hit rate"), ("recall_at_budget", "Gold-evidence recall at budget"), ("mrr", "MRR")):
            if all(a.get(col) is None for a in by_ss.values()):
                continue
            md.append(f"\n{label}:\n")
            md.append(_table(["strategy"] + ss_systems, [[st] + [by_ss.get((st, s), {}).get(col) for s in ss_systems] for st in strategies]))

    # Level mix
    md.append(f"\n## Level mix of retrieved nodes (budget {budget})\n")
    by_lv = aggregate([r for r in rows if r["budget"] == budget], ["strategy", "system"])
    md.append(_table(["strategy / system", "nodes per query", "levels"],
                     [[f"{st} / {s}", _n(by_lv[(st, s)]["n_hits"]), _level_text(by_lv[(st, s)]["level_counts"])]
                      for st in strategies for s in systems if (st, s) in by_lv], "lrl"))

    md.append("\n## Plots\n")
    md.append("![hit rate vs budget](hit_rate_vs_budget.png)\n\n![level mix](level_mix.png)\n\n![strategy x system](strategy_heatmap.png)\n")
    md.append("\nPer-question rows: `results.parquet` (query × strategy × system × budget); run facts: `run.json`. "
              "Definitions: docs/EVALUATION.md.\n")
    return "\n".join(md)


def _limit_text(meta: dict[str, Any]) -> str:
    if not meta.get("limit"):
        return ""
    cut = meta.get("scope", "auto") in ("auto", "questions")
    return f" (first {meta['limit']}; " + ("corpus cut to their documents)" if cut else "whole corpus)")


def _triple(a: dict[str, Any] | None) -> str:
    if not a:
        return "–"
    return f"{_f(a['answer_hit'], 2)} / {_f(a['recall_at_budget'], 2)} / {_f(a['full_support'], 2)}"


def _match_text(match: str) -> str:
    base = {
        "doc": "a leaf counts when it comes from a gold document",
        "text": "a leaf counts when its text overlaps a gold text (word 5-gram containment ≥ 0.5)",
        "doc+text": "a leaf counts when it comes from the gold document and its text overlaps the gold evidence (5-gram containment ≥ 0.5)",
    }.get(match, match)
    return base + "; a summary node counts only by text overlap with the gold text; answer-in-context uses every node"


# --------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------
def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


_COLORS = {"flat": "#444444", "bm25": "#1f77b4", "collapsed": "#d62728", "traversal": "#ff7f0e", "hybrid": "#2ca02c"}


def plot_hit_rate_vs_budget(results: pa.Table, path: Path, *, strategy: str, dataset: str = "") -> Path:
    """Hit rate and evidence recall vs token budget, one line per system (one strategy)."""
    plt = _plt()
    rows = [r for r in results.to_pylist() if r["strategy"] == strategy]
    agg = aggregate(rows, ["system", "budget"])
    systems = _order((r["system"] for r in rows), SYSTEM_ORDER)
    budgets = sorted({r["budget"] for r in rows})
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
    fig.suptitle(f"{dataset}: retrieval vs token budget (strategy {strategy}; dashed = flat baseline)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_level_mix(results: pa.Table, path: Path, *, budget: int, dataset: str = "") -> Path:
    """Stacked bars: share of retrieved nodes at each tree level, per strategy/system."""
    plt = _plt()
    rows = [r for r in results.to_pylist() if r["budget"] == budget]
    agg = aggregate(rows, ["strategy", "system"])
    keys = [(st, s) for st in _order((k[0] for k in agg), STRATEGY_ORDER) for s in _order((k[1] for k in agg), SYSTEM_ORDER) if (st, s) in agg]
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
    fig.suptitle(f"{dataset}: level mix of retrieved nodes at budget {budget}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_strategy_heatmap(results: pa.Table, path: Path, *, budget: int, dataset: str = "") -> Path:
    """Heat maps strategy × system of hit rate and evidence recall at the budget."""
    plt = _plt()
    rows = [r for r in results.to_pylist() if r["budget"] == budget]
    agg = aggregate(rows, ["strategy", "system"])
    strategies = _order((k[0] for k in agg), STRATEGY_ORDER)
    systems = _order((k[1] for k in agg), SYSTEM_ORDER)
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
        n_q = len({r["qid"] for r in rows if r.get(col) is not None})
        ax.set_title(f"{label}\n(n = {n_q} questions: one question = {1 / n_q:.3f})" if n_q else label, fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(f"{dataset}: segmentation strategy × system at budget {budget}\n(colour scale = observed range; – = not run)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(results: pa.Table, out_dir: Path, meta: dict[str, Any]) -> dict[str, Path]:
    """Write summary.md and the three PNGs into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = results.to_pylist()
    budget = int(meta.get("default_budget") or max((r["budget"] for r in rows), default=2000))
    primary = meta.get("primary_strategy") or (rows[0]["strategy"] if rows else "sentence")
    dataset = meta.get("dataset", "")
    files = {
        "hit_rate_vs_budget": plot_hit_rate_vs_budget(results, out_dir / "hit_rate_vs_budget.png", strategy=primary, dataset=dataset),
        "level_mix": plot_level_mix(results, out_dir / "level_mix.png", budget=budget, dataset=dataset),
        "strategy_heatmap": plot_strategy_heatmap(results, out_dir / "strategy_heatmap.png", budget=budget, dataset=dataset),
    }
    summary = out_dir / "summary.md"
    tmp = summary.with_name(".summary.md.tmp")
    tmp.write_text(render_summary(results, meta), encoding="utf-8")
    tmp.replace(summary)
    files["summary"] = summary
    return files
