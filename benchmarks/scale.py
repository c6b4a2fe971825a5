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

**Query at scale** (``--synthetic``)::

    OMP_NUM_THREADS=1 nice python benchmarks/scale.py --synthetic --leaves 100000 --workdir /tmp/arborag-scale
    OMP_NUM_THREADS=1 nice python benchmarks/scale.py --synthetic --leaves 100000 --ann-min-rows 100000000  # exact, to compare
    python benchmarks/scale.py --smoke --synthetic --workdir /tmp/s --out /tmp/s/scale.md                   # a tiny check run

**A cold build of ~N leaves of real text** (``--build-leaves N``, :mod:`build_scale`): the CLI build
against the embedding floor of the same texts, peak RSS of its process tree; ``build_scale.md``
beside ``--out``; the last stdout line holds ``leaves, build_s, floor_s, peak_rss_mib``::

    OMP_NUM_THREADS=1 nice python benchmarks/scale.py --build-leaves 100000 --workdir /tmp/arborag-scale

publishes a snapshot of N synthetic leaves (:func:`synthetic_snapshot`: clustered vectors, no
embedding; HotpotQA sentences as texts; titled documents and their links; BM25; the vector table
as a build writes it, with its ANN index from ``query.ann_min_rows`` rows on), then measures in a
fresh process the default mode with precomputed query vectors: p50/p95, RSS after opening and after
the queries, ANN
recall@10 against exact search, and the question's embedding time apart
(:func:`measure_query`). The last stdout line is one JSON object
(``leaves, mode, p50_ms, p95_ms, open_rss_mib, rss_after_queries_mib, ann_recall_at_10``). Targets at 10^6 leaves: p50 <=
50 ms, p95 <= 150 ms, RSS after opening <= 1 GiB, recall@10 >= 0.98.

Writes ``benchmarks/results/scale.json`` and ``benchmarks/results/scale.md`` (every section the
json holds: a ``--synthetic`` run replaces the row of its size).
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
DIM = 384  # the default embedder's width (synthetic vectors)


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


# -- query at scale: N synthetic leaves, the default mode, bounded memory ----------------------------------
QUERY_TARGETS = {"p50_ms": 50.0, "p95_ms": 150.0, "open_rss_mib": 1024.0, "ann_recall_at_10": 0.98}
LEAVES_PER_DOC = 40


