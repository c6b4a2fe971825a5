"""Retention and gc over many updates: does every part of a corpus plateau, and what
does gc cost per publish?

A corpus of HotpotQA paragraph pieces (``--docs``, default 400 documents; each paragraph cut
into 2-sentence pieces as in benchmarks/update.py), built once, then ``--cycles`` updates (default
30), each adding, changing and deleting a random 1-5% of the documents (``arborag update``'s
Python entry, no Prefect), with the **default retention** (the ``retention`` config's defaults,
recorded in the results: the gc after every publish). Per cycle: update seconds, mode, the gc's own seconds and bytes
freed, snapshots kept, bytes on disk per part (snapshots, embedding cache, LLM cache, staging,
Prefect records, working tables) and the embedding-cache rows. At the end: each part's size after
the last cycle over its size after cycle 10 (target: total <= 1.5x), and gc seconds as a share
of update seconds.

Run::

    OMP_NUM_THREADS=1 timeout 3600 python benchmarks/retention.py --work /tmp/retention
    python benchmarks/retention.py --smoke --work /tmp/ret --out /tmp/ret/retention.md  # a tiny check run

Writes ``benchmarks/results/retention.json`` and ``benchmarks/results/retention.md`` (``--out``: elsewhere).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, git_commit, hotpot_paragraphs, machine_line, md_table, setup_env  # noqa: E402

setup_env()

SEED = 24


def _pieces() -> list[tuple[str, str]]:
    out = []
    for p, (title, sents) in enumerate(hotpot_paragraphs()):
        for k in range(0, len(sents), 2):
            out.append((f"p{p:04d}-{k // 2}.txt", f"{title} (part {k // 2 + 1})\n\n{' '.join(sents[k:k + 2])}\n"))
    random.Random(SEED).shuffle(out)
    return out


def _cache_rows(corpus: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(p).num_rows for p in (corpus / "cache" / "embeddings").glob("emb-*.parquet"))


def _cycle(rng: random.Random, src: Path, pool: list[tuple[str, str]], n: int) -> dict[str, int]:
    """Add, change and delete a random 1-5% of ``n`` documents each."""
    present = sorted(p.name for p in src.glob("*.txt"))
    k_add, k_chg, k_del = (max(1, round(n * rng.uniform(0.01, 0.05))) for _ in range(3))
    for name, text in (pool.pop() for _ in range(min(k_add, len(pool)))):
        (src / name).write_text(text, encoding="utf-8")
    changed = rng.sample(present, k_chg)
    for name in changed:
        (src / name).write_text((src / name).read_text(encoding="utf-8") + f"\nRevised on cycle {rng.random():.6f}.\n", encoding="utf-8")
    for name in rng.sample([p for p in present if p not in changed], k_del):
        (src / name).unlink(missing_ok=True)
    return {"added": k_add, "changed": k_chg, "deleted": k_del}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=400)
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-retention"))
    ap.add_argument("--out", type=Path, default=RESULTS / "retention.md", help="the report; the .json is written beside it")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (20 documents, 2 cycles)")
    args = ap.parse_args()
    if args.smoke:
        args.docs, args.cycles = 20, 2

    from arborag.config import load_config
    from arborag.flows.build import run_build
    from arborag.flows.update import run_update
    from arborag.storage.corpus import Corpus
    from arborag.storage.snapshots import disk_usage, list_snapshots

    started = datetime.now(timezone.utc)
    machine_before = machine_line()
    commit = git_commit()  # the code this process loaded (the tree may move while it runs)
    shutil.rmtree(args.work, ignore_errors=True)
    src, corpus = args.work / "src", args.work / "corpus"
    src.mkdir(parents=True)
    pieces = _pieces()
    base, pool = pieces[: args.docs], pieces[args.docs:]
    for name, text in base:
        (src / name).write_text(text, encoding="utf-8")
    cfg = load_config(None)
    retention = cfg.retention.model_dump()  # the defaults this run measures; the report names them
    if not retention.get("auto"):
        raise SystemExit("the default config runs no gc after a publish (retention.auto is off): nothing to measure")
    t = time.perf_counter()
    run_build([src], corpus, cfg, use_prefect=False, progress=False)
    build_s = time.perf_counter() - t
    print(f"build: {args.docs} documents in {build_s:.1f} s", flush=True)
    rng = random.Random(SEED)
    rows: list[dict[str, Any]] = []
    for i in range(1, args.cycles + 1):
        change = _cycle(rng, src, pool, args.docs)
        t = time.perf_counter()
        out = run_update([src], corpus, cfg)
        secs = time.perf_counter() - t
        gc = (out.get("publish") or {}).get("gc") or {}
        du = disk_usage(Corpus(corpus))
        row = {"cycle": i, **change, "mode": out.get("mode"), "status": out.get("status"), "update_s": round(secs, 2),
               "gc_s": gc.get("seconds"), "gc_removed": len(gc.get("snapshots_removed", [])), "gc_bytes_freed": gc.get("bytes_freed"),
               "gc_errors": gc.get("errors"), "snapshots": len(list_snapshots(Corpus(corpus), sizes=False)),
               "cache_rows": _cache_rows(corpus), "bytes": du}
        rows.append(row)
        print(f"cycle {i}: {row['mode']} {secs:.1f} s, gc {row['gc_s']} s, {row['snapshots']} snapshots, total {du['total'] / 1e6:.2f} MB"
              f" (snapshots {du['snapshots'] / 1e6:.2f}, emb cache {du['embedding_cache'] / 1e6:.2f}, tables {du['tables'] / 1e6:.3f})", flush=True)
    ref = rows[min(9, len(rows) - 1)]["bytes"]
    last = rows[-1]["bytes"]
    parts = ["total", "snapshots", "embedding_cache", "llm_cache", "staging", "prefect", "tables", "leases"]
    growth = {p: (round(last[p] / ref[p], 3) if ref[p] else None) for p in parts}
    upd = [r["update_s"] for r in rows]
    gcs = [r["gc_s"] or 0.0 for r in rows]
    result = {
        "command": " ".join(["python", "benchmarks/retention.py", *sys.argv[1:]]),
        "when": started.strftime("%Y-%m-%d %H:%M UTC"), "machine_before": machine_before, "machine_after": machine_line(),
        "commit": commit, "retention": retention, "docs": args.docs, "cycles": args.cycles, "build_s": round(build_s, 1),
        "growth_last_over_cycle10": growth, "max_snapshots": max(r["snapshots"] for r in rows),
        "gc_seconds_mean": round(sum(gcs) / len(gcs), 3), "update_seconds_mean": round(sum(upd) / len(upd), 2),
        "gc_share_of_update": round(sum(gcs) / sum(upd), 4),
        "cycles_with_gc_errors": sum(1 for r in rows if r["gc_errors"]), "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    table = md_table(
        ["cycle", "mode", "update s", "gc s", "snapshots", "total MB", "snapshots MB", "emb cache MB", "cache rows", "tables KB"],
        [[r["cycle"], r["mode"], r["update_s"], r["gc_s"], r["snapshots"], f"{r['bytes']['total'] / 1e6:.2f}",
          f"{r['bytes']['snapshots'] / 1e6:.2f}", f"{r['bytes']['embedding_cache'] / 1e6:.3f}", r["cache_rows"],
          f"{r['bytes']['tables'] / 1e3:.1f}"] for r in rows],
    )
    md = (
        f"# Retention over {args.cycles} updates ({args.docs} HotpotQA documents, default retention)\n\n"
        "Retention: " + ", ".join(f"{k} {v}" for k, v in retention.items()) + "\n\n"
        f"- command: `{result['command']}`\n- date: {result['when']}\n- commit: {result['commit']}\n"
        f"- machine before: {machine_before}\n- machine after: {result['machine_after']}\n"
        "- the machine was shared with other test runs during the measurement (see the load averages)\n\n"
        f"Build: {result['build_s']} s. Size after the last cycle over the size after cycle 10, per part: "
        + ", ".join(f"{p} {g}" for p, g in growth.items() if g is not None)
        + f". Most snapshots kept at once: {result['max_snapshots']}. gc after each publish: mean {result['gc_seconds_mean']} s, "
        f"{100 * result['gc_share_of_update']:.1f}% of the update time (mean update {result['update_seconds_mean']} s). "
        f"Cycles whose gc reported an error: {result['cycles_with_gc_errors']}.\n\n" + table + "\n"
    )
    args.out.write_text(md, encoding="utf-8")
    print(md)


if __name__ == "__main__":
    main()
