"""Benchmark: `arborag serve` /search latency and throughput vs the in-process Python API.

Synthetic published snapshots of 10k and 100k nodes (random unit vectors for the dense side,
real HotpotQA sentences recombined for the sparse side, a three-level tree) are written with
the storage APIs. A real server runs in a subprocess (uvicorn on 127.0.0.1, model resident);
an async httpx client loop drives it with 1, 4 and 16 concurrent clients, bounded in count and
time, for dense (collapsed), sparse and hybrid search, with the query embedded by the server
and with a precomputed query vector. The floor is the same search through the Python API
in this process, one query at a time. Server RSS is read from /proc.

    python benchmarks/serve.py                 # both sizes (~6-9 min on a busy 2-core box)
    python benchmarks/serve.py --sizes 10000 --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, busy_processes, git_commit, hotpot_paragraphs, hotpot_questions, machine_line, md_table, setup_env  # noqa: E402

setup_env()
DIM = 384
CLIENTS = (1, 4, 16)
# (label, mode, server embeds the query)
VARIANTS = [("dense", "collapsed", True), ("dense", "collapsed", False), ("sparse", "sparse", None),
            ("hybrid", "hybrid", True), ("hybrid", "hybrid", False)]
SERVER = (
    "import sys, uvicorn\n"
    "from arborag.config import load_config\n"
    "from arborag.serve import create_app\n"
    "cfg = load_config(overrides={'embed': {'threads': int(sys.argv[3])}})\n"
    "uvicorn.run(create_app(sys.argv[1], warm=True, config=cfg), host='127.0.0.1', port=int(sys.argv[2]),"
    " log_level='warning', access_log=False)\n"
)


# -- corpus ---------------------------------------------------------------------------------------
def synth_corpus(root: Path, n: int, seed: int = 13) -> Path:
    """A published snapshot of ``n`` nodes (88% leaves, 10% level 1, 2% level 2); reused when present."""
    from arborag.config import EmbedConfig
    from arborag.storage.corpus import Corpus
    from arborag.storage.schemas import DOCUMENTS, EDGES, NODES
    from arborag.storage.sparse import build_sparse_index
    from arborag.storage.tables import write_table
    from arborag.config import SparseConfig

    corpus = Corpus(root)
    man = corpus.manifest()
    if man and man.get("synthetic_nodes") == n:
        if man.get("ann_workaround"):
            WORKAROUNDS.append(ANN_NOTE)
        return root
    corpus.ensure()
    rng = np.random.default_rng(seed)
    sents = [s for _, ss in hotpot_paragraphs() for s in ss]
    n_l2 = max(1, n // 50)
    n_l1 = max(1, n // 10)
    n_leaf = n - n_l1 - n_l2
    levels = np.concatenate([np.zeros(n_leaf, np.int32), np.ones(n_l1, np.int32), np.full(n_l2, 2, np.int32)])
    per_node = np.where(levels == 0, 3, 6)
    picks = rng.integers(0, len(sents), size=int(per_node.sum()))
    texts, at = [], 0
    for m in per_node.tolist():
        texts.append(" ".join(sents[i] for i in picks[at:at + m]))
        at += m
    n_tokens = [int(len(t.split()) * 1.3) + 1 for t in texts]
    ids = [f"syn{n}-{i:07d}" for i in range(n)]
    n_docs = max(1, n_leaf // 40)
    leaf_doc = [f"doc{n}-{i // 40 % n_docs:05d}" for i in range(n_leaf)]
    parent1 = [n_leaf + (i % n_l1) for i in range(n_leaf)]  # leaf -> level-1 node
    parent2 = [n_leaf + n_l1 + (j % n_l2) for j in range(n_l1)]  # level 1 -> level 2
    docs_of: list[set[str]] = [set() for _ in range(n)]
    for i, p in enumerate(parent1):
        docs_of[i].add(leaf_doc[i]); docs_of[p].add(leaf_doc[i])
    for j, p in enumerate(parent2):
        docs_of[p] |= docs_of[n_leaf + j]
    nodes = pa.table({
        "node_id": ids, "level": pa.array(levels, pa.int32()), "text": pa.array(texts, pa.large_string()),
        "n_tokens": pa.array(n_tokens, pa.int32()), "doc_ids": [sorted(d)[:8] for d in docs_of],
        "summary_of": [None] * n, "summarizer": ["leaf" if lv == 0 else "synthetic" for lv in levels.tolist()],
        "summary_status": ["leaf" if lv == 0 else "ok" for lv in levels.tolist()], "created_by_run": ["bench"] * n,
        # summary labels as a build writes them when c-TF-IDF finds no keyword: the text's opening words
        "keywords": [None if lv == 0 else [] for lv in levels.tolist()],
        "title": [None if lv == 0 else " ".join(t.split()[:8]) for lv, t in zip(levels.tolist(), texts)],
        "title_source": [None if lv == 0 else "text" for lv in levels.tolist()],
    }, schema=NODES)
    child = list(range(n_leaf)) + list(range(n_leaf, n_leaf + n_l1))
    parent = parent1 + parent2
    edges = pa.table({"parent_id": [ids[p] for p in parent], "child_id": [ids[c] for c in child],
                      "probability": pa.array(np.ones(len(child), np.float32)),
                      "level": pa.array([int(levels[p]) for p in parent], pa.int32())}, schema=EDGES)
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    now = datetime.now(timezone.utc)
    doc_ids = [f"doc{n}-{i:05d}" for i in range(n_docs)]
    corpus.write("documents", pa.table({
        "doc_id": doc_ids, "uri": [f"synthetic://{d}" for d in doc_ids], "title": [f"synthetic document {i}" for i in range(n_docs)],
        "mime": ["text/plain"] * n_docs, "n_chars": pa.array([0] * n_docs, pa.int64()), "text": pa.array([""] * n_docs, pa.large_string()),
        "metadata": [None] * n_docs, "ingested_at": pa.array([now] * n_docs, pa.timestamp("us", tz="UTC")),
        "status": ["ok"] * n_docs, "error": [None] * n_docs}, schema=DOCUMENTS))
    snap = f"snap-synthetic-{n}"
    partial = corpus.partial_dir(snap)
    t0 = time.perf_counter()
    write_table("nodes", nodes, partial / "nodes.parquet")
    write_table("edges", edges, partial / "edges.parquet")
    write_ann_vectors(partial / "vectors.lance", nodes, vectors)
    build_sparse_index(nodes, partial / "sparse", SparseConfig(), snapshot_id=snap)
    corpus.publish(partial, snap, {"embed": EmbedConfig().model_dump(mode="json"), "synthetic_nodes": n,
                                   "ann_workaround": ANN_NOTE in WORKAROUNDS,
                                   "corpus_name": root.name, "counts": {"nodes": n}})
    print(f"  wrote {n:,} nodes in {time.perf_counter() - t0:.1f} s -> {root}", flush=True)
    return root


def write_ann_vectors(directory: Path, nodes: pa.Table, vectors: np.ndarray) -> None:
    """storage.vectors.write_vectors; when its ANN index call fails (lancedb >= 0.40 takes the
    column name first: reported), the same IVF_HNSW_SQ cosine index is built with the new call."""
    import shutil

    import arborag.storage.vectors as sv

    try:
        sv.write_vectors(directory, nodes, vectors)
        return
    except Exception as exc:  # noqa: BLE001 - any failure of the index call: fall back, say so
        print(f"  write_vectors failed ({str(exc)[:90]}); building the ANN index with lancedb's current API", flush=True)
    shutil.rmtree(directory, ignore_errors=True)
    saved, sv.ANN_MIN_ROWS = sv.ANN_MIN_ROWS, nodes.num_rows + 1
    try:
        sv.write_vectors(directory, nodes, vectors)
    finally:
        sv.ANN_MIN_ROWS = saved
    import lancedb
    from lancedb.index import IvfHnswSq

    lancedb.connect(str(directory)).open_table(sv.TABLE_NAME).create_index("vector", config=IvfHnswSq(distance_type="cosine"))
    WORKAROUNDS.append(ANN_NOTE)


WORKAROUNDS: list[str] = []
ANN_NOTE = ("the 100k ANN index (IVF_HNSW_SQ, cosine) was built by the benchmark: storage.vectors.write_vectors' "
            "create_index call fails on lancedb 0.40 (reported)")


# -- measuring --------------------------------------------------------------------------------------
def pct(lat: list[float]) -> tuple[float, float, float]:
    a = np.asarray(lat) * 1000
    return float(np.percentile(a, 50)), float(np.percentile(a, 95)), float(np.percentile(a, 99))


def body(mode: str, embed: bool | None, q: str, vec: np.ndarray) -> dict:
    out = {"text": q, "mode": mode, "budget": 2000}
    if embed is False:
        out["vector"] = vec.tolist()
    return out


async def drive(base: str, clients: int, bodies: list[dict], *, max_requests: int, seconds: float) -> dict:
    import httpx

    lat: list[float] = []
    took: list[float] = []  # the server's own time per search (took_ms)
    errors = 0
    deadline = 0.0
    counter = iter(range(max_requests))

    async def worker(c: "httpx.AsyncClient") -> None:
        nonlocal errors
        for i in counter:
            if lat and time.perf_counter() > deadline:
                return
            t = time.perf_counter()
            r = await c.post("/search", json=bodies[i % len(bodies)])
            lat.append(time.perf_counter() - t)
            errors += r.status_code != 200
            if r.status_code == 200:
                took.append(r.json()["took_ms"])

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as c:
        for b in bodies[:3]:  # warm the mode (sparse index open, caches)
            await c.post("/search", json=b)
        t0 = time.perf_counter()
        deadline = t0 + seconds
        await asyncio.gather(*(worker(c) for _ in range(clients)))
        wall = time.perf_counter() - t0
    p50, p95, p99 = pct(lat)
    return {"n": len(lat), "p50": p50, "p95": p95, "p99": p99, "rps": len(lat) / wall, "errors": errors,
            "server_p50": float(np.median(took)) if took else float("nan")}


def floor(corpus: Path, questions: list[str], vecs: np.ndarray, *, threads: int, max_requests: int, seconds: float) -> dict:
    """The same searches through the Python API in this process, one at a time (model loaded)."""
    from arborag.config import load_config
    from arborag.query import open_index

    index = open_index(corpus, config=load_config(overrides={"embed": {"threads": threads}}))
    index.embed_queries(["warm up"])
    out = {}
    for label, mode, embed in VARIANTS:
        lat = []
        deadline = time.perf_counter() + seconds
        t0 = time.perf_counter()
        for i in range(max_requests):
            if lat and time.perf_counter() > deadline:
                break
            t = time.perf_counter()
            index.search(questions[i % len(questions)], mode=mode, budget=2000, vector=None if embed is not False else vecs[i % len(vecs)])
            lat.append(time.perf_counter() - t)
        p50, p95, p99 = pct(lat)
        out[(label, embed)] = {"n": len(lat), "p50": p50, "p95": p95, "p99": p99, "rps": len(lat) / (time.perf_counter() - t0)}
    emb = []
    for q in questions[:50]:
        t = time.perf_counter()
        index.embed_queries([q])
        emb.append(time.perf_counter() - t)
    out["embed_p50_ms"] = pct(emb)[0]
    return out


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident set size of ``pid`` in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def model_only_rss() -> float:
    code = ("from pathlib import Path\nfrom arborag.config import EmbedConfig\nfrom arborag.embed.model import Embedder\n"
            "Embedder(EmbedConfig()).embed(['warm up'])\n"
            "print([l for l in Path('/proc/self/status').read_text().splitlines() if l.startswith('VmRSS')][0].split()[1])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600).stdout
    return int(out.strip().splitlines()[-1]) / 1024


def start_server(corpus: Path, threads: int) -> tuple[subprocess.Popen, str]:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(corpus), str(port), str(threads)])
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if httpx.get(base + "/health", timeout=2).json().get("status") == "ok":
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("server did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--seconds", type=float, default=5.0, help="time bound per (variant, clients) run")
    ap.add_argument("--requests", type=int, default=600, help="count bound per run")
    ap.add_argument("--work", default="/tmp/arborag-bench-serve")
    ap.add_argument("--embed-threads", type=int, default=1, help="torch threads of the query embedder (server and floor)")
    ap.add_argument("--out", default=str(RESULTS / "serve.md"))
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (500 nodes, one client, 20 requests)")
    args = ap.parse_args()
    clients = CLIENTS
    if args.smoke:
        args.sizes, args.seconds, args.requests, clients = "500", 1.0, 20, CLIENTS[:1]
    started = datetime.now(timezone.utc)
    questions = hotpot_questions()[:200]
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((len(questions), DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    print("model alone:", end=" ", flush=True)
    model_rss = model_only_rss()
    print(f"{model_rss:.0f} MiB", flush=True)
    rows, notes = [], []
    for n in (int(x) for x in args.sizes.split(",")):
        print(f"== {n:,} nodes", flush=True)
        corpus = synth_corpus(Path(args.work) / f"n{n}", n)
        fl = floor(corpus, questions, vecs, threads=args.embed_threads, max_requests=args.requests, seconds=args.seconds)
        proc, base = start_server(corpus, args.embed_threads)
        try:
            rss_start = rss_mb(proc.pid)[0]
            for label, mode, embed in VARIANTS:
                bodies = [body(mode, embed, q, v) for q, v in zip(questions, vecs)]
                f = fl[(label, embed)]
                emb = "—" if embed is None else ("server" if embed else "precomputed")
                rows.append([f"{n:,}", label, emb, "in-process (floor)", f"{f['p50']:.2f}", f"{f['p95']:.2f}", f"{f['p99']:.2f}", "—", f"{f['rps']:.0f}", "1.00×", "1.00×"])
                for c in clients:
                    r = asyncio.run(drive(base, c, bodies, max_requests=args.requests, seconds=args.seconds))
                    print(f"  {label:6} {emb:11} x{c:<2}: p50 {r['p50']:.2f} ms p95 {r['p95']:.2f} p99 {r['p99']:.2f} {r['rps']:.0f} req/s (n={r['n']}, errors {r['errors']})", flush=True)
                    rows.append([f"{n:,}", label, emb, str(c), f"{r['p50']:.2f}", f"{r['p95']:.2f}", f"{r['p99']:.2f}", f"{r['server_p50']:.2f}", f"{r['rps']:.0f}",
                                 f"{r['p50'] / f['p50']:.2f}×", f"{r['rps'] / f['rps']:.2f}×"])
                    if r["errors"]:
                        notes.append(f"{n:,} {label} {emb} x{c}: {r['errors']} errors")
            rss_now, rss_peak = rss_mb(proc.pid)
            notes.append(f"{n:,} nodes: server RSS {rss_start:.0f} MiB after warm-up, {rss_now:.0f} MiB after the runs "
                         f"(peak {rss_peak:.0f} MiB) = {rss_peak - model_rss:.0f} MiB beyond the model alone "
                         f"({model_rss:.0f} MiB); query embedding alone in-process p50 {fl['embed_p50_ms']:.2f} ms")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    header = ["nodes", "mode", "query embedding", "clients", "p50 ms", "p95 ms", "p99 ms", "server p50 ms", "req/s", "p50 vs floor", "req/s vs floor"]
    table = md_table(header, rows)
    print(table)
    report = [
        "# Serve benchmark: `/search` over HTTP vs the in-process Python API", "",
        "- command: `python benchmarks/serve.py " + " ".join(sys.argv[1:]) + "`",
        f"- date: {started:%Y-%m-%d %H:%M} UTC; {machine_line()}",
        f"- busy processes at the end: {', '.join(busy_processes()) or 'none over 20% CPU'}",
        f"- commit: {git_commit()}",
        "- corpora: synthetic published snapshots (88% leaves, 10% level 1, 2% level 2; random unit 384-d vectors; "
        "texts = 3 or 6 HotpotQA sentences recombined; sparse = the embedded tantivy index); 100k nodes use the ANN index (LanceDB IVF_HNSW_SQ)",
        f"- requests: budget 2000, k 5, {len(questions)} HotpotQA questions in rotation; each (variant, clients) run bounded by "
        f"{args.requests} requests and {args.seconds:g} s; async httpx clients on 127.0.0.1, one uvicorn worker (sync routes in its thread pool)",
        f"- 'server' = the server embeds the question (MiniLM-L6, bf16, resident, {args.embed_threads} torch thread(s), as `arborag serve` defaults); "
        "'precomputed' = the request carries the query vector; "
        "floor = `open_index(...).search(...)` in this process, one query at a time (same embedding choice)",
        "- latency is measured by the client (includes HTTP, JSON and the client's own share of the 2 cores); "
        "'server p50' is the server's own search time (`took_ms`: embedding + search, no HTTP/JSON)", "",
        table, "", *[f"- {x}" for x in notes + WORKAROUNDS], "",
        "Targets: at 100k nodes p50 ≤ 25 ms dense including the query embedding, ≤ 5 ms excluding it "
        "(1 client); server ≤ 1 GiB beyond the model.",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(report) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