def synthetic_snapshot(root: Path, leaves: int, *, seed: int = 7, ann_min_rows: int | None = None) -> dict[str, Any]:
    """Publish a snapshot of ``leaves`` synthetic leaves into corpus ``root`` (reused when its
    manifest says it holds them): clustered unit vectors (~sqrt(N) clusters, no embedding), texts
    = 3 HotpotQA sentences recombined, 40 leaves a document titled by HotpotQA titles (cycled),
    one level of summaries (one per 10 leaves), its links built by the links stage's own
    function, the embedded BM25 index, and the vector table as a build writes it (the ANN index
    from ``query.ann_min_rows`` rows on). Returns the index-time seconds per part."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from datetime import datetime, timezone

    from _common import hotpot_paragraphs

    from arborag.config import EmbedConfig, SparseConfig
    from arborag.storage.corpus import Corpus
    from arborag.storage.schemas import DOCUMENTS, EDGES, NODES
    from arborag.storage.sparse import build_sparse_index
    from arborag.storage.tables import write_table
    from arborag.storage.vectors import write_vectors
    from arborag.tasks.links import build_links

    corpus = Corpus(root)
    man = corpus.manifest()
    if man and man.get("synthetic_leaves") == leaves and man.get("ann_min_rows") == ann_min_rows:
        return dict(man.get("index_seconds") or {}, reused=True)
    corpus.ensure()
    rng = np.random.default_rng(seed)
    paras = hotpot_paragraphs()
    sents = [s for _, ss in paras for s in ss]
    titles = list(dict.fromkeys(t for t, _ in paras))
    n_sum = max(1, leaves // 10)
    n = leaves + n_sum
    secs: dict[str, float] = {}
    t0 = time.perf_counter()
    picks = rng.integers(0, len(sents), size=(n, 3))
    texts = [" ".join((sents[a], sents[b], sents[c])) for a, b, c in picks.tolist()]
    levels = np.concatenate([np.zeros(leaves, np.int32), np.ones(n_sum, np.int32)])
    ids = [f"leaf-{i:07d}" for i in range(leaves)] + [f"summ-{j:07d}" for j in range(n_sum)]  # one width, as a build's hashes
    n_docs = max(1, -(-leaves // LEAVES_PER_DOC))
    doc_names = [f"doc-{d:06d}" for d in range(n_docs)]
    leaf_doc = np.arange(leaves) // LEAVES_PER_DOC
    parent = leaves + np.arange(leaves) // 10
    doc_ids = [[doc_names[d]] for d in leaf_doc.tolist()] + [[doc_names[d]] for d in leaf_doc[::10][:n_sum].tolist()]
    nodes = pa.table({
        "node_id": ids, "level": pa.array(levels, pa.int32()), "text": pa.array(texts, pa.large_string()),
        "n_tokens": pa.array([int(len(t.split()) * 1.3) + 1 for t in texts], pa.int32()), "doc_ids": doc_ids,
        "summary_of": [None] * n, "summarizer": ["leaf"] * leaves + ["synthetic"] * n_sum,
        "summary_status": ["leaf"] * leaves + ["ok"] * n_sum, "created_by_run": ["bench"] * n,
        "keywords": [None] * leaves + [[]] * n_sum, "title": [None] * leaves + [" ".join(t.split()[:8]) for t in texts[leaves:]],
        "title_source": [None] * leaves + ["text"] * n_sum,
    }, schema=NODES)
    del texts, doc_ids
    edges = pa.table({"parent_id": pa.array(ids, pa.string()).take(pa.array(parent)), "child_id": ids[:leaves],
                      "probability": pa.array(np.ones(leaves, np.float32)), "level": pa.array(np.ones(leaves, np.int32))}, schema=EDGES)
    # clustered vectors: ~sqrt(N) cluster centres, members at cosine ~0.7-0.8 from theirs; a
    # summary is the normalised mean of its ten leaves
    n_clusters = max(2, int(leaves ** 0.5))
    centres = rng.standard_normal((n_clusters, DIM), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    vectors = np.empty((n, DIM), dtype=np.float32)
    member = rng.integers(0, n_clusters, size=leaves)
    for at in range(0, leaves, 100_000):
        part = centres[member[at:at + 100_000]] + 0.045 * rng.standard_normal((min(100_000, leaves - at), DIM), dtype=np.float32)
        vectors[at:at + part.shape[0]] = part / np.linalg.norm(part, axis=1, keepdims=True)
    sums = np.add.reduceat(vectors[:leaves], np.arange(0, leaves, 10))[:n_sum]
    vectors[leaves:] = sums / np.linalg.norm(sums, axis=1, keepdims=True)
    now = datetime.now(timezone.utc)
    documents = pa.table({
        "doc_id": doc_names, "uri": [f"synthetic://{d}" for d in doc_names], "title": [titles[d % len(titles)] for d in range(n_docs)],
        "mime": ["text/plain"] * n_docs, "n_chars": pa.array([0] * n_docs, pa.int64()), "text": pa.array([""] * n_docs, pa.large_string()),
        "metadata": [None] * n_docs, "ingested_at": pa.array([now] * n_docs, pa.timestamp("us", tz="UTC")),
        "status": ["ok"] * n_docs, "error": [None] * n_docs}, schema=DOCUMENTS)
    corpus.write("documents", documents)
    secs["generate"] = time.perf_counter() - t0
    snap = f"snap-synthetic-{leaves}"
    partial = corpus.partial_dir(snap)
    t0 = time.perf_counter()
    write_table("nodes", nodes, partial / "nodes.parquet")
    write_table("edges", edges, partial / "edges.parquet")
    write_table("documents", documents, partial / "documents.parquet")
    secs["tables"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    leaf_rows = nodes.slice(0, leaves)
    chunks = pa.table({"chunk_id": leaf_rows.column("node_id"), "doc_id": pc.list_element(leaf_rows.column("doc_ids"), 0),
                       "text": leaf_rows.column("text")})
    links = build_links(chunks, documents)
    write_table("links", links, partial / "links.parquet")
    secs["links"] = time.perf_counter() - t0
    n_links = links.num_rows
    del links, chunks, leaf_rows
    t0 = time.perf_counter()
    build_sparse_index(nodes, partial / "sparse", SparseConfig(), snapshot_id=snap)
    secs["sparse"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    stats = write_vectors(partial / "vectors.lance", nodes, vectors, ann_min_rows=ann_min_rows)
    secs["vectors"] = time.perf_counter() - t0
    corpus.publish(partial, snap, {"embed": EmbedConfig().model_dump(mode="json"), "synthetic_leaves": leaves,
                                   "ann_min_rows": ann_min_rows, "index_seconds": dict(secs, n_links=n_links),
                                   "ann_index": bool(stats["ann_index"]), "corpus_name": root.name, "counts": {"nodes": n}})
    return dict(secs, n_links=n_links, ann_index=bool(stats["ann_index"]))


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure_query(corpus_dir: Path, leaves: int, questions: int, *, ann_min_rows: int | None, embed: bool) -> dict[str, Any]:
    """In this (fresh) process: open the index, RSS after opening, then the default mode's latency
    over ``questions`` queries with precomputed query vectors (a leaf's vector plus noise, the
    text a HotpotQA question), ANN recall@10 against exact search of the leaves, and the
    question's embedding time apart."""
    import numpy as np

    from _common import hotpot_questions

    from arborag.config import load_config
    from arborag.query import open_index

    overrides: dict[str, Any] = {"embed": {"threads": 1}}
    if ann_min_rows is not None:
        overrides["query"] = {"ann_min_rows": ann_min_rows}
    cfg = load_config(overrides=overrides)
    rss0 = _rss_mib()
    t0 = time.perf_counter()
    index = open_index(corpus_dir, config=cfg)
    open_s = time.perf_counter() - t0
    rss_open = _rss_mib()
    v = index.vectors
    rng = np.random.default_rng(11)
    qs = (hotpot_questions() * (1 + questions // 100))[:questions]
    base = rng.integers(0, leaves, size=questions)
    qv = v.matrix[base] + 0.03 * rng.standard_normal((questions, v.dim)).astype(np.float32)
    qv /= np.linalg.norm(qv, axis=1, keepdims=True)
    mode = cfg.query.mode
    index.search(qs[0], vector=qv[0])  # first query: sparse index, link rows, ANN index pages
    lat = []
    for i in range(questions):
        t = time.perf_counter()
        index.search(qs[i], vector=qv[i])
        lat.append((time.perf_counter() - t) * 1000)
    rss_after = _rss_mib()
    # recall@10 of the dense leaf search against the exact top 10 (a full scan of the mapped vectors)
    recall = []
    n_recall = min(questions, 50)
    levels = np.asarray(v.levels)
    for i in range(n_recall):
        got = {r for r, _ in v.search(qv[i], k=10, levels=[0])}
        s = v.matrix @ qv[i]
        s[levels != 0] = -np.inf
        exact = set(np.argpartition(-s, 9)[:10].tolist())
        recall.append(len(got & exact) / 10)
    embed_ms = None
    if embed:
        index.embed_queries([qs[0]])  # model load
        times = []
        for q in qs[:20]:
            t = time.perf_counter()
            index.embed_queries([q])
            times.append((time.perf_counter() - t) * 1000)
        embed_ms = float(np.median(times))
    index.close()
    return {"leaves": leaves, "nodes": len(v), "mode": mode, "bounded": bool(v.bounded), "questions": questions,
            "p50_ms": float(np.percentile(lat, 50)), "p95_ms": float(np.percentile(lat, 95)),
            "open_s": open_s, "rss_before_open_mib": rss0, "open_rss_mib": rss_open, "rss_after_queries_mib": rss_after,
            "ann_recall_at_10": float(np.mean(recall)), "recall_queries": n_recall, "embed_ms_p50": embed_ms}


def run_synthetic(args: argparse.Namespace) -> dict[str, Any]:
    """Build (or reuse) the synthetic snapshot, then measure in a fresh process (its RSS is the
    reader's alone)."""
    name = f"synthetic-{args.leaves}" + ("" if args.ann_min_rows is None else f"-t{args.ann_min_rows}")
    root = args.workdir / name
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    built = synthetic_snapshot(root, args.leaves, ann_min_rows=args.ann_min_rows)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = subprocess.run([sys.executable, __file__, "--prepare-links", str(root)], capture_output=True, text=True)
    if warm.returncode != 0:
        raise SystemExit(f"writing the link rows failed:\n{warm.stderr[-3000:]}")
    link_rows_s = time.perf_counter() - t0
    cmd = [sys.executable, __file__, "--measure", str(root), "--leaves", str(args.leaves), "--questions", str(args.questions)]
    if args.ann_min_rows is not None:
        cmd += ["--ann-min-rows", str(args.ann_min_rows)]
    if args.no_embed:
        cmd.append("--no-embed")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the measurement failed:\n{done.stderr[-3000:]}")
    res = json.loads(done.stdout.strip().splitlines()[-1])
    res.update(index_seconds=built, build_s=build_s, link_rows_s=link_rows_s, load1_start=load0[0], load1_end=os.getloadavg()[0],
               ann_min_rows=args.ann_min_rows, command="OMP_NUM_THREADS=1 nice python benchmarks/scale.py " + " ".join(sys.argv[1:]),
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=git_commit())
    return res


def prepare_links(root: Path) -> None:
    """Open the snapshot as the reader will and write its link rows (an index-time cost)."""
    from arborag.config import load_config
    from arborag.query import hop, open_index

    index = open_index(root, config=load_config())
    if index.vectors.bounded:
        hop.link_rows(index)
    index.close()


def render_query(q: dict[str, Any]) -> list[str]:
    runs = q.get("runs") or []
    if not runs:
        return []
    lines = ["", "## Query at scale: synthetic leaves, the default mode, bounded memory", ""]
    lines.append("Commands (one run per row of the table, in its order):")
    lines.append("")
    for r in runs:
        lines.append(f"- `{r.get('command', q.get('command', '?'))}` (run {r.get('date', q.get('date', '?'))}; "
                     f"commit {r.get('commit', q.get('commit', '?'))})")
    lines.append("")
    lines.append(f"- Machine: {q.get('machine', '?')}. Shared with other jobs: the load average at the start/end of each "
                 "run is in the table; read the ms as upper bounds.")
    lines.append("- Snapshot: N synthetic leaves (clustered unit vectors, ~sqrt(N) clusters, no embedding; texts = 3 HotpotQA "
                 "sentences; 40 leaves a document titled by HotpotQA titles; one summary per 10 leaves; links by the links "
                 "stage's function; embedded tantivy BM25). Queries: a leaf's vector plus noise as the precomputed query "
                 "vector, a HotpotQA question as the text, budget 2,000; the question's embedding is timed apart.")
    lines.append("- `bounded`: the index was opened above `query.ann_min_rows` (IVF_PQ in LanceDB; the vectors, texts and "
                 "documents a query needs read from `nodes.arrow` by positioned reads); otherwise exact in memory. "
                 "Recall@10: the ANN leaf search against the exact top 10 (full scan), same queries. RSS after queries: "
                 "the process's resident set after the timed queries (file pages it mapped included).")
    lines.append("")
    rows = []
    for r in runs:
        rows.append([f"{r['leaves']:,}", r["mode"], "yes" if r["bounded"] else "no (exact)", f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}",
                     f"{r['ann_recall_at_10']:.3f}" if r["bounded"] else "1 (exact)", f"{r['open_rss_mib']:.0f}",
                     f"{r['rss_after_queries_mib']:.0f}", f"{r['open_s']:.2f}",
                     "" if r.get("embed_ms_p50") is None else f"{r['embed_ms_p50']:.1f}",
                     f"{r.get('load1_start', 0):.1f} / {r.get('load1_end', 0):.1f}"])
    lines.append(md_table(["leaves", "mode", "bounded", "p50 ms", "p95 ms", "ANN recall@10", "RSS after open MiB",
                           "RSS after queries MiB", "open s", "embedding p50 ms (apart)", "load start / end"], rows))
    lines += ["", "Index-time seconds (the snapshot writer; link rows: the reader's per-snapshot file, written once):", ""]
    irows = []
    for r in runs:
        s = r.get("index_seconds") or {}
        irows.append([f"{r['leaves']:,}", *(f"{s.get(k, 0):.1f}" for k in ("generate", "links", "sparse", "vectors")),
                      f"{r.get('link_rows_s', 0):.1f}", f"{s.get('n_links', 0):,}"])
    lines.append(md_table(["leaves", "generate s", "links s", "BM25 s", "vectors + ANN index s", "link rows s", "links"], irows))
    big = [r for r in runs if r["bounded"]]
    if big:
        r = max(big, key=lambda x: x["leaves"])
        checks = [("p50_ms", r["p50_ms"] <= QUERY_TARGETS["p50_ms"]), ("p95_ms", r["p95_ms"] <= QUERY_TARGETS["p95_ms"]),
                  ("open_rss_mib", r["open_rss_mib"] <= QUERY_TARGETS["open_rss_mib"]),
                  ("ann_recall_at_10", r["ann_recall_at_10"] >= QUERY_TARGETS["ann_recall_at_10"])]
        lines += ["", f"Targets at {r['leaves']:,} leaves (p50 <= 50 ms, p95 <= 150 ms, RSS after open <= 1 GiB, recall@10 >= 0.98): "
                  + ", ".join(f"{k} {'met' if ok else 'missed'}" for k, ok in checks) + "."]
    return lines


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
    lines += render_query(data.get("query") or {})
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
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (one 3k-token size, no Dask; "
                    "with --synthetic: 3,000 leaves, the ANN threshold lowered to 1,000 rows, 10 questions)")
    ap.add_argument("--synthetic", action="store_true", help="query at scale: build a snapshot of --leaves synthetic leaves and "
                    "measure the default mode (last stdout line: one JSON object)")
    ap.add_argument("--leaves", type=int, default=100_000, help="--synthetic: leaves in the snapshot")
    ap.add_argument("--questions", type=int, default=200, help="--synthetic: timed queries")
    ap.add_argument("--ann-min-rows", type=int, default=None, help="--synthetic: query.ann_min_rows for the build and the reader "
                    "(default: the config's); above the row count the index is exact")
    ap.add_argument("--build-leaves", type=int, default=None, help="a cold CLI build of ~N leaves of real text against the embedding floor "
                    "of the same texts (benchmarks/build_scale.py); writes build_scale.md beside --out; last stdout line: one JSON object")
    ap.add_argument("--no-embed", action="store_true", help="--synthetic: do not time the question's embedding")
    ap.add_argument("--measure", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--prepare-links", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.prepare_links is not None:
        setup_env()
        prepare_links(args.prepare_links)
        return
    if args.measure is not None:
        setup_env()
        print(json.dumps(measure_query(args.measure, args.leaves, args.questions, ann_min_rows=args.ann_min_rows,
                                       embed=not args.no_embed)))
        return
    if args.build_leaves is not None:
        setup_env()
        from build_scale import SMOKE_LEAVES, build_leaves
        from build_scale import render as render_build

        n = min(args.build_leaves, SMOKE_LEAVES) if args.smoke else args.build_leaves
        row = build_leaves(n, args.workdir / f"build-{n}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        (args.out.parent / "build_scale.md").write_text(render_build([row], "python benchmarks/scale.py " + " ".join(sys.argv[1:])), encoding="utf-8")
        print(json.dumps({k: row[k] for k in ("leaves", "build_s", "floor_s", "peak_rss_mib")}))
        return
    OUT_MD, OUT_JSON = args.out, args.out.with_suffix(".json")
    OUT_MD.parent.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        args.sizes, args.no_dask = "3000", True
        if args.synthetic:
            args.leaves, args.questions, args.ann_min_rows = 3000, 10, 1000
    setup_env()
    data: dict[str, Any] = json.loads(OUT_JSON.read_text()) if OUT_JSON.exists() else {}
    if args.synthetic:
        args.workdir.mkdir(parents=True, exist_ok=True)
        res = run_synthetic(args)
        old = json.loads(OUT_JSON.read_text()).get("query", {}) if OUT_JSON.exists() else {}
        runs = [r for r in old.get("runs") or [] if (r["leaves"], r.get("ann_min_rows")) != (res["leaves"], res["ann_min_rows"])]
        data = save(query={"command": "OMP_NUM_THREADS=1 nice python benchmarks/scale.py " + " ".join(sys.argv[1:]),
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine_line(),
                           "commit": git_commit(), "runs": sorted(runs + [res], key=lambda r: (r["leaves"], r.get("ann_min_rows") or 0))})
        OUT_MD.write_text(render(data), encoding="utf-8")
        print(OUT_MD.read_text())
        print(json.dumps({k: res[k] for k in ("leaves", "mode", "p50_ms", "p95_ms", "open_rss_mib", "rss_after_queries_mib",
                                              "ann_recall_at_10")}))
        return
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
