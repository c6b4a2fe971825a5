"""Before/after retrieval of two `arborag eval` runs per dataset: did a change to the tree move it?

    python benchmarks/eval_compare.py \
        --pair financebench=/tmp/ev-before-fb,/tmp/ev-after-fb --pair narrativeqa=... \
        --before-label "main 295aa51" --after-label "read b793ee2"

Each ``--pair DATASET=BEFORE,AFTER`` names two output folders of ``arborag eval DATASET --out DIR``
(same dataset, systems and budgets; typically ``--strategies sentence --systems
flat,collapsed,traversal,auto,auto-summaries``), run with the code the labels name. This script
measures nothing itself: it reads both runs' ``results.parquet`` and ``run.json`` and writes, per
dataset and system × budget, answer-in-context hit rate and gold-evidence recall at budget before
→ after with the difference, plus the readability of both trees
(:func:`arborag.tasks.evaluation.readability.corpus_readability` on each run's
``corpora/<strategy>``). Output: ``benchmarks/results/eval_compare.md`` (``--out``: elsewhere)
with this command, the date, load average, this checkout's commit and each run's own start time
and timings.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, git_commit, machine_line, setup_env  # noqa: E402

SYSTEM_ORDER = ("auto", "flat", "bm25", "collapsed", "traversal", "hybrid", "auto-summaries", "auto-tree")


def _means(run: Path) -> dict[tuple[str, int], dict[str, float | None]]:
    import polars as pl

    df = pl.read_parquet(run / "results.parquet")
    primary = json.loads((run / "run.json").read_text(encoding="utf-8")).get("primary_strategy", "sentence")
    agg = (df.filter(pl.col("strategy") == primary).group_by(["system", "budget"])
           .agg(pl.col("answer_hit").mean().alias("hit"), pl.col("recall_at_budget").mean().alias("recall"), pl.len().alias("n")))
    return {(r["system"], int(r["budget"])): r for r in agg.to_dicts()}


def _f(v: Any) -> str:
    return "–" if v is None else f"{v:.3f}"


def _d(a: Any, b: Any) -> str:
    return "–" if a is None or b is None else f"{b - a:+.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", action="append", required=True, metavar="DATASET=BEFORE,AFTER")
    ap.add_argument("--before-label", required=True)
    ap.add_argument("--after-label", required=True)
    ap.add_argument("--out", type=Path, default=RESULTS / "eval_compare.md")
    ap.add_argument("--runs-load", default="not recorded by the runs (the load average now is above)",
                    help="what the machine's load was while the two eval runs ran (their metrics do not depend on it, their timings do)")
    args = ap.parse_args()
    setup_env()
    from arborag.tasks.evaluation.readability import corpus_readability

    command = "python " + " ".join(["benchmarks/eval_compare.py", *(f"'{a}'" if " " in a else a for a in sys.argv[1:])])
    md = [
        f"# Retrieval before and after: {args.before_label} → {args.after_label}",
        "",
        f"- command: `{command}`",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; machine now: {machine_line()}",
        f"- commit of this checkout: {git_commit()}; the runs' code is named by the labels",
        f"- load while the runs ran: {args.runs_load}; their metrics do not depend on load, their timings do",
        "- hit = answer-in-context hit rate (only questions whose answer occurs verbatim in the evidence); "
        "recall = gold-evidence recall at budget; strategy `sentence`",
        "",
    ]
    for pair in args.pair:
        dataset, _, dirs = pair.partition("=")
        before, after = (Path(p) for p in dirs.split(","))
        runs = {"before": before, "after": after}
        meta = {k: json.loads((p / "run.json").read_text(encoding="utf-8")) for k, p in runs.items()}
        means = {k: _means(p) for k, p in runs.items()}
        md += [f"## {dataset}", ""]
        for k, p in runs.items():
            label = args.before_label if k == "before" else args.after_label
            md.append(f"- {k} ({label}): `{p}`, started {meta[k].get('started_at')}, {meta[k].get('questions')} questions, "
                      f"timings (s) {meta[k].get('timings_s')}")
        md += ["", "| system | budget | hit before | hit after | Δ hit | recall before | recall after | Δ recall |",
               "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        keys = sorted(set(means["before"]) & set(means["after"]),
                      key=lambda k: (SYSTEM_ORDER.index(k[0]) if k[0] in SYSTEM_ORDER else 99, k[0], k[1]))
        for key in keys:
            b, a = means["before"][key], means["after"][key]
            md.append(f"| {key[0]} | {key[1]} | {_f(b['hit'])} | {_f(a['hit'])} | {_d(b['hit'], a['hit'])} | "
                      f"{_f(b['recall'])} | {_f(a['recall'])} | {_d(b['recall'], a['recall'])} |")
        md += ["", "| tree | summaries | fragment rate | whole sentences | coverage | leaves with a break inside a sentence |",
               "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for k, p in runs.items():
            strategy = meta[k].get("primary_strategy", "sentence")
            r = corpus_readability(p / "corpora" / strategy)
            if r:
                md.append(f"| {k} | {r['summaries']} | {_f(r['fragment_rate'])} | {_f(r['whole_sentence_share'])} | "
                          f"{_f(r['coverage'])} | {r['leaves_with_wrap_breaks']} of {r['leaves']} |")
        md.append("")
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(md), encoding="utf-8")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
