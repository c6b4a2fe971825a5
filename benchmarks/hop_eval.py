"""Multi-hop designs side by side (issue 25): ``auto`` vs ``hop`` variants on built eval corpora.

Reads the folders ``arborag eval DATASET --strategies sentence --out DIR`` wrote (the prepared
dataset and the built ``corpora/sentence``), runs every system below through
``Index.search(mode=...)`` with the same query vectors, and scores them with the eval's own
metric code (``tasks/evaluation/score.score_row``): answer-in-context hit, gold-evidence recall
at 500 / 1,000 / 2,000 tokens, and recall@5 over the first five distinct documents (HippoRAG 2's
count), by question type. A corpus built before the ``links`` stage gets its links from the
stage's own function (``tasks/links.build_links`` over the snapshot's chunks and documents);
that time is reported as the index-time cost beside the corpus's build time.

    python benchmarks/hop_eval.py --eval hotpotqa=/tmp/ev-h --eval narrativeqa=/tmp/ev-n \\
        --eval financebench=/tmp/ev-f --out benchmarks/results/hop_eval
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_commit, machine_line, setup_env  # noqa: E402

BUDGETS = (500, 1000, 2000)

#: (system, mode, options): the designs tried. ``auto`` is the baseline.
SYSTEMS: list[tuple[str, str, dict[str, Any]]] = [
    ("auto", "auto", {}),
    ("hop", "hop", {}),
]


def parse_systems(spec: str | None) -> list[tuple[str, str, dict[str, Any]]]:
    """``name=mode:key=value,key=value;...`` (JSON values) or the default list."""
    if not spec:
        return SYSTEMS
    out = []
    for part in spec.split(";"):
        name, _, rest = part.partition("=")
        mode, _, opts = rest.partition(":")
        options: dict[str, Any] = {}
        for kv in filter(None, opts.split(",")):
            k, _, v = kv.partition("=")
            try:
                options[k] = json.loads(v)
            except json.JSONDecodeError:
                options[k] = v
        out.append((name.strip(), mode.strip(), options))
    return out


def run_dataset(name: str, eval_dir: Path, systems, strategy: str = "sentence") -> dict[str, Any]:
    import polars as pl
    import pyarrow.parquet as pq

    from arborag.query import hop
    from arborag.query.index import open_index
    from arborag.storage.corpus import Corpus
    from arborag.tasks.evaluation import metrics as M
    from arborag.tasks.evaluation.gold import evidence_page_texts, gold_items, resolve_gold
    from arborag.tasks.evaluation.score import score_row
    from arborag.tasks.links import build_links

    meta = json.loads((eval_dir / "dataset" / "dataset.json").read_text())
    corpus_dir = eval_dir / "corpora" / strategy
    index = open_index(corpus_dir)
    link_s = None
    if not (index.snapshot_dir / "links.parquet").exists():  # built before the links stage
        t0 = time.perf_counter()
        links = build_links(index.leaf_chunks(), index.documents())
        link_s = time.perf_counter() - t0
        tmp = Path(tempfile.mkdtemp(prefix="hop-links-")) / "links.parquet"
        pq.write_table(links, tmp)
        v = index.vectors
        hop._GRAPHS[index] = {t: hop.load_link_graph(tmp, v.node_ids, v.doc_ids, titled_only=t) for t in (False, True)}
    graph = hop.link_graph(index)
    build_json = corpus_dir / "eval_build.json"
    build_s = json.loads(build_json.read_text()).get("seconds") if build_json.exists() else None

    queries = pq.read_table(meta["queries_path"])
    evidence = pq.read_table(meta["evidence_path"])
    documents = Corpus(corpus_dir).read("documents")
    gold_docs = resolve_gold(evidence, documents)
    pages = evidence_page_texts(evidence, documents, gold_docs)
    q = queries.to_pylist()
    vectors = index.embed_queries([r["question"] for r in q])
    rows: list[dict[str, Any]] = []
    for i, r in enumerate(q):
        golds = gold_items(r["gold_ids"] or [], r["gold_texts"], gold_docs, pages)
        answers = r["answers"] or []
        applicable = M.answer_applicable(answers, r["gold_texts"])
        for system, mode, options in systems:
            for budget in BUDGETS:
                t0 = time.perf_counter()
                hits = index.search(r["question"], mode=mode, budget=budget, vector=vectors[i], **options)
                ms = (time.perf_counter() - t0) * 1000
                s = score_row([h.level for h in hits], [h.text for h in hits], [list(h.doc_ids) for h in hits], golds, answers,
                              applicable=applicable, failed=False, match=meta["match"])
                rows.append({"qid": r["qid"], "half": "odd" if i % 2 else "even", "type": r["type"] or "-", "system": system, "budget": budget, "ms": ms,
                             "hit": s["answer_hit"], "recall": s["recall_at_budget"], "r5docs": s["recall_at_5_docs"]})
    df = pl.DataFrame(rows)
    table = df.group_by("system", "budget").agg(pl.col("hit").mean(), pl.col("recall").mean(), pl.col("r5docs").mean(),
                                                pl.col("ms").median().alias("p50_ms"))
    by_type = df.filter(pl.col("budget") == 500).group_by("system", "type").agg(pl.col("hit").mean(), pl.col("recall").mean(),
                                                                              pl.col("r5docs").mean(), pl.len().alias("n"))
    halves = df.group_by("system", "budget", "half").agg(pl.col("recall").mean())
    index.close()
    return {"halves": halves.to_dicts(), "dataset": name, "questions": len(q), "leaves": int((index.vectors.levels == 0).sum()), "links": graph.n_edges,
            "entities": graph.n_ents, "links_s": link_s, "build_s": build_s, "table": table.to_dicts(), "by_type_500": by_type.to_dicts()}


def _f(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"


def render(results: list[dict[str, Any]], systems, command: str, started: str, load: str) -> str:
    md = ["# Multi-hop designs (issue 25): `auto` vs `hop` variants", "",
          f"- command: `{command}`", f"- date: {started}", f"- commit: `{git_commit()}`", f"- machine: {machine_line()}",
          f"- load average at start / end: {load} (a 2-core machine shared with other engineers' jobs: the ms are noisy)",
          "- metrics: the eval's own (`tasks/evaluation/score.score_row`): answer-in-context hit / gold-evidence recall within",
          "  the budget; R@5 docs = recall over the first five distinct documents of the ranking (HippoRAG 2's recall@5),",
          "  at the 2,000-token budget's ranking; same query vectors for every system", ""]
    md.append("systems: " + "; ".join(f"`{s}` = mode `{m}` {json.dumps(o) if o else ''}" for s, m, o in systems))
    for res in results:
        md += ["", f"## {res['dataset']} ({res['questions']} questions, {res['leaves']} leaves, {res['links']} links over "
               f"{res['entities']} entities)", ""]
        if res["links_s"] is not None:
            cost = f"{res['links_s']:.2f} s" + (f" = {100 * res['links_s'] / res['build_s']:.1f} % of the corpus build ({res['build_s']:.0f} s)"
                                                if res.get("build_s") else "")
            md.append(f"links computed by `build_links` in {cost}")
            md.append("")
        md.append("| system | 500 hit / recall | 1,000 | 2,000 | R@5 docs | p50 ms (2,000) |")
        md.append("| --- | ---: | ---: | ---: | ---: | ---: |")
        cell = {(r["system"], r["budget"]): r for r in res["table"]}
        for s, _, _ in systems:
            parts = []
            for b in BUDGETS:
                r = cell.get((s, b))
                parts.append("–" if r is None else f"{_f(r['hit'])} / {r['recall']:.3f}")
            r2 = cell.get((s, 2000)) or {}
            md.append(f"| {s} | " + " | ".join(parts) + f" | {r2.get('r5docs', 0):.3f} | {r2.get('p50_ms', 0):.1f} |")
        types = sorted({r["type"] for r in res["by_type_500"]})
        if len(types) > 1:
            bt = {(r["system"], r["type"]): r for r in res["by_type_500"]}
            md += ["", "By question type at 500 tokens (hit / recall / R@5 docs):", "",
                   "| system | " + " | ".join(f"{t} (n={bt.get((systems[0][0], t), {}).get('n', 0)})" for t in types) + " |",
                   "| --- | " + " | ".join("---:" for _ in types) + " |"]
            for s, _, _ in systems:
                md.append(f"| {s} | " + " | ".join(
                    (lambda r: "–" if r is None else f"{_f(r['hit'])} / {r['recall']:.3f} / {r['r5docs']:.3f}")(bt.get((s, t)))
                    for t in types) + " |")
        hv = {(r["system"], r["budget"], r["half"]): r["recall"] for r in res.get("halves", [])}
        md += ["", "Recall within the budget on each half of the questions (even / odd positions; a design that only fits",
               "some questions shows as a gap between the halves):", "",
               "| system | " + " | ".join(f"{b} even / odd" for b in BUDGETS) + " |", "| --- | " + " | ".join("---:" for _ in BUDGETS) + " |"]
        for s, _, _ in systems:
            md.append(f"| {s} | " + " | ".join(f"{hv.get((s, b, 'even'), 0):.3f} / {hv.get((s, b, 'odd'), 0):.3f}" for b in BUDGETS) + " |")
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    setup_env()
    import os

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eval", action="append", required=True, help="DATASET=EVAL_DIR (an arborag eval output folder)")
    ap.add_argument("--systems", help="name=mode:key=value,...;... (default: auto and hop)")
    ap.add_argument("--out", required=True, help="results path without extension (.md and .json are written)")
    a = ap.parse_args(argv)
    systems = parse_systems(a.systems)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    load0 = os.getloadavg()
    results = []
    for spec in a.eval:
        name, _, d = spec.partition("=")
        results.append(run_dataset(name, Path(d), systems))
        print(f"{name}: done", file=sys.stderr)
    load1 = os.getloadavg()
    load = f"{load0[0]:.2f} / {load1[0]:.2f}"
    command = "python benchmarks/hop_eval.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(render(results, systems, command, started, load))
    out.with_suffix(".json").write_text(json.dumps({"command": command, "date": started, "commit": git_commit(), "load": load,
                                                    "systems": systems, "results": results}, indent=1))
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
