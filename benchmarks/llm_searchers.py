"""LLM searchers vs hybrid on HotpotQA: gold-evidence recall within a token budget, answer F1
through ``ask``'s answering step, time and tokens per question.

    ARBORAG_LLM_BASE_URL=http://127.0.0.1:8011/v1 ARBORAG_LLM_MODEL=qwen2.5-coder-1.5b-instruct \\
        python benchmarks/llm_searchers.py --limit 20 --systems hybrid,multi,level

For the first ``--limit`` questions of ../shared/data/hotpotqa, the corpus of their paragraphs
(the eval's own adapter, ``arborag.tasks.evaluation.datasets.load_hotpotqa``) is built once with the
default pipeline (``arborag build --no-prefect``; reused when already published), then every
question runs through every system in turn (question-major, so a run cut short stays balanced):

* **retrieval** — ``index.search(mode=system, budget=--budget)``; gold-evidence recall: the
  share of the question's supporting-fact paragraphs covered by the retrieved context (a leaf
  by its document, a summary node by text overlap ≥ 0.5 — the eval's ``evidence_matches``);
* **answer** — the retrieved passages through ``arborag.query.answer.answer_from_sources``
  (the LLM step of ``arborag ask``: numbered passages, prompt ``answer-with-citations``), token
  F1 and EM of its short answer (or answer) against the gold answer (SQuAD normalization);
* **cost** — seconds and LLM tokens (in/out) of retrieval and of answering, per question.

The LLM client has no call cache here, so every number is a real call. ``multi`` and
``level`` get the same client. Without ARBORAG_LLM_BASE_URL the LLM systems run their offline
plans and answers are skipped. Results (per question and the summary table, with ratios against
hybrid measured in the same run) go to ``benchmarks/results/llm_searchers.json``, written after
every question.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, REPO, RESULTS, git_commit, machine_line, md_table, setup_env  # noqa: E402


def build_corpus(limit: int, corpus: Path) -> tuple[Any, Path]:
    from arborag.tasks.evaluation.datasets import load_hotpotqa

    ds = load_hotpotqa(DATA, limit=limit)
    if not (corpus / "manifest.json").exists():  # a published build is reused
        src = corpus.parent / (corpus.name + "_src")
        src.mkdir(parents=True, exist_ok=True)
        for f in ds.files:
            (src / f.name).write_text(f.text, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ARBORAG_")}  # the default (extractive) build
        env.setdefault("OMP_NUM_THREADS", "2")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "arborag.cli.app", "build", str(src), "--corpus", str(corpus), "--no-prefect"],
                       check=True, env=env, cwd=str(REPO))
        print(f"built {len(ds.files)} paragraphs in {time.perf_counter() - t0:.0f} s", flush=True)
    return ds, corpus


def gold_items(index, ds) -> dict[str, list[Any]]:
    """The eval's own gold resolution (evidence file/title/text -> doc_ids of the built corpus)."""
    from arborag.tasks.evaluation.gold import resolve_gold
    from arborag.tasks.evaluation.metrics import GoldItem

    doc_ids = resolve_gold(ds.evidence, index.documents())
    q = ds.queries
    out = {}
    for qid, gids, gtexts in zip(q.column("qid").to_pylist(), q.column("gold_ids").to_pylist(), q.column("gold_texts").to_pylist()):
        out[qid] = [GoldItem(g, doc_ids.get(g, frozenset()), t) for g, t in zip(gids, gtexts)]
    return out


def score_answer(row: dict[str, Any]) -> None:
    """Token F1 / EM of the answer text against the gold answers (a refusal scores 0); the
    model's own "short" field is scored too (``f1_short``) — the small model often fills it
    with something else ("see passages [1] and [2]")."""
    from arborag.tasks.evaluation.metrics import exact_match, token_f1

    if "status" not in row:
        return
    answered = row["status"] == "answered"
    pred = (row.get("answer") or "") if answered else ""
    row["f1"], row["em"] = token_f1(pred, row["answers"]), exact_match(pred, row["answers"])
    row["f1_short"] = token_f1(row.get("short") or "", row["answers"]) if answered else 0.0


PREFIX_BUDGETS = (500, 1000)


def _prefix(hits, budget: int) -> int:
    """How many of the ranked hits fit in ``budget`` tokens (the head of the best-first fill)."""
    used = 0
    for i, h in enumerate(hits):
        used += h.n_tokens
        if used > budget:
            return i
    return len(hits)


def retrieval_tokens(hits) -> tuple[int, int, int, str]:
    """(tokens in, tokens out, LLM calls, plan) of a mode's own LLM use, from its trace."""
    tr = getattr(hits, "trace", None)
    if tr is None:
        return 0, 0, 0, "-"
    usage = getattr(tr, "usage", None)
    if usage is not None:  # multi
        return int(usage.tokens_in), int(usage.tokens_out), int(usage.calls), str(getattr(tr, "source", "-"))
    return int(tr.tokens_in), int(tr.tokens_out), len(tr.calls), str(tr.plan)


