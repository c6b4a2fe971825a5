"""Is the tree readable? Fragment rate, whole sentences and coverage of the summaries, and line
breaks inside sentences in the leaves, on the demo corpus and the FinanceBench PDFs.

    python benchmarks/readable.py                                   # build both, measure, write results
    python benchmarks/readable.py --measure before-demo=/tmp/old-demo-corpus   # also measure built corpora
    python benchmarks/readable.py --llm                             # + abstractive summaries of the same clusters
    python benchmarks/readable.py --smoke --out /tmp/r/readable.md  # a tiny check run (the demo corpus only)

Each corpus is built with the real CLI (``arborag build SOURCES --corpus WORK/NAME --no-prefect``,
default config: extractive summaries) and measured from its published snapshot with
:func:`arborag.tasks.evaluation.readability.corpus_readability` (definitions: docs/EVALUATION.md,
"Readability"). ``--measure NAME=DIR`` measures corpora built elsewhere (e.g. by older code) with
the same metric code.

``--llm`` (needs an OpenAI-compatible server, e.g. ``scripts/local_llm.sh serve``, and
``ARBORAG_LLM_BASE_URL``/``ARBORAG_LLM_MODEL``): every summary node of the demo tree is summarized
again from the same children's texts, once by the extractive summarizer and once by the LLM
(``summarize.backend=openai``), each call timed; the two sets of summaries are measured with the
same metrics on the same edges. Coverage counts quoted sentences, so an abstractive summary,
which quotes nothing, is not comparable there (shown, but read it as such).

Writes ``benchmarks/results/readable.md`` and ``readable.json`` (command, date, load average
before and after, commit).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, REPO, RESULTS, cli_build, busy_processes, git_commit, machine_line, setup_env  # noqa: E402

CORPORA = {
    "demo": [REPO / "examples" / "corpus"],
    "financebench": [DATA / "financebench" / "pdfs"],
}
METRICS = ("summaries", "fragment_rate", "fragmented", "whole_sentence_share", "coverage", "leaves", "leaves_with_wrap_breaks", "wrap_breaks")




def clusters_of(corpus: Path) -> tuple[Any, Any, list[str], list[list[str]]]:
    """nodes, edges, summary node ids and each one's children's texts (in the tree's order)."""
    import polars as pl
    import pyarrow.parquet as pq

    from arborag.storage.corpus import Corpus

    c = Corpus(corpus)
    nodes = pq.read_table(c.snapshot_table_path("nodes"))
    edges = pq.read_table(c.snapshot_table_path("edges"))
    n = pl.from_arrow(nodes.select(["node_id", "level", "text"])).with_row_index("row")
    e = pl.from_arrow(edges.select(["parent_id", "child_id"])).with_row_index("edge")
    kids = (e.join(n.select(pl.col("node_id").alias("child_id"), "row", "text"), on="child_id")
            .sort(["parent_id", "row"]).group_by("parent_id", maintain_order=True).agg(pl.col("text")))
    summaries = n.filter(pl.col("level") >= 1).join(kids, left_on="node_id", right_on="parent_id", how="left")
    ids = summaries.get_column("node_id").to_list()
    texts = [list(t or []) for t in summaries.get_column("text_right").to_list()]
    return nodes, edges, ids, texts


def resummarize(corpus: Path, summarizer: Any, limit: int | None = None) -> dict[str, Any]:
    """Summaries of the same clusters by ``summarizer``, timed per call, measured on the same edges
    (``limit``: only the first N summary nodes are re-summarized and measured)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from arborag.tasks.evaluation.readability import readability

    nodes, edges, ids, clusters = clusters_of(corpus)
    if limit is not None:
        ids, clusters = ids[:limit], clusters[:limit]
        keep = pc.or_(pc.equal(nodes.column("level"), 0), pc.is_in(nodes.column("node_id"), pa.array(ids)))
        nodes = nodes.filter(keep)
    out: dict[str, str] = {}
    seconds: list[float] = []
    statuses: list[str] = []
    for node_id, texts in zip(ids, clusters, strict=True):
        t0 = time.perf_counter()
        res = summarizer.summarize_many([texts])[0]
        seconds.append(time.perf_counter() - t0)
        out[node_id] = res.text
        statuses.append(res.status)
    col = [out.get(i, t) for i, t in zip(nodes.column("node_id").to_pylist(), nodes.column("text").to_pylist(), strict=True)]
    swapped = nodes.set_column(nodes.schema.get_field_index("text"), "text", pa.array(col, pa.large_string()))
    metrics = readability(swapped, edges)
    summ = swapped.filter(pc.greater_equal(swapped.column("level"), 1))
    examples = [t for t in summ.column("text").to_pylist()[:2]]
    return {**metrics, "seconds_per_summary": sum(seconds) / len(seconds) if seconds else None, "seconds_total": sum(seconds),
            "fallbacks": sum(1 for s in statuses if s != "ok"), "examples": examples}


def table(rows: dict[str, dict[str, Any]]) -> str:
    def f(v: Any) -> str:
        if v is None:
            return "–"
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    head = "| corpus | summaries | fragment rate | fragmented | whole sentences | coverage | leaves | leaves with a break inside a sentence | such breaks |"
    lines = [head, "| --- " + "| ---: " * 8 + "|"]
    for name, r in rows.items():
        lines.append(f"| {name} | " + " | ".join(f(r.get(k)) for k in METRICS) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="demo,financebench", help="which of demo, financebench to build and measure")
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-bench-readable"))
    ap.add_argument("--measure", action="append", default=[], metavar="NAME=DIR", help="also measure a built corpus")
    ap.add_argument("--llm", action="store_true", help="abstractive vs extractive summaries of the demo tree's clusters")
    ap.add_argument("--build", default="", help="with --llm: a built demo corpus to reuse instead of building one")
    ap.add_argument("--llm-limit", type=int, default=None, help="with --llm: only the first N summary nodes (time)")
    ap.add_argument("--out", type=Path, default=RESULTS / "readable.md", help="the report; the .json is written beside it")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (the demo corpus only)")
    args = ap.parse_args()
    if args.smoke:
        args.corpora, args.llm = "demo", False
    setup_env()
    from arborag.tasks.evaluation.readability import corpus_readability

    command = "python " + " ".join(["benchmarks/readable.py", *sys.argv[1:]])
    started = datetime.now(timezone.utc)
    load_before = machine_line()
    busy = busy_processes()
    rows: dict[str, dict[str, Any]] = {}
    builds: dict[str, float] = {}
    for item in args.measure:
        name, _, path = item.partition("=")
        rows[name] = corpus_readability(path)
        print(f"{name}: {rows[name]}", flush=True)
    built: dict[str, Path] = {}
    for name in [c.strip() for c in args.corpora.split(",") if c.strip()]:
        corpus, seconds = cli_build(name, CORPORA[name], args.work)
        built[name], builds[name] = corpus, seconds
        rows[name] = corpus_readability(corpus)
        print(f"{name}: built in {seconds:.0f} s: {rows[name]}", flush=True)
    llm: dict[str, Any] = {}
    if args.llm:
        from arborag.config import SummarizeConfig, load_config
        from arborag.tasks.summarize.extractive import ExtractiveSummarizer, make_summarizer

        cfg = load_config().summarize
        if not cfg.base_url:
            raise SystemExit("--llm needs an OpenAI-compatible server: set ARBORAG_LLM_BASE_URL (see docs/LLM.md)")
        demo = built.get("demo") or (Path(args.build) if args.build else cli_build("demo", CORPORA["demo"], args.work)[0])
        llm["extractive"] = resummarize(demo, ExtractiveSummarizer(SummarizeConfig(max_tokens=cfg.max_tokens)), args.llm_limit)
        llm_cfg = cfg.model_copy(update={"backend": "openai"})
        llm["abstractive"] = resummarize(demo, make_summarizer(llm_cfg, cache_dir=None), args.llm_limit)
        llm["model"] = f"{cfg.llm_model} at {cfg.base_url}"
        for k in ("extractive", "abstractive"):
            print(f"{k}: {llm[k]['seconds_per_summary']:.3f} s/summary, fragment rate {llm[k]['fragment_rate']}", flush=True)
    load_after = machine_line()
    md = [
        "# Readable trees: fragment rate, whole sentences, coverage, hard wraps in leaves",
        "",
        f"- command: `{command}`",
        f"- date: {started:%Y-%m-%d %H:%M} UTC",
        f"- machine before: {load_before}",
        f"- machine after: {load_after}",
        "- the machine was **shared** with other builds and tests (load above); build seconds are noisy, the metrics are not"
        + (f"; busy then: {'; '.join(busy)}" if busy else ""),
        f"- commit: {git_commit()}",
        "- definitions: docs/EVALUATION.md, \"Readability\" (`tasks/evaluation/readability.py`)",
        "",
        table(rows),
        "",
    ]
    if builds:
        md += ["Build seconds (`arborag build … --no-prefect`): " + ", ".join(f"{k} {v:.0f}" for k, v in builds.items()), ""]
    if llm:
        md += [
            f"## Extractive vs abstractive, same clusters (demo corpus; LLM: {llm['model']})",
            "",
            "| summarizer | summaries | s per summary | fragment rate | whole sentences | coverage (quoted) | fallbacks |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for k in ("extractive", "abstractive"):
            r = llm[k]
            md.append(f"| {k} | {r['summaries']} | {r['seconds_per_summary']:.3f} | {r['fragment_rate']:.3f} | "
                      f"{r['whole_sentence_share']:.3f} | {r['coverage']:.3f} | {r['fallbacks']} |")
        md += ["", "First two summaries of each:", ""]
        for k in ("extractive", "abstractive"):
            for t in llm[k]["examples"]:
                md.append(f"- {k}: {t!r}")
        md.append("")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(md), encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps({
        "command": command, "date": started.isoformat(), "load_before": load_before, "load_after": load_after,
        "commit": git_commit(), "corpora": rows, "build_seconds": builds, "llm": llm,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
    }, indent=2, default=str), encoding="utf-8")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
