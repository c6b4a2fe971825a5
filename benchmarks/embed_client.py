"""The openai embeddings client path against the fake server (tests/fake_embed_server.py): what
the client itself costs, and what bounded concurrency does to a server's per-request latency.

It is NOT a measurement of any embedding model: the fake server hashes words (microseconds) and
runs in this process, on the same cores. What it tells:

- texts/s with a server that answers at once = the client's own ceiling here (tokenizing for
  batches and windows, JSON both ways, HTTP on loopback, the fake's own work included); compare
  it with the local model's 65-139 texts/s (docs/ENVIRONMENT.md) to see whether the client could
  ever be the bottleneck of a build;
- with a fixed delay per request (a stand-in for a remote server's latency), how throughput
  scales with ``embed.concurrency``.

    python benchmarks/embed_client.py            # writes benchmarks/results/embed_client.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import git_commit, machine_line, md_table  # noqa: E402
from fake_embed_server import FakeEmbedServer, reply  # noqa: E402


def texts(n: int) -> list[str]:
    """``n`` distinct texts of about 85 tokens of arborag's tokenizer (the leaf size of the local-model figures)."""
    words = "the prince searched the kingdom for the girl whose foot fit the glass slipper at midnight".split()
    return [" ".join(f"{words[(i + j) % len(words)]}{(i * 7 + j) % 13}" for j in range(42)) for i in range(n)]


def run(n: int, *, batch: int, concurrency: int, delay_s: float, repeat: int) -> tuple[float, int]:
    """Best texts/s of ``repeat`` runs and the number of requests of one run (dimensions 384, as MiniLM's)."""
    from arborag.config import EmbedConfig
    from arborag.embedder import Embedder

    best = 0.0
    with FakeEmbedServer(models=["fake-embed"], dim=384, default=reply(delay_s=delay_s)) as srv:
        for _ in range(repeat):
            e = Embedder(EmbedConfig(backend="openai", base_url=srv.base_url, api_model="fake-embed", batch_size=batch,
                                     concurrency=concurrency, dimensions=384, request_tokens=100_000))
            data = texts(n)
            t0 = time.perf_counter()
            out = e.embed(data)
            took = time.perf_counter() - t0
            assert out.shape == (n, 384)
            best = max(best, n / took)
        return best, len(srv.embedding_requests()) // repeat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="texts per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per row (best kept)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "embed_client.md")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from arborag.tokenizer import get_tokenizer

    sample = get_tokenizer().count_many(texts(200))
    mean_tokens = sum(sample) / len(sample)
    rows = []
    load0 = os.getloadavg()
    for delay_ms, batch, conc in [(0, 32, 1), (0, 32, 4), (0, 128, 4), (50, 32, 1), (50, 32, 4), (50, 32, 8)]:
        n = args.n if delay_ms == 0 else min(args.n, 640)
        rate, reqs = run(n, batch=batch, concurrency=conc, delay_s=delay_ms / 1000, repeat=args.repeat)
        rows.append([delay_ms, batch, conc, n, reqs, f"{rate:,.0f}"])
        print(rows[-1], flush=True)
    load1 = os.getloadavg()
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = f"""# The openai embeddings client against the fake server

- command: `python benchmarks/embed_client.py --n {args.n} --repeat {args.repeat}`
- date: {now}; commit: {git_commit()}
- machine: {machine_line()}; load average at start {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} — a **shared machine** (about six engineers' jobs), so these are lower bounds
- what it measures: `OpenAIEmbedder.embed` (arborag/embedder_openai.py) of texts of {mean_tokens:.0f} tokens on average (arborag's tokenizer) against tests/fake_embed_server.py in the same process (a test double that hashes words: no model). The first rows are the client's own ceiling here; the rows with a delay stand in for a server's latency per request. Not a measurement of any real embedding server (none runs here).

{md_table(["server delay per request (ms)", "batch_size", "concurrency", "texts", "requests per run", "texts/s (best of runs)"], rows)}

Load average at the end: {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f}.
"""
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