def summarize(rows: list[dict[str, Any]], systems: list[str]) -> list[dict[str, Any]]:
    out = []
    base = {}
    for s in systems:
        rs = [r for r in rows if r["system"] == s]
        if not rs:
            continue

        def m(key, rs=rs):
            vals = [r[key] for r in rs if r.get(key) is not None]
            return statistics.fmean(vals) if vals else None

        row = {"system": s, "n": len(rs), "recall": m("recall"), "recall@500": m("recall@500"), "recall@1000": m("recall@1000"), "full_support": m("full_support"), "f1": m("f1"), "em": m("em"),
               "retrieval_s": m("retrieval_s"), "answer_s": m("answer_s"), "retrieval_tokens_in": m("retrieval_tokens_in"),
               "retrieval_tokens_out": m("retrieval_tokens_out"), "answer_tokens_in": m("answer_tokens_in"),
               "answer_tokens_out": m("answer_tokens_out"), "llm_calls": m("retrieval_llm_calls"),
               "context_tokens": m("context_tokens"), "answered": (sum(1 for r in rs if r.get("status") == "answered") / len(rs)) if any("status" in r for r in rs) else None, "fallbacks": sum(1 for r in rs if r.get("llm_errors"))}
        if s == "hybrid":
            base = row
        out.append(row)
    for row in out:
        for key in ("recall", "f1"):
            b = base.get(key)
            row[f"{key}_vs_hybrid"] = (row[key] / b) if (b and row[key] is not None) else None
    return out


