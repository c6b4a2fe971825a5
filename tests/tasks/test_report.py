"""summary.md and the plots from a RESULTS table (arborag.tasks.evaluation.report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from arborag.storage.schemas import RESULTS
from arborag.tasks.evaluation.report import render_summary, write_report

BASE = {c: None for c in RESULTS.names}


def _row(qid: str, strategy: str, system: str, budget: int, **kw: Any) -> dict[str, Any]:
    return {**BASE, "dataset": "t", "qid": qid, "strategy": strategy, "system": system, "mode": "collapsed", "budget": budget,
            "latency_ms": 10.0, "embed_ms": 2.0, "levels": [0], "n_hits": 1, "context_tokens": 50, **kw}


def _results() -> pa.Table:
    rows = []
    for budget in (100, 200):
        for st in ("sentence", "dds"):
            for sy in ("flat", "collapsed") if st == "dds" else ("flat", "collapsed", "bm25"):
                good = 1.0 if (sy == "collapsed" or budget == 200) else 0.0
                rows += [
                    _row("q1", st, sy, budget, type="bridge", answer_hit=good, recall_at_budget=0.5, full_support=0.0, mrr=0.5,
                         levels=[0, 1] if sy == "collapsed" else [0, 0]),
                    _row("q2", st, sy, budget, type=None, answer_hit=None, recall_at_budget=1.0, full_support=1.0, mrr=1.0),
                ]
    rows.append(_row("q3", "sentence", "bm25", 200, type="", error="QueryError: boom", latency_ms=None, levels=[]))
    return pa.Table.from_pylist(rows, schema=RESULTS)


META = {"dataset": "toy", "questions": 3, "default_budget": 200, "primary_strategy": "sentence", "baseline": "flat"}


def test_summary_tables_hold_the_aggregates() -> None:
    md = render_summary(_results(), META)
    assert md.startswith("# arborag evaluation: toy")
    assert "**1 searches raised**" in md
    # systems at the headline budget: hit rate over q1 only (q2 has no span answer, q3 failed: null)
    assert "| flat | 1.000 |" in md and "| collapsed | 1.000 |" in md
    assert "scored on the 1 of 3 questions" in md
    # budgets table: flat/bm25 miss at 100, collapsed hits
    assert "| flat | 0.000 | 1.000 |" in md and "| collapsed | 1.000 | 1.000 |" in md
    # question types: None and "" both show as "–", counted by distinct question
    assert "bridge (n=1)" in md and "– (n=2)" in md
    # strategy × system has the shared systems only
    assert "| strategy | flat | collapsed |" in md
    # level mix: collapsed retrieved levels [0, 1] and [0]
    assert "| sentence / collapsed | 1.0 | L0 67% · L1 33% |" in md


def test_summary_on_empty_results() -> None:
    md = render_summary(RESULTS.empty_table(), {"dataset": "none"})
    assert "Systems at budget 2000 (strategy `sentence`)" in md


def test_write_report_writes_summary_and_plots(tmp_path: Path) -> None:
    files = write_report(_results(), tmp_path / "out", META)
    assert set(files) == {"summary", "hit_rate_vs_budget", "level_mix", "strategy_heatmap"}
    assert files["summary"].read_text(encoding="utf-8") == render_summary(_results(), META)
    for key in ("hit_rate_vs_budget", "level_mix", "strategy_heatmap"):
        assert files[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no temp files left
