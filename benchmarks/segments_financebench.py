"""Segments (dsRAG RSE) vs top-k leaves vs the collapsed tree on the FinanceBench sample, with and
without sections + AutoContext headers, at equal token budgets.

Two `arborag eval financebench` runs (the real build and query path, `sentence` leaves):

* ``plain``: ``sections.strategy: none`` (no sections, no headers);
* ``headers``: ``sections.strategy: structural`` (chunks inside sections, AutoContext headers
  embedded and indexed with each chunk; never returned as context).

Systems: ``flat`` (dense top-k leaves, the baseline), ``collapsed`` (RAPTOR collapsed tree),
``segments`` (RSE balanced), ``segments-precision``, ``segments-find_all``; budgets 500, 1,000,
2,000 tokens. Metrics per question, averaged:

* **page hit**: the evidence page was retrieved (``recall_at_budget`` with page-level gold: a hit
  from the gold filing with at least half of its word 5-grams on the evidence page, or holding at
  least half of the page's; see ``tasks/evaluation/gold.py``);
* **answer-in-context**: the reference answer string occurs in the context — FinanceBench's
  answers are long-form sentences, so no question qualifies (reported as the applicable count);
* **evidence-in-context**: share of the gold evidence passage's word 5-grams present in the
  joined retrieved context (the retrieval-only stand-in for "the context holds the answer").

Rows ``…·β5`` rerun the segments systems on the same builds with the cosine relevance calibrated
by Beta(5, 5) instead of dsRAG's Beta(0.4, 0.4) (``--beta``; a sensitivity check of
``rerank.a/b``). ``search ms`` is the median search time without the question's embedding, on a shared, loaded 2-core box.

Usage: ``python benchmarks/segments_financebench.py --out /tmp/fb_seg`` (``--reuse`` re-scores
existing runs). Writes ``benchmarks/results/segments_financebench.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, git_commit, machine_line, md_table, setup_env  # noqa: E402

SYSTEMS = ("flat", "collapsed", "segments", "segments-precision", "segments-find_all")
BUDGETS = (500, 1000, 2000)
VARIANTS = {"plain": "sections:\n  strategy: none\n", "headers": "sections:\n  strategy: structural\n"}


def run_eval(out: Path, variant: str, reuse: bool) -> float:
    d = out / variant
    if reuse and (d / "results.parquet").exists():
        return 0.0
    d.mkdir(parents=True, exist_ok=True)
    cfg = out / f"{variant}.yaml"
    cfg.write_text(VARIANTS[variant])
    t0 = time.perf_counter()
    cmd = ["arborag", "eval", "financebench", "--out", str(d), "--strategies", "sentence", "--systems", ",".join(SYSTEMS),
           "--budgets", ",".join(map(str, BUDGETS)), "--no-prefect", "--no-progress", "--config", str(cfg)]
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def extra_calibration(out: Path, a: float, b: float) -> None:
    """Segments again over the same two builds with the cosine relevance calibrated by
    Beta(a, b) instead of dsRAG's Beta(0.4, 0.4); scored like the eval; written to
    ``OUT/<variant>/extra_results.parquet`` and ``extra_hits.parquet`` (systems suffixed ``·β{a:g}``)."""
    extra_run(out, f"·β{a:g}", {"rerank": {"a": a, "b": b}}, [s for s in SYSTEMS if s.startswith("segments")], tuple(VARIANTS))


def extra_run(out: Path, suffix: str, overrides: dict, systems: list[str], variants: tuple[str, ...], tag: str = "extra") -> None:
    """``systems`` again over the builds of ``variants`` with config ``overrides`` (e.g. another
    calibration or reranker), scored like the eval; systems suffixed ``suffix``; written to
    ``OUT/<variant>/<tag>_results.parquet`` and ``<tag>_hits.parquet``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from arborag.config import load_config
    from arborag.query import open_index
    from arborag.storage.corpus import Corpus
    from arborag.tasks.evaluation.datasets import read_prepared
    from arborag.tasks.evaluation.gold import evidence_page_texts, resolve_gold
    from arborag.tasks.evaluation.retrieve import run_queries
    from arborag.tasks.evaluation.score import score_hits

    for variant in variants:
        root = out / variant
        prepared = read_prepared(root / "dataset")
        corpus_dir = root / "corpora" / "sentence"
        cfg = load_config(out / f"{variant}.yaml", overrides=overrides)
        index = open_index(corpus_dir, config=cfg)
        hits = run_queries(index, prepared.queries(), "sentence", systems, BUDGETS, k=cfg.query.k)
        hits = hits.set_column(hits.schema.get_field_index("system"), "system",
                               pa.array([f"{s}{suffix}" for s in hits.column("system").to_pylist()]))
        documents = Corpus(corpus_dir).read("documents")
        gold = resolve_gold(prepared.evidence(), documents)
        pages = evidence_page_texts(prepared.evidence(), documents, gold)
        res = score_hits(hits, prepared.queries(), {"sentence": gold}, dataset=prepared.name, match=prepared.match,
                         gold_pages={"sentence": pages})
        pq.write_table(hits, root / f"{tag}_hits.parquet")
        pq.write_table(res, root / f"{tag}_results.parquet")