def table(summary: list[dict[str, Any]]) -> str:
    def f(x, nd=3):
        return "–" if x is None else f"{x:.{nd}f}"

    rows = [[s["system"], s["n"], f(s.get("recall@500")), f(s.get("recall@1000")), f(s["recall"]), f(s["recall_vs_hybrid"], 2) + "×", f(s["full_support"], 2), f(s["f1"]),
             f(s["em"], 2), f(s.get("answered"), 2), f(s["retrieval_s"], 1), f(s["answer_s"], 1), f(s["llm_calls"], 1),
             f"{f(s['retrieval_tokens_in'], 0)} / {f(s['retrieval_tokens_out'], 0)}",
             f"{f(s['answer_tokens_in'], 0)} / {f(s['answer_tokens_out'], 0)}"] for s in summary]
    return md_table(["system", "questions", "gold recall @500 (head)", "@1000 (head)", "gold recall @budget", "vs hybrid", "all gold found", "answer F1", "EM", "answered (not refused)",
                     "retrieval s/q", "answer s/q", "LLM calls/q (retrieval)", "retrieval tokens in/out per q",
                     "answer tokens in/out per q"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=20, help="first N HotpotQA questions (default 20)")
    ap.add_argument("--budget", type=int, default=2000, help="token budget of the retrieved context (default 2000)")
    ap.add_argument("--systems", default="hybrid,multi,level")
    ap.add_argument("--corpus", type=Path, default=Path("/tmp/arborag_bench_llm/hotpot"), help="built corpus (reused)")
    ap.add_argument("--no-answer", action="store_true", help="retrieval only")
    ap.add_argument("--answer-max-tokens", type=int, default=120)
    ap.add_argument("--timeout", type=float, default=600.0, help="LLM request timeout (s)")
    ap.add_argument("--level-max-rounds", type=int, default=None)
    ap.add_argument("--level-sparse-rounds", type=int, default=None)
    ap.add_argument("--level-dense-rounds", type=int, default=None)
    ap.add_argument("--answer-budget", type=int, default=None,
                    help="answer from the head of the retrieved context within this many tokens (default: all of it)")
    ap.add_argument("--show", type=int, default=None, help="level: hits shown to the LLM per feedback step")
    ap.add_argument("--time-limit", type=float, default=None, help="start no new question after this many seconds")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out and skip their questions")
    ap.add_argument("--rescore", action="store_true", help="only recompute the metrics and table of --out")
    ap.add_argument("--out", type=Path, default=RESULTS / "llm_searchers.json")
    args = ap.parse_args()
    setup_env()
    if args.rescore:
        report = json.loads(args.out.read_text(encoding="utf-8"))
        for row in report["rows"]:
            score_answer(row)
        report["summary"] = summarize(report["rows"], report["systems"])
        report["table"] = table(report["summary"])
        args.out.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
        print(report["table"])
        return

    from arborag.config import load_config
    from arborag.llm import LLMClient
    from arborag.query import open_index
    from arborag.query.answer import answer_from_sources, build_sources
    from arborag.tasks.evaluation.metrics import evidence_matches, full_support, recall_at

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    ds, corpus = build_corpus(args.limit, args.corpus)
    cfg = load_config()
    index = open_index(corpus, config=cfg)
    gold = gold_items(index, ds)
    base_url = os.environ.get("ARBORAG_LLM_BASE_URL")
    llm = None
    if base_url:
        llm = LLMClient(model=os.environ.get("ARBORAG_LLM_MODEL", "local"), base_url=base_url, timeout_s=args.timeout,
                        retries=1, concurrency=1)  # no cache: every call is real
    level_opts = {k: v for k, v in {"max_rounds": args.level_max_rounds, "sparse_rounds": args.level_sparse_rounds,
                                     "dense_rounds": args.level_dense_rounds, "show": args.show}.items() if v is not None}
    q = ds.queries
    questions = list(zip(q.column("qid").to_pylist(), q.column("question").to_pylist(), q.column("answers").to_pylist()))
    rows: list[dict[str, Any]] = []
    if args.resume and args.out.exists():
        rows = json.loads(args.out.read_text(encoding="utf-8"))["rows"]
        done = {r["qid"] for r in rows}
        questions = [x for x in questions if x[0] not in done]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(f"{len(questions)} questions x {systems}; LLM: {base_url or 'none (offline plans, no answers)'}", flush=True)
    t_start = time.perf_counter()
    for i, (qid, question, answers) in enumerate(questions, 1):
        if args.time_limit is not None and time.perf_counter() - t_start > args.time_limit:
            print(f"time limit reached after {i - 1} questions", flush=True)
            break
        for system in systems:
            opts: dict[str, Any] = {}
            if system in ("multi", "level"):
                opts["llm"] = llm if llm is not None else (False if system == "level" else None)
                if system == "level":
                    opts.update(level_opts)
                if opts.get("llm") is None:
                    opts.pop("llm")
            t0 = time.perf_counter()
            hits = index.search(question, mode=system, budget=args.budget, **opts)
            r_s = time.perf_counter() - t0
            t_in, t_out, calls, plan = retrieval_tokens(hits)
            matches = evidence_matches(hits, gold[qid], match="doc")
            row: dict[str, Any] = {
                "qid": qid, "question": question, "answers": answers, "system": system, "plan": plan,
                "recall": recall_at(matches, len(gold[qid])), "full_support": full_support(matches, len(gold[qid])),
                "context_tokens": sum(h.n_tokens for h in hits), "n_hits": len(hits),
                **{f"recall@{b}": recall_at(matches[: _prefix(hits, b)], len(gold[qid])) for b in PREFIX_BUDGETS if b < args.budget},
                "retrieval_s": r_s, "retrieval_tokens_in": t_in, "retrieval_tokens_out": t_out, "retrieval_llm_calls": calls,
                "llm_errors": [f"{c.step}: {c.error}" for c in getattr(getattr(hits, "trace", None), "calls", []) if c.error]
                if system == "level" else [],
            }
            if system == "level":
                tr = hits.trace
                row["sub_questions"] = [s.text for s in tr.sub_questions]
                row["rounds"] = tr.rounds
            if llm is not None and not args.no_answer:
                t1 = time.perf_counter()
                given = hits if args.answer_budget is None else hits[: _prefix(hits, args.answer_budget)]
                ans = answer_from_sources(llm, question, build_sources(index, given), mode=system, max_tokens=args.answer_max_tokens)
                row["answer_s"] = time.perf_counter() - t1
                row.update(answer=ans.answer, short=ans.short, status=ans.status, answer_tokens_in=ans.usage.tokens_in,
                           answer_tokens_out=ans.usage.tokens_out)
                score_answer(row)
            rows.append(row)
            print(f"[{i}/{len(questions)}] {system:7s} recall={row['recall']:.2f} f1={row.get('f1', float('nan')):.2f} "
                  f"retrieval {r_s:.1f}s ({calls} calls, {t_in}/{t_out} tok) answer {row.get('answer_s', 0):.1f}s", flush=True)
        summary = summarize(rows, systems)
        report = {"benchmark": "llm_searchers", "started": started, "updated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                  "commit": git_commit(), "machine": machine_line(), "llm": {"base_url": base_url, "model": getattr(llm, "model", None)},
                  "dataset": "hotpotqa", "questions_done": i, "limit": args.limit, "budget": args.budget, "systems": systems,
                  "level_options": level_opts, "answer_budget": args.answer_budget, "time_limit": args.time_limit, "summary": summary, "table": table(summary), "rows": rows}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
        tmp.replace(args.out)
    print(table(summarize(rows, systems)))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
