"""The human-readable evaluation report: summary.md tables and PNG plots (matplotlib, Agg).

Input is the RESULTS table (``storage.schemas.RESULTS``: one row per query × strategy × system ×
budget) and a ``meta`` dict describing the run (dataset, corpus, config hash, seed, machine,
builds, timings). Everything here is a pure function of those two; no model, no Prefect. Every
number in a table comes from :func:`arborag.tasks.evaluation.aggregate.aggregate` (polars over
the Arrow table, one lazy plan per table); the plots live in :mod:`arborag.tasks.evaluation.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from arborag.storage.tables import atomic_write_bytes
from arborag.tasks.evaluation.aggregate import (
    ANSWER_METRICS,
    METRICS,
    STRATEGY_ORDER,
    SYSTEM_ORDER,
    Frame,
    aggregate,
    lazy,
    order,
    type_label,
    unique_values,
)
from arborag.tasks.evaluation.plots import plot_hit_rate_vs_budget, plot_level_mix, plot_strategy_heatmap

__all__ = [
    "ANSWER_METRICS",
    "METRICS",
    "aggregate",
    "plot_hit_rate_vs_budget",
    "plot_level_mix",
    "plot_strategy_heatmap",
    "render_summary",
    "write_report",
]


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


def _label_text(p: dict[str, Any] | None) -> str:
    """Label precision (tasks/evaluation/labels.py) as "own / siblings' (+margin)"; – without labels."""
    if not p or not p.get("clusters"):
        return "–"
    return f"{p['own']:.2f} / {p['siblings']:.2f} ({p['margin']:+.2f}, {p['clusters']} clusters)"


def _headline(results: Frame, meta: dict[str, Any]) -> tuple[int, str]:
    """(headline budget, primary strategy): from ``meta``, else the largest budget / first row."""
    lf = lazy(results)
    first = lf.select(pl.col("budget").max().alias("budget"), pl.col("strategy").first().alias("strategy")).collect().row(0)
    budget = int(meta.get("default_budget") or (first[0] if first[0] is not None else 2000))
    return budget, meta.get("primary_strategy") or first[1] or "sentence"


def render_summary(results: Frame, meta: dict[str, Any]) -> str:
    """summary.md: run facts, then tables per system, budget, question type and strategy."""
    lf = lazy(results)
    budget, primary = _headline(lf, meta)
    systems = order(unique_values(lf, "system"), SYSTEM_ORDER)
    strategies = order(unique_values(lf, "strategy"), STRATEGY_ORDER)
    budgets = sorted(unique_values(lf, "budget"))
    at_primary = lf.filter(pl.col("strategy") == primary)
    at_budget = lf.filter(pl.col("budget") == budget)
    by_sys = aggregate(at_primary.filter(pl.col("budget") == budget), ["system"])
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
    errors = lf.select((pl.col("error").is_not_null() & (pl.col("error") != "")).sum()).collect().item()
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
                      _n(b.get("seconds")), "reused" if b.get("noop") else "built", _label_text(st.get("label_precision"))])
    md.append(_table(["strategy", "parameters", "leaves", "mean tokens", "p95 tokens", "nodes per level (L0 / L1 / …)", "build s", "",
                      "label precision own / siblings' (margin)"], srows, "llrrrlrll"))

    read = {s: r for s, r in (meta.get("readability") or {}).items() if r}
    if read:
        md.append("\n## Readability of the tree (docs/EVALUATION.md, \"Readability\")\n")
        md.append(_table(
            ["strategy", "summaries", "fragment rate", "whole sentences", "coverage", "leaves with a line break inside a sentence"],
            [[s, _n(r.get("summaries")), _f(r.get("fragment_rate")), _f(r.get("whole_sentence_share")), _f(r.get("coverage")),
              f"{_n(r.get('leaves_with_wrap_breaks'))} of {_n(r.get('leaves'))}"] for s, r in read.items()],
            "lrrrrr"))

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
    by_budget = aggregate(at_primary, ["system", "budget"])
    for col, label in (("answer_hit", "Answer-in-context hit rate"), ("recall_at_budget", "Gold-evidence recall at budget"), ("level_mix", "Non-leaf share")):
        if all(a.get(col) is None for a in by_budget.values()):
            continue  # e.g. no question has an answer that occurs verbatim in its evidence
        md.append(f"\n{label}:\n")
        md.append(_table(["system"] + [str(b) for b in budgets],
                         [[s] + [by_budget.get((s, b), {}).get(col) for b in budgets] for s in systems]))

    md.extend(_evidence_found_section(meta.get("evidence_found") or [], primary, systems, budgets))

    # Question types
    md.append(f"\n## By question type (budget {budget}, strategy `{primary}`)\n")
    by_type = aggregate(at_primary.filter(pl.col("budget") == budget), ["system", "type"])
    per_type = lf.group_by(type_label()).agg(pl.col("qid").n_unique()).collect()
    counts = dict(per_type.iter_rows())
    types = sorted(counts)
    md.append("hit rate / R@budget / full support\n")
    md.append(_table(["system"] + [f"{t} (n={counts[t]})" for t in types],
                     [[s] + [_triple(by_type.get((s, t if t != "–" else None)) or by_type.get((s, t))) for t in types] for s in systems]))

    # Question types x budgets
    by_tb = aggregate(at_primary, ["system", "type", "budget"])
    for col, label in (("answer_hit", "Hit rate"), ("recall_at_budget", "Gold-evidence recall at budget")):
        if all(a.get(col) is None for a in by_tb.values()):
            continue
        md.append(f"\n{label} by question type and budget (strategy `{primary}`):\n")
        cols = [(t, b) for t in types for b in budgets]
        md.append(_table(["system"] + [f"{t} @ {b}" for t, b in cols],
                         [[s] + [_type_cell(by_tb, s, t, b, col) for t, b in cols] for s in systems]))

    # Strategy x system
    by_lv = aggregate(at_budget, ["strategy", "system"])
    if len(strategies) > 1:
        md.append(f"\n## Strategy × system (budget {budget})\n")
        by_ss = by_lv
        ss_systems = [s for s in systems if any((st, s) in by_ss for st in strategies if st != primary)] or systems
        for col, label in (("answer_hit", "Answer-in-context hit rate"), ("recall_at_budget", "Gold-evidence recall at budget"), ("mrr", "MRR")):
            if all(a.get(col) is None for a in by_ss.values()):
                continue
            md.append(f"\n{label}:\n")
            md.append(_table(["strategy"] + ss_systems, [[st] + [by_ss.get((st, s), {}).get(col) for s in ss_systems] for st in strategies]))

    # Level mix
    md.append(f"\n## Level mix of retrieved nodes (budget {budget})\n")
    md.append(_table(["strategy / system", "nodes per query", "levels"],
                     [[f"{st} / {s}", _n(by_lv[(st, s)]["n_hits"]), _level_text(by_lv[(st, s)]["level_counts"])]
                      for st in strategies for s in systems if (st, s) in by_lv], "lrl"))

    md.append("\n## Plots\n")
    md.append("![hit rate vs budget](hit_rate_vs_budget.png)\n\n![level mix](level_mix.png)\n\n![strategy x system](strategy_heatmap.png)\n")
    md.append("\nPer-question rows: `results.parquet` (query × strategy × system × budget); run facts: `run.json`. "
              "Definitions: docs/EVALUATION.md.\n")
    return "\n".join(md)


def _evidence_found_section(rows: Sequence[dict[str, Any]], primary: str, systems: Sequence[str], budgets: Sequence[int]) -> list[str]:
    """"Evidence found" per system × budget (tasks/evaluation/evidence.py): questions whose
    evidence text is in the context, "found of scored"; nothing when no question has one."""
    cells = {(r["system"], int(r["budget"])): r for r in rows if r.get("strategy") == primary}
    if not cells:
        return []
    md = [f"\n## Evidence found (strategy `{primary}`)\n",
          "Questions whose gold evidence text is in the context (found of scored): at least 40% of the evidence's word "
          "5-grams, or at least half of its figures with 20% of its 5-grams (docs/EVALUATION.md, \"FinanceBench: evidence found\").\n"]
    md.append(_table(["system"] + [str(b) for b in budgets],
                     [[s] + [f"{c['found']} of {c['scored']}" if (c := cells.get((s, b))) else "–" for b in budgets]
                      for s in systems if any((s, b) in cells for b in budgets)]))
    return md


def _limit_text(meta: dict[str, Any]) -> str:
    if not meta.get("limit"):
        return ""
    cut = meta.get("scope", "auto") in ("auto", "questions")
    return f" (first {meta['limit']}; " + ("corpus cut to their documents)" if cut else "whole corpus)")


def _type_cell(agg: dict[tuple, dict[str, Any]], system: str, t: str, budget: int, col: str) -> Any:
    """One metric of (system, question type, budget); "–" is the label of a missing type."""
    a = agg.get((system, None if t == "–" else t, budget)) or agg.get((system, t, budget)) or {}
    return a.get(col)


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


def write_report(results: Frame, out_dir: Path, meta: dict[str, Any]) -> dict[str, Path]:
    """Write summary.md and the three PNGs into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    budget, primary = _headline(results, meta)
    dataset = meta.get("dataset", "")
    files = {
        "hit_rate_vs_budget": plot_hit_rate_vs_budget(results, out_dir / "hit_rate_vs_budget.png", strategy=primary, dataset=dataset),
        "level_mix": plot_level_mix(results, out_dir / "level_mix.png", budget=budget, dataset=dataset),
        "strategy_heatmap": plot_strategy_heatmap(results, out_dir / "strategy_heatmap.png", budget=budget, dataset=dataset),
    }
    summary = out_dir / "summary.md"
    atomic_write_bytes(summary, render_summary(results, meta).encode("utf-8"))
    files["summary"] = summary
    return files