def evidence_coverage(context: str, evidence: str, n: int = 5) -> float:
    """Share of the evidence's word n-grams that occur in the context."""
    from arborag.tasks.evaluation.metrics import tokens

    ev, ctx = tokens(evidence), tokens(context)
    if not ev:
        return 0.0
    m = min(n, len(ev))
    grams = {tuple(ev[i : i + m]) for i in range(len(ev) - m + 1)}
    have = {tuple(ctx[i : i + m]) for i in range(len(ctx) - m + 1)}
    return len(grams & have) / len(grams)


def table_rows(out: Path) -> tuple[list[list[str]], dict]:
    import polars as pl

    rows, raw = [], {}
    queries = pl.read_parquet(out / "plain" / "dataset" / "queries.parquet").select("qid", "gold_texts")
    for variant in VARIANTS:
        res = pl.read_parquet(out / variant / "results.parquet")
        hits = pl.read_parquet(out / variant / "hits" / "sentence.parquet")
        for tag in ("extra", "llm"):
            if (out / variant / f"{tag}_results.parquet").exists():
                res = pl.concat([res, pl.read_parquet(out / variant / f"{tag}_results.parquet")], how="vertical_relaxed")
                hits = pl.concat([hits, pl.read_parquet(out / variant / f"{tag}_hits.parquet")], how="vertical_relaxed")
        hits = hits.join(queries, on="qid")
        cov = hits.select(
            "system", "budget", "qid",
            pl.struct("texts", "gold_texts").map_elements(
                lambda r: max((evidence_coverage(" ".join(r["texts"] or []), g) for g in (r["gold_texts"] or [])), default=0.0),
                return_dtype=pl.Float64,
            ).alias("ev_cov"),
        )
        agg = (
            res.join(cov, on=["system", "budget", "qid"], how="left")
            .group_by("system", "budget")
            .agg(
                pl.col("recall_at_budget").mean().alias("page_hit"),
                pl.col("answer_hit").drop_nulls().len().alias("n_answer"),
                pl.col("answer_hit").mean().alias("answer_hit"),
                pl.col("ev_cov").mean().alias("ev_cov"),
                pl.col("context_tokens").mean().alias("tokens"),
                pl.col("n_hits").mean().alias("n_hits"),
                (pl.col("latency_ms") - pl.col("embed_ms").fill_null(0)).median().alias("search_ms"),
                pl.len().alias("n"),
            )
        )
        for r in agg.iter_rows(named=True):
            raw[(variant, r["system"], r["budget"])] = r
    for budget in BUDGETS:
        for variant in VARIANTS:
            base = raw.get((variant, "flat", budget))
            for system in [*SYSTEMS, *sorted({k[1] for k in raw if "·" in k[1] and k[0] == variant})]:
                r = raw.get((variant, system, budget))
                if r is None:
                    continue
                ratio = (r["page_hit"] / base["page_hit"]) if base and base["page_hit"] else None
                ans = "n/a (0 q)" if not r["n_answer"] else f"{r['answer_hit']:.2f} ({r['n_answer']} q)"
                rows.append([f"{budget:,}", variant, system, f"{r['page_hit']:.2f}", "" if ratio is None else f"{ratio:.2f}×",
                             f"{r['ev_cov']:.2f}", ans, f"{r['tokens']:.0f}", f"{r['n_hits']:.1f}", f"{r['search_ms']:.1f}"])
    return rows, raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="working folder for the two eval runs")
    ap.add_argument("--reuse", action="store_true", help="re-score existing runs instead of running them again")
    ap.add_argument("--beta", type=float, default=5.0,
                    help="also run segments with the cosine calibrated by Beta(x, x) instead of dsRAG's 0.4/0.4 (0 = skip)")
    ap.add_argument("--llm-url", default=None, help="also run segments and rerank with the LLM reranker of this "
                    "OpenAI-compatible endpoint (e.g. http://127.0.0.1:8011/v1, scripts/local_llm.sh) on the headers build")
    ap.add_argument("--llm-model", default="local", help="model name sent to --llm-url")
    ap.add_argument("--llm-top-n", type=int, default=20, help="candidates the LLM rates per question")
    args = ap.parse_args()
    setup_env()
    before = machine_line()
    secs = {v: run_eval(args.out, v, args.reuse) for v in VARIANTS}
    if args.beta:
        extra_calibration(args.out, args.beta, args.beta)
    if args.llm_url:
        extra_run(args.out, "·llm", {"rerank": {"kind": "llm", "top_n": args.llm_top_n},
                                      "summarize": {"base_url": args.llm_url, "llm_model": args.llm_model, "timeout_s": 120.0}},
                  ["segments", "rerank"], ("headers",), tag="llm")
    rows, _ = table_rows(args.out)
    header = ["budget", "build", "system", "page hit", "× flat", "evidence-in-context", "answer-in-context", "tokens", "hits", "search ms"]
    report = "\n".join([
        "# Segments vs top-k vs collapsed on FinanceBench (with and without headers)",
        "",
        f"Commit {git_commit()}. {before}",
        "Eval wall time: " + ", ".join(f"{v} {s:.0f} s" for v, s in secs.items()) + " (0 = reused).",
        "",
        (__doc__ or "").split("\n\n", 1)[1].split("Usage:")[0].strip(),
        "",
        md_table(header, rows),
        "",
    ])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "segments_financebench.md").write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
