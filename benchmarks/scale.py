"""Scale: per-stage time and peak RSS of the build at 250k / 1M (/ 10M) tokens, and embedding +
summarization throughput with 1 vs 2 Dask workers (Dask through Prefect).

Usage (the box is shared: run it alone, niced, with one BLAS/OMP thread)::

    OMP_NUM_THREADS=1 nice -n 10 timeout 4h python benchmarks/scale.py --sizes 250000,1000000
    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/scale.py --dask-only      # 1 vs 2 workers only
    python benchmarks/scale.py --render-only                                  # re-render scale.md

**Sizes.** Each size is built by ``benchmarks/build_scaling.py``'s worker in a fresh process (same
corpus construction: real shared-data text, variants beyond ~190k distinct tokens; warm-up of the
model and numba excluded and reported; extractive summaries; ``run_build(..., use_prefect=False)``;
then the leaf embedding alone as the floor). The worker's **peak RSS** is its ``ru_maxrss`` from
``os.wait4`` (the whole process: model, imports, the build and the floor). Targets:
peak <= 4 GiB at 1M tokens; time(4N)/time(N) <= 4.4; build / leaf-embedding floor <= 1.5x at 1M.

**Dask.** One Prefect flow per worker count on a ``DaskTaskRunner`` (LocalCluster on 127.0.0.1,
single-threaded worker processes): the flow embeds a fixed set of leaf texts through
:func:`arborag.flows.common.prefect_map` (the build's fan-out: groups of ``batch_size * 8`` texts)
and summarizes a fixed set of clusters (chunks of 64 clusters, extractive). Each worker count is
timed twice; the first pass includes the workers' model load and is reported apart.

Writes ``benchmarks/results/scale.json`` and ``benchmarks/results/scale.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, fmt_ratio, git_commit, machine_line, md_table, setup_env  # noqa: E402

import build_scaling as bs  # noqa: E402

OUT_JSON = RESULTS / "scale.json"
OUT_MD = RESULTS / "scale.md"
RSS_TARGET_GIB = 4.0


def save(**items: Any) -> dict[str, Any]:
    """Merge ``items`` into scale.json (re-read first: the modes may run as separate processes)."""
    data: dict[str, Any] = json.loads(OUT_JSON.read_text()) if OUT_JSON.exists() else {}
    data.update(items)
    OUT_JSON.write_text(json.dumps(data, indent=1, default=str))
    return data


def run_size(tokens: int, index: int, work: Path, threads: str, *, floor: bool = True) -> dict[str, Any]:
    docs = work / f"docs-{tokens}"
    t0 = time.perf_counter()
    info = bs.make_corpus(tokens, index, docs)
    gen_s = time.perf_counter() - t0
    out_json = work / f"result-{tokens}.json"
    out_json.unlink(missing_ok=True)
    ns = argparse.Namespace(wait_load=99.0, wait_max=0.0, threads=threads)
    cmd = bs._worker_cmd(docs, work / f"corpus-{tokens}", out_json, ns, floor=floor)
    load1 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=str(Path(__file__).resolve().parents[1]))
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0 or not out_json.exists():
        return {"tokens": tokens, "failed": True, "exit": status, "wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024, "corpus": info}
    res = json.loads(out_json.read_text(encoding="utf-8"))
    res.update(tokens=tokens, corpus=info, corpus_gen_s=gen_s, process_wall_s=wall, load1_start=load1,
               peak_rss_mib=usage.ru_maxrss / 1024)
    return res


# -- Dask throughput --------------------------------------------------------------------------------
def dask_flow_run(n_workers: int, texts: list[str], clusters: list[list[str]]) -> dict[str, Any]:
    from prefect import flow

    from arborag.config import ArboragConfig
    from arborag.embed.model import Embedder
    from arborag.flows.common import dask_task_runner, prefect_map
    from arborag.tasks.summarize.extractive import ExtractiveSummarizer
    from arborag.tasks.tree.build import _summarize_chunk, SUMMARY_FANOUT_CHUNK

    cfg = ArboragConfig()

    @flow(name="arborag-scale-dask", task_runner=dask_task_runner(workers=n_workers))
    def bench() -> dict[str, Any]:
        fan = prefect_map("bench")
        emb = Embedder(cfg.embed, map=fan)
        summ = ExtractiveSummarizer(cfg.summarize)
        out: dict[str, Any] = {}
        for rnd in ("first", "second"):
            t0 = time.perf_counter()
            v = emb.embed(texts)
            t_emb = time.perf_counter() - t0
            t0 = time.perf_counter()
            chunks = [(summ, clusters[i : i + SUMMARY_FANOUT_CHUNK]) for i in range(0, len(clusters), SUMMARY_FANOUT_CHUNK)]
            n = sum(len(r) for r in fan(_summarize_chunk, chunks))
            t_sum = time.perf_counter() - t0
            out[rnd] = {"embed_s": t_emb, "texts": int(v.shape[0]), "summarize_s": t_sum, "clusters": n}
        return out

    t0 = time.perf_counter()
    res = bench()
    res["flow_wall_s"] = time.perf_counter() - t0
    res["workers"] = n_workers
    return res


def run_dask(n_texts: int, n_clusters: int) -> dict[str, Any]:
    import random

    from _common import hotpot_paragraphs

    paras = [" ".join(p) if isinstance(p, list) else str(p) for _, p in hotpot_paragraphs()]
    paras = [p for p in paras if len(p) > 200]
    texts = paras[:n_texts]
    rng = random.Random(0)
    clusters = [rng.sample(paras[: 4 * n_clusters], 6) for _ in range(n_clusters)]
    out = {"texts": len(texts), "clusters": len(clusters), "load1_start": os.getloadavg()[0], "runs": []}
    for w in (1, 2):
        out["runs"].append(dask_flow_run(w, texts, clusters))
    return out


# -- sampled GMM: how much does the tree's first level change? ----------------------------------------
def gmm_check(corpus: Path, sample: int) -> dict[str, Any]:
    """Cluster the published leaves of ``corpus`` with the full GMM fit and with a fit on ``sample``
    points (predict_proba for the rest); compare the first summary level's clusters."""
    import numpy as np
    import pyarrow as pa
    from sklearn.metrics import adjusted_rand_score

    from arborag.config import ClusterConfig
    from arborag.storage.arrays import arrow_to_vectors
    from arborag.storage.corpus import Corpus
    from arborag.tasks.cluster import fit as clustering

    snap = Corpus(corpus).published_dir()
    t = pa.ipc.open_file(pa.memory_map(str(snap / "vectors.lance" / "nodes.arrow"), "r")).read_all()
    lv = np.asarray(t.column("level").to_numpy())
    x = arrow_to_vectors(t.column("vector"))[lv == 0]
    tok = np.asarray(t.column("n_tokens").to_numpy())[lv == 0]
    clustering.warm_up()
    out: dict[str, Any] = {"n": int(len(x)), "sample": sample}
    labels = []
    for name, cfg in (("full", ClusterConfig(gmm_max_fit=10**9)), ("sampled", ClusterConfig(gmm_max_fit=sample))):
        t0 = time.perf_counter()
        st = clustering.ClusterStats()
        cl = clustering.cluster_level(x, tok, cfg, stats=st)
        best = np.full(len(x), -1)
        best_p = np.zeros(len(x))
        for j, c in enumerate(cl):
            for r, p in c:
                if p > best_p[r]:
                    best[r], best_p[r] = j, p
        labels.append(best)
        out[name] = {"seconds": time.perf_counter() - t0, "clusters": len(cl), "global_k": st.global_k, "gmm_s": st.gmm_s}
    out["ari"] = float(adjusted_rand_score(labels[0], labels[1]))
    return out


