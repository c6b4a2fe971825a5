"""bf16 vs fp32 embedding: throughput and agreement on real chunks.

Usage: python benchmarks/embed_dtype.py [--n 1024] [--reps 3] [--threads 2] [--batch 32]

Chunks are real text from ../shared/data (HotpotQA corpus paragraphs, NarrativeQA passages,
the RAPTOR Cinderella text), packed from sentences into chunks of <= 100 tokens of our
tokenizer (the RAPTOR leaf size). fp32 and bf16 runs alternate; the machine is shared, so each
configuration is repeated and the best (fastest) run counts. Writes a Markdown report to
benchmarks/results/embed_dtype.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DATA = REPO.parent / "shared" / "data"
_SENT = re.compile(r"(?<=[.!?])\s+|\n+")


def _pack(sentences: list[str], counts: list[int], limit: int) -> list[str]:
    chunks: list[str] = []
    cur: list[str] = []
    cur_n = 0
    for s, n in zip(sentences, counts):
        if cur and cur_n + n > limit:
            chunks.append(" ".join(cur))
            cur, cur_n = [], 0
        cur.append(s)
        cur_n += n
    if cur:
        chunks.append(" ".join(cur))
    return chunks


def load_real_chunks(limit_tokens: int = 100) -> list[tuple[str, str]]:
    """(doc key, chunk text) for every real chunk in ../shared/data, in a fixed order."""
    from arborag.tokenizer import get_tokenizer

    tok = get_tokenizer()
    docs: list[tuple[str, list[str]]] = []
    corpus = json.loads((DATA / "hotpotqa" / "hotpotqa_train_corpus.json").read_text(encoding="utf-8"))
    for title in sorted(corpus):
        sents = [s.strip() for s in corpus[title] if s.strip()]
        if sents:
            docs.append((f"hotpot:{title}", sents))
    seen: set[str] = set()
    for line in (DATA / "narrativeqa" / "test-tiny.jsonl").read_text(encoding="utf-8").splitlines():
        passage = json.loads(line)["passage"]
        if passage in seen:
            continue
        seen.add(passage)
        docs.append((f"narrativeqa:{len(seen)}", [s.strip() for s in _SENT.split(passage) if s.strip()]))
    cinderella = (DATA / "raptor" / "cinderella.txt").read_text(encoding="utf-8")
    docs.append(("raptor:cinderella", [s.strip() for s in _SENT.split(cinderella) if s.strip()]))
    out: list[tuple[str, str]] = []
    for key, sents in docs:
        counts = tok.count_many(sents)
        for chunk in _pack(sents, counts, limit_tokens):
            out.append((key, chunk))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "embed_dtype.md")
    ap.add_argument("--append", action="store_true", help="append this run to the report instead of replacing it")
    args = ap.parse_args()

    from arborag.config import EmbedConfig
    from arborag.tokenizer import get_tokenizer
    from arborag.tasks.embeddings import Embedder

    chunks = load_real_chunks()
    rng = np.random.default_rng(0)
    pick = np.sort(rng.choice(len(chunks), size=min(args.n, len(chunks)), replace=False))
    texts = [chunks[i][1] for i in pick]
    ntok = np.array(get_tokenizer().count_many(texts))
    emb = {
        d: Embedder(EmbedConfig(dtype=d, batch_size=args.batch, threads=args.threads))
        for d in ("float32", "bfloat16")
    }
    for e in emb.values():  # load + warm up (first forward passes allocate)
        e.embed(texts[:64])
    times: dict[str, list[float]] = {d: [] for d in emb}
    loads: list[float] = []
    vecs: dict[str, np.ndarray] = {}
    for _ in range(args.reps):
        for d, e in emb.items():
            load0 = os.getloadavg()[0]
            loads.append(load0)
            t0 = time.perf_counter()
            vecs[d] = e.embed(texts)
            times[d].append(time.perf_counter() - t0)
            print(f"{d}: {times[d][-1]:.2f} s ({len(texts) / times[d][-1]:.1f}/s) load1={load0:.2f}", flush=True)
    # unsorted batching for comparison (what happens without the length sort)
    e32 = emb["bfloat16"]
    model = e32._load()
    t0 = time.perf_counter()
    for s in range(0, len(texts), args.batch):
        model.encode(texts[s : s + args.batch], batch_size=args.batch, show_progress_bar=False)
    unsorted_s = time.perf_counter() - t0

    cos = np.sum(vecs["float32"] * vecs["bfloat16"], axis=1)
    # retrieval agreement: top-10 neighbours of 200 chunks under each dtype
    q = np.arange(0, len(texts), max(1, len(texts) // 200))[:200]
    top = {}
    for d, v in vecs.items():
        sims = v[q] @ v.T
        sims[np.arange(len(q)), q] = -np.inf
        top[d] = np.argsort(-sims, axis=1)[:, :10]
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top["float32"], top["bfloat16"])])
    best = {d: min(t) for d, t in times.items()}
    ratio_best = best["float32"] / best["bfloat16"]
    ratio_median = float(np.median(times["float32"]) / np.median(times["bfloat16"]))
    header = [
        "# bf16 vs fp32 embeddings (all-MiniLM-L6-v2, CPU)",
        "",
        "Each section below is one run of `benchmarks/embed_dtype.py`. Runs alternate fp32/bf16 on the same",
        "real chunks (HotpotQA paragraphs, NarrativeQA passages, Cinderella, packed to <= 100 tokens); the",
        "machine has 2 cores shared with other engineers' jobs, so every configuration is repeated and the",
        "best (fastest) run counts; the load average is reported with each run.",
    ]
    lines = [
        "",
        f"## Run: {time.strftime('%Y-%m-%d %H:%M')} - torch threads {args.threads}, batch {args.batch}, {len(texts)} chunks",
        "",
        f"Command: `python benchmarks/embed_dtype.py --n {args.n} --reps {args.reps} --threads {args.threads} "
        f"--batch {args.batch}{' --append' if args.append else ''}`",
        "",
        f"- Machine: {platform.machine()}, {os.cpu_count()} cores shared with other work (load average "
        f"{min(loads):.1f}-{max(loads):.1f} during the runs).",
        f"- Data: {len(texts)} real chunks; mean {ntok.mean():.1f} tokens, max {ntok.max()}.",
        "",
        "| dtype | best s | chunks/s (best) | all runs (s) |",
        "| --- | --- | --- | --- |",
    ]
    for d in emb:
        lines.append(
            f"| {d} | {best[d]:.2f} | {len(texts) / best[d]:.1f} | {', '.join(f'{t:.2f}' for t in times[d])} |"
        )
    lines += [
        "",
        f"- **Throughput ratio bf16/fp32: {ratio_best:.2f}x (best runs)**, {ratio_median:.2f}x (median runs).",
        f"- **Cosine(bf16, fp32) per chunk: mean {cos.mean():.5f}, min {cos.min():.5f}**, 1st percentile "
        f"{np.percentile(cos, 1):.5f}.",
        f"- Top-10 neighbour overlap (200 chunks as queries): {overlap:.3f}.",
        f"- Without our length sort (bf16, batches in input order): {unsorted_s:.2f} s "
        f"({len(texts) / unsorted_s:.1f}/s) vs {best['bfloat16']:.2f} s sorted (one run, same load).",
    ]
    if args.append and args.out.exists():
        text = args.out.read_text(encoding="utf-8").rstrip("\n") + "\n" + "\n".join(lines) + "\n"
    else:
        text = "\n".join(header + lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
