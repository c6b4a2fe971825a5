"""Incremental update vs full builds, and the quality drift of incremental updates.

Part ``scale`` — a corpus of >= 2,000 documents made from the shared HotpotQA paragraphs (each
paragraph cut into consecutive 2-sentence pieces, one .txt document per piece: 2,318 pieces;
the base corpus is 2,000 of them, the rest are the documents that arrive later):

1. cold full build (fresh corpus: no embedding cache, models loaded in this process first);
2. ``update`` with 1% added, then a warm full rebuild of the same inputs (same corpus: every
   leaf text is in the embedding cache) — the baseline an update replaces;
3. ``update`` with 10% added, 1% deleted, 1% changed (one after the other).

For each: wall seconds, summarizer calls, texts embedded, clusters touched per level; the ratio
to the cold build (target <= 5%) and to the warm rebuild. ``update.max_drift`` is raised to 1.0
here so every step stays incremental (10% + 1% + 1% + 1% would otherwise pass the default 20%
guard only at the end; the guard is tested in tests/flows/update).

Part ``drift`` — on the shared HotpotQA sample (994 paragraphs, 100 questions): build on 80% of
the paragraphs, add the rest in 4 updates (5% each; max_drift 1.0 so all 4 stay incremental),
and compare retrieval with a full build over 100% (its embedding cache seeded from the first
corpus: same vectors, less time): recall@budget and hit rate of the eval's own scoring
(:func:`arborag.tasks.evaluation.score.score_hits`) for flat / collapsed / traversal at one
budget. Target: within 0.02.

Run::

    OMP_NUM_THREADS=1 timeout 5400 python benchmarks/update.py            # both parts
    python benchmarks/update.py --part drift --work /tmp/upd               # one part
    python benchmarks/update.py --smoke --out /tmp/upd/update.json         # a tiny check run

Writes ``benchmarks/results/update.json`` and its report ``update.md`` (``--out``: elsewhere;
``--render-only`` writes the report of a saved .json again).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, git_commit, hotpot_paragraphs, machine_line, md_table, setup_env  # noqa: E402

setup_env()

SEED = 9
DRIFT_OFF = {"update": {"max_drift": 1.0}}


def _config(**sections: dict[str, Any]):
    from arborag.config import load_config

    return load_config(None, overrides={**DRIFT_OFF, **sections})


def _pieces() -> list[tuple[str, str]]:
    """(file name, text) of every 2-sentence piece of every HotpotQA paragraph, in a fixed order."""
    out = []
    for p, (title, sents) in enumerate(hotpot_paragraphs()):
        for k in range(0, len(sents), 2):
            body = " ".join(sents[k:k + 2])
            out.append((f"p{p:04d}-{k // 2}.txt", f"{title} (part {k // 2 + 1})\n\n{body}\n"))
    random.Random(SEED).shuffle(out)
    return out


def _last_run(corpus: Path) -> dict[str, Any]:
    from arborag.storage.corpus import Corpus

    rows = Corpus(corpus).read("runs").to_pylist()
    row = rows[-1]
    return {"flow": row["flow"], "status": row["status"], "counts": json.loads(row["counts"] or "{}")}


def _nodes(corpus: Path) -> dict[str, int]:
    import pyarrow.parquet as pq

    from arborag.storage.corpus import Corpus

    levels = pq.read_table(Corpus(corpus).published_dir() / "nodes.parquet", columns=["level"]).column("level").to_pylist()
    return {str(lv): levels.count(lv) for lv in sorted(set(levels))}


def _row(label: str, out: dict[str, Any], corpus: Path, t: float) -> dict[str, Any]:
    run = _last_run(corpus)
    calls = out.get("calls") or {}
    row = {
        "step": label, "seconds": round(t, 2), "summaries": calls.get("summaries", 0), "embedded_texts": calls.get("embedded_texts", 0),
        "mode": out.get("mode", "build"), "reason": out.get("reason"), "status": out.get("status"), "snapshot": out.get("snapshot"),
        "plan": {k: (out.get("plan") or {}).get(k) for k in ("added", "changed", "deleted", "unchanged")} if "plan" in out else None,
        "clusters_touched": run["counts"].get("clusters_touched"), "stage_seconds": out.get("stage_seconds"),
        "nodes_per_level": _nodes(corpus), "load1": round(__import__("os").getloadavg()[0], 2),
    }
    print(f"  {label}: {row['seconds']} s, {row['summaries']} summaries, {row['embedded_texts']} texts embedded, mode {row['mode']}"
          f" (load {row['load1']})", flush=True)
    return row


def part_scale(work: Path, n_docs: int) -> dict[str, Any]:
    from arborag.flows.build import run_build
    from arborag.flows.update import run_update

    pieces = _pieces()
    if len(pieces) < n_docs + n_docs // 10 + n_docs // 100:
        raise SystemExit(f"only {len(pieces)} pieces: cannot make {n_docs} documents plus 11% to add")
    base, pool = pieces[:n_docs], pieces[n_docs:]
    src, corpus = work / "scale-src", work / "scale-corpus"
    for d in (src, corpus):
        shutil.rmtree(d, ignore_errors=True)
    src.mkdir(parents=True)
    for name, text in base:
        (src / name).write_text(text, encoding="utf-8")
    cfg = _config()
    rows: list[dict[str, Any]] = []

    def build(label: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        out = run_build([src], corpus, cfg, use_prefect=False, progress=False)
        rows.append(_row(label, out, corpus, time.perf_counter() - t0))
        return rows[-1]

    def update(label: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        out = run_update([src], corpus, cfg, use_prefect=False, progress=False)
        rows.append(_row(label, out, corpus, time.perf_counter() - t0))
        return rows[-1]

    print(f"scale: {n_docs} documents (HotpotQA 2-sentence pieces) in {src}", flush=True)
    cold = build("cold full build")
    one = max(1, n_docs // 100)
    for name, text in pool[:one]:
        (src / name).write_text(text, encoding="utf-8")
    update("update: +1% added")
    warm = build("warm full rebuild (after +1%)")
    for name, text in pool[one:one + n_docs // 10]:
        (src / name).write_text(text, encoding="utf-8")
    update("update: +10% added")
    present = sorted(p.name for p in src.iterdir())
    rng = random.Random(SEED + 1)
    for name in rng.sample(present, one):
        (src / name).unlink()
    update("update: 1% deleted")
    present = sorted(p.name for p in src.iterdir())
    for i, name in enumerate(rng.sample(present, one)):
        path = src / name
        path.write_text(path.read_text(encoding="utf-8") + f"Revised in edition {i + 2}.\n", encoding="utf-8")
    update("update: 1% changed")
    for r in rows:
        r["vs_cold"] = round(r["seconds"] / cold["seconds"], 4)
        r["vs_warm"] = round(r["seconds"] / warm["seconds"], 4)
        r["summaries_vs_cold"] = round(r["summaries"] / cold["summaries"], 4) if cold["summaries"] else None
    return {"documents": n_docs, "rows": rows}


def _evaluate(corpus: Path, prepared: Any, systems: list[str], budget: int) -> dict[str, dict[str, float]]:
    import polars as pl

    from arborag.query import open_index
    from arborag.storage.corpus import Corpus
    from arborag.tasks.evaluation.gold import resolve_gold
    from arborag.tasks.evaluation.retrieve import run_queries
    from arborag.tasks.evaluation.score import score_hits

    queries = prepared.queries()
    index = open_index(corpus)
    hits = run_queries(index, queries, "sentence", systems, [budget])
    gold = {"sentence": resolve_gold(prepared.evidence(), Corpus(corpus).read("documents"))}
    res = pl.from_arrow(score_hits(hits, queries, gold, dataset="hotpotqa", match=prepared.match))
    agg = res.group_by("system").agg(pl.col("recall_at_budget").mean().alias("recall"), pl.col("answer_hit").mean().alias("hit_rate"))
    return {r["system"]: {"recall": round(r["recall"], 4), "hit_rate": round(r["hit_rate"], 4)} for r in agg.iter_rows(named=True)}


def part_drift(work: Path, budget: int, paragraphs: int | None = None) -> dict[str, Any]:
    from arborag.flows.build import run_build
    from arborag.flows.update import run_update
    from arborag.tasks.evaluation.datasets import prepare_dataset

    prepared = prepare_dataset("hotpotqa", work / "hotpot-ds")
    files = sorted(p.name for p in prepared.corpus_dir.iterdir())
    random.Random(SEED).shuffle(files)
    files = files[:paragraphs] if paragraphs else files
    n80 = int(len(files) * 0.8)
    batches = [files[n80 + i * (len(files) - n80) // 4: n80 + (i + 1) * (len(files) - n80) // 4] for i in range(4)]
    src, inc, full = work / "drift-src", work / "drift-incremental", work / "drift-full"
    for d in (src, inc, full):
        shutil.rmtree(d, ignore_errors=True)
    src.mkdir(parents=True)
    for name in files[:n80]:
        shutil.copy2(prepared.corpus_dir / name, src / name)
    cfg = _config()
    steps = []
    print(f"drift: build on {n80} of {len(files)} paragraphs, then 4 updates of {[len(b) for b in batches]}", flush=True)
    t0 = time.perf_counter()
    out = run_build([src], inc, cfg, use_prefect=False, progress=False)
    steps.append(_row("80% build", out, inc, time.perf_counter() - t0))
    for i, batch in enumerate(batches):
        for name in batch:
            shutil.copy2(prepared.corpus_dir / name, src / name)
        t0 = time.perf_counter()
        out = run_update([src], inc, cfg, use_prefect=False, progress=False)
        steps.append(_row(f"update {i + 1}: +{len(batch)}", out, inc, time.perf_counter() - t0))
    full.mkdir(parents=True)
    shutil.copytree(inc / "cache", full / "cache")  # the same vectors, without paying for them again
    t0 = time.perf_counter()
    out = run_build([src], full, cfg, use_prefect=False, progress=False)
    steps.append(_row("100% full build (embedding cache seeded)", out, full, time.perf_counter() - t0))
    systems = ["flat", "collapsed", "traversal"]
    print("drift: evaluating both corpora ...", flush=True)
    m_inc = _evaluate(inc, prepared, systems, budget)
    m_full = _evaluate(full, prepared, systems, budget)
    table = []
    for s in systems:
        a, b = m_inc.get(s, {}), m_full.get(s, {})
        table.append({
            "system": s, "incremental": a, "full": b,
            "recall_diff": round(a["recall"] - b["recall"], 4) if a and b else None,
            "hit_rate_diff": round(a["hit_rate"] - b["hit_rate"], 4) if a and b else None,
        })
    return {"paragraphs": len(files), "questions": prepared.n_queries, "budget": budget, "steps": steps, "metrics": table}


def markdown(result: dict[str, Any]) -> str:
    parts = []
    scale = result.get("scale")
    if scale:
        rows = [[r["step"], f"{r['seconds']:.1f}", r["summaries"], r["embedded_texts"], r["mode"],
                 f"{100 * r['vs_cold']:.1f}%", f"{100 * r['vs_warm']:.1f}%"] for r in scale["rows"]]
        parts.append(md_table(["step", "seconds", "summaries", "texts embedded", "mode", "vs cold build", "vs warm rebuild"], rows))
    drift = result.get("drift")
    if drift:
        rows = [[m["system"], f"{m['incremental'].get('recall', float('nan')):.3f}", f"{m['full'].get('recall', float('nan')):.3f}",
                 f"{m['recall_diff']:+.3f}", f"{m['incremental'].get('hit_rate', float('nan')):.3f}",
                 f"{m['full'].get('hit_rate', float('nan')):.3f}", f"{m['hit_rate_diff']:+.3f}"] for m in drift["metrics"]]
        parts.append(md_table(["system", "recall 80%+4 updates", "recall full", "diff", "hit rate 80%+4 updates", "hit rate full", "diff"], rows))
    return "\n\n".join(parts)


def report(result: dict[str, Any]) -> str:
    """The results report: where the figures come from, then the tables."""
    head = ["# Incremental update vs full builds, and the drift of incremental updates", "",
            f"- command: `{result.get('command', 'not recorded')}`", f"- date: {result.get('when', 'not recorded')}",
            f"- machine (load average at the start): {result.get('machine', 'not recorded')}", f"- commit: {result.get('commit', 'not recorded')}", "",
            "Scale part: ratios are the step's seconds over the cold build's and over the warm rebuild's (target ≤ 5% of the cold build). "
            "Drift part: recall and hit rate after a build on 80% plus 4 incremental updates, beside a full build (target: within 0.02).", ""]
    return "\n".join(head) + "\n" + markdown(result) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["all", "scale", "drift"], default="all")
    ap.add_argument("--docs", type=int, default=2000, help="documents in the scale corpus")
    ap.add_argument("--budget", type=int, default=1000, help="token budget of the drift evaluation")
    ap.add_argument("--paragraphs", type=int, default=None, help="drift: use only N paragraphs (a smoke run; default all 994)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-bench-update"))
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--out", type=Path, default=RESULTS / "update.json", help="the results .json; the .md report is written beside it")
    ap.add_argument("--render-only", action="store_true", help="write the .md report of the saved --out .json again (nothing is run)")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (40 documents, 60 paragraphs)")
    args = ap.parse_args()
    out_path: Path = args.out
    if args.render_only:
        out_path.with_suffix(".md").write_text(report(json.loads(out_path.read_text())), encoding="utf-8")
        return
    if args.smoke:
        args.docs, args.paragraphs = 40, 60
    args.work.mkdir(parents=True, exist_ok=True)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # a run of one part keeps the other part's figures from the file it rewrites
    result: dict[str, Any] = json.loads(out_path.read_text()) if out_path.exists() else {}
    result.update({"command": "python " + " ".join(["benchmarks/update.py", *sys.argv[1:]]),
                   "machine": machine_line(), "commit": git_commit(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    try:
        if args.part in ("all", "scale"):
            result["scale"] = part_scale(args.work, args.docs)
            out_path.write_text(json.dumps(result, indent=2))
        if args.part in ("all", "drift"):
            result["drift"] = part_drift(args.work, args.budget, args.paragraphs)
            out_path.write_text(json.dumps(result, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    out_path.with_suffix(".md").write_text(report(result), encoding="utf-8")
    print(markdown(result))
    print(f"wrote {out_path} and {out_path.with_suffix('.md')}")


if __name__ == "__main__":
    main()