# -- report -------------------------------------------------------------------------------------------
def render(data: dict[str, Any]) -> str:
    lines = ["# Scale: build time and memory by corpus size; Dask fan-out 1 vs 2 workers", ""]
    lines.append(f"Command: `{data.get('command', 'python benchmarks/scale.py')}` (run {data.get('date', '?')}).")
    lines.append("")
    lines.append(f"- Machine: {data.get('machine', '?')}. **The box was loaded** by other jobs "
                 "throughout (load average at the start of each run in the tables); times are upper bounds.")
    lines.append(f"- commit: {data.get('commit', '?')}. Default config (sentence leaves <= 100 tokens, bf16 MiniLM, "
                 "extractive summaries, embedded tantivy BM25, UMAP n_neighbors = min(sqrt(n-1), 100), GMM fit on <= 20,000 points).")
    sizes = [r for r in data.get("sizes", [])]
    if sizes:
        lines += ["", "## Per size (fresh process per size; warm-up excluded from build time)", ""]
        rows = []
        base = None
        for r in sizes:
            if r.get("failed"):
                rows.append([f"{r['tokens']:,}", "failed", "", "", "", "", "", f"{r['peak_rss_mib'] / 1024:.2f}", "", ""])
                continue
            b = r["build"]["wall"]
            base = base or (r["tokens"], b)
            f = (r.get("floor") or {}).get("wall")
            rows.append([
                f"{r['corpus']['tokens']:,}", f"{r['leaves']:,}", ", ".join(f"{v}" for k, v in sorted(r["levels"].items()) if k != "0"),
                f"{b:.0f}", fmt_ratio(b / base[1]) + f" (size {r['tokens'] / base[0]:.0f}x)",
                f"{f:.0f}" if f else "", fmt_ratio(b / f) if f else "", f"{r['peak_rss_mib'] / 1024:.2f}",
                f"{r.get('load1_start', 0):.1f}", f"{r.get('warmup_s', 0):.0f}",
            ])
        lines.append(md_table(["tokens", "leaves", "summaries per level", "build s", "time vs smallest", "leaf embedding alone s",
                               "build / floor", "peak RSS GiB", "load at start", "warm-up s (excluded)"], rows))
        lines += ["", "### Seconds per stage", ""]
        srows = []
        for r in sizes:
            if r.get("failed"):
                continue
            st = r["stages"]
            srows.append([f"{r['corpus']['tokens']:,}"] + [f"{st.get(k, 0.0):.1f}" for k in bs.STAGE_ORDER])
        lines.append(md_table(["tokens", *bs.STAGE_ORDER], srows))
    dk = data.get("dask")
    if dk:
        lines += ["", "## Dask through Prefect: 1 vs 2 workers (LocalCluster on 127.0.0.1, 1 thread per worker)", ""]
        lines.append(f"{dk['texts']:,} leaf texts embedded (groups of 256 as Prefect tasks) and {dk['clusters']:,} clusters "
                     f"summarized (chunks of 64, extractive); load at start {dk['load1_start']:.1f}.")
        lines.append("")
        rows = []
        for r in dk["runs"]:
            s = r["second"]
            rows.append([str(r["workers"]), f"{r['first']['embed_s']:.1f}", f"{s['embed_s']:.1f}", f"{s['texts'] / s['embed_s']:.1f}",
                         f"{s['summarize_s']:.2f}", f"{s['clusters'] / s['summarize_s']:.0f}", f"{r['flow_wall_s']:.0f}"])
        lines.append(md_table(["workers", "embed s (1st pass, incl. model load)", "embed s (2nd)", "texts/s",
                               "summarize s (2nd)", "clusters/s", "flow wall s (cluster start + both passes)"], rows))
        if len(dk["runs"]) == 2:
            a, b = dk["runs"][0]["second"], dk["runs"][1]["second"]
            lines.append("")
            lines.append(f"2 workers vs 1: embedding {fmt_ratio(a['embed_s'] / b['embed_s'])} the throughput, summarization "
                         f"{fmt_ratio(a['summarize_s'] / b['summarize_s'])}. On 2 shared cores a second worker can at best double "
                         "throughput and only while other jobs leave a core free; the point measured here is that the "
                         "fan-out runs and adds little overhead, not speed-up on this box.")
    g = data.get("gmm_check")
    if g:
        lines += ["", "## GMM on a sample vs the full fit (first summary level of a built corpus)", ""]
        lines.append(md_table(["leaves", "GMM fit on", "clusters (full / sampled)", "global k (full / sampled)",
                               "GMM s (full / sampled)", "level time s (full / sampled)", "adjusted Rand index of the argmax cluster"],
                              [[f"{g['n']:,}", f"{g['sample']:,} points ({g['sample'] / g['n']:.0%})",
                                f"{g['full']['clusters']} / {g['sampled']['clusters']}", f"{g['full']['global_k']} / {g['sampled']['global_k']}",
                                f"{g['full']['gmm_s']:.1f} / {g['sampled']['gmm_s']:.1f}", f"{g['full']['seconds']:.1f} / {g['sampled']['seconds']:.1f}",
                                f"{g['ari']:.3f}"]]))
    if data.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in data["notes"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    global OUT_JSON, OUT_MD
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="250000,1000000", help="token counts, comma-separated")
    ap.add_argument("--threads", default="1", help="torch intra-op threads of the build worker")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/arborag-scale"))
    ap.add_argument("--dask-only", action="store_true")
    ap.add_argument("--no-dask", action="store_true")
    ap.add_argument("--dask-texts", type=int, default=2000)
    ap.add_argument("--dask-clusters", type=int, default=512)
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--gmm-check", type=Path, default=None, help="a built corpus: compare its first level with a sampled GMM fit")
    ap.add_argument("--gmm-sample", type=int, default=800)
    ap.add_argument("--floor-max", type=int, default=10**12, help="measure the leaf-embedding floor only up to this size")
    ap.add_argument("--size-index", type=int, default=0, help="corpus variant seed offset (build_scaling's size index)")
    ap.add_argument("--out", type=Path, default=RESULTS / "scale.md", help="the report; the .json (read and merged into by every mode) is beside it")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (one 3k-token size, no Dask)")
    args = ap.parse_args()
    OUT_MD, OUT_JSON = args.out, args.out.with_suffix(".json")
    OUT_MD.parent.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        args.sizes, args.no_dask = "3000", True
    setup_env()
    data: dict[str, Any] = json.loads(OUT_JSON.read_text()) if OUT_JSON.exists() else {}
    if args.gmm_check is not None:
        data = save(gmm_check=gmm_check(args.gmm_check, args.gmm_sample))
        args.render_only = True
    if not args.render_only:
        save(command="OMP_NUM_THREADS=1 nice python benchmarks/scale.py " + " ".join(sys.argv[1:]),
             date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), machine=machine_line(), commit=git_commit())
        if not args.dask_only:
            args.workdir.mkdir(parents=True, exist_ok=True)
            for i, tokens in enumerate(int(s) for s in args.sizes.split(",")):
                print(f"size {tokens:,} ...", flush=True)
                r = run_size(tokens, i + args.size_index, args.workdir, args.threads, floor=tokens <= args.floor_max)
                old = [x for x in (json.loads(OUT_JSON.read_text()).get("sizes") or []) if x.get("tokens") != tokens]
                save(sizes=sorted(old + [r], key=lambda x: x["tokens"]))
                print(f"  peak RSS {r['peak_rss_mib']:.0f} MiB; build {r.get('build', {}).get('wall')}", flush=True)
        if not args.no_dask:
            save(dask=run_dask(args.dask_texts, args.dask_clusters))
        data = json.loads(OUT_JSON.read_text())
    OUT_MD.write_text(render(data), encoding="utf-8")
    print(OUT_MD.read_text())


if __name__ == "__main__":
    main()
