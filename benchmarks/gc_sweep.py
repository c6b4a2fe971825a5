"""The embedding-cache sweep that ends every publish: 64-bit digests against full bit patterns.

Every ``arborag update`` ends with gc (``arborag.storage.snapshots.collect_garbage``). Its
embedding-cache sweep reads the vectors of every kept snapshot — up to ten with the default
retention, and a corpus updated on a schedule keeps ten — to know which cache entries are still
referenced. Until session 18 it matched the cache's vectors against the kept ones by their whole
bit patterns: 1,536 bytes a 384-dim vector, copied out of each snapshot, joined into one Arrow
array and hashed again by ``pyarrow.compute.is_in`` (the code is kept here as the baseline). Now
each vector becomes a 64-bit digest computed in blocks straight from the memory-mapped snapshot
file (``arborag.storage.embedding_cache.vector_digests``).

The cold-path benchmark's +1% update runs against a corpus of one build (two snapshots after
it); a scheduled corpus carries ten. This script makes such corpora — HotpotQA pieces at
``--sizes`` (as ``benchmarks/cold_path.py`` cuts them), one ``arborag build``, then ``arborag
update`` runs that each delete ~0.5% of the documents until ``--snapshots`` are kept — and then:

* the sweep alone, each method in a fresh process (as after a publish: nothing imported or
  touched yet), ``--rounds`` interleaved rounds, dry runs (the same reading and matching, nothing
  removed), medians; both must report the same entries kept and removed;
* the +1% update (``arborag update`` adding 1% new documents, the corpus restored between runs)
  on that corpus with the shipped code: its wall time and its gc seconds from the runs table.

    python benchmarks/gc_sweep.py                       # 1x and 4x, ~8 min
    python benchmarks/gc_sweep.py --sizes 1 --rounds 7

Writes ``benchmarks/results/gc_sweep.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, busy_processes, git_commit, machine_line, md_table, report_header, script_command, setup_env  # noqa: E402
from cold_path import ARBORAG, restore, sources  # noqa: E402

# One sweep in a fresh process: "bytes" = the code before session 18 (kept here as the baseline),
# "digest" = arborag's. Prints one JSON line.
SWEEP = r'''
import json, resource, sys, time
corpus_dir, method = sys.argv[1], sys.argv[2]
from arborag.storage.corpus import Corpus
from arborag.storage import snapshots as S
from arborag.storage.embedding_cache import sweep_embedding_cache
c = Corpus(corpus_dir)
snaps = S.list_snapshots(c)
ids = [s.id for s in snaps]
folder = c.cache_dir / "embeddings"
t0 = time.perf_counter()
if method == "digest":
    keep = S._kept_digests(c, ids)
    t1 = time.perf_counter()
    got = sweep_embedding_cache(folder, keep, dry_run=True)
else:
    import numpy as np, pyarrow as pa, pyarrow.compute as pc
    from arborag.storage.arrays import arrow_to_vectors
    from arborag.storage.embedding_cache import _read_shard
    from arborag.storage.vectors import ARROW_FILE

    def vector_keys(v):
        v = np.ascontiguousarray(v, dtype=np.float32)
        fixed = pa.Array.from_buffers(pa.binary(4 * v.shape[1]), v.shape[0], [None, pa.py_buffer(v.tobytes())])
        return fixed.cast(pa.binary())

    parts = []
    for sid in ids:
        with pa.memory_map(str(c.snapshots_dir / sid / "vectors.lance" / ARROW_FILE)) as src:
            col = pa.ipc.open_file(src).read_all().column("vector")
        parts.append(np.ascontiguousarray(arrow_to_vectors(col), dtype=np.float32))
    keep = pa.concat_arrays([vector_keys(p) for p in parts if p.size]).cast(pa.binary())
    t1 = time.perf_counter()
    removed = kept = 0
    shards = sorted(folder.glob("emb-*.parquet"))
    for shard in shards:
        read = _read_shard(shard)
        if read is None:
            continue
        live = pc.is_in(vector_keys(read[1]), value_set=keep).to_numpy(zero_copy_only=False)
        kept += int(live.sum())
        removed += len(live) - int(live.sum())
    got = {"entries_removed": removed, "entries_kept": kept, "shards_before": len(shards)}
t2 = time.perf_counter()
print(json.dumps({"kept_s": t1 - t0, "sweep_s": t2 - t1, "total_s": t2 - t0, "snapshots": len(ids),
                  "removed": got["entries_removed"], "kept": got["entries_kept"], "shards": got["shards_before"],
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
'''


def cli(args: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(ARBORAG + args, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def last_gc(corpus: Path) -> dict[str, Any]:
    import polars as pl

    runs = pl.read_parquet(corpus / "tables" / "runs.parquet").sort("started_at")
    counts = json.loads(runs["counts"][-1])
    return {"gc_s": float(counts["gc"]["seconds"]), "snapshots_kept": int(counts["gc"]["snapshots_kept"]), "mode": counts.get("mode")}


def make_corpus(mult: int, work: Path, snapshots: int, env: dict[str, str]) -> tuple[Path, Path, list[tuple[str, str]], dict[str, Any]]:
    """A built corpus of ``mult``x HotpotQA pieces updated until ``snapshots`` are kept; returns
    (sources, corpus, the 1% pool of new documents, what it took)."""
    src, corpus, base, pool = sources(mult, work)
    one = len(pool)
    build_s = cli(["build", str(src), "--corpus", str(corpus)], env)
    print(f"{mult}x: built {len(base)} documents in {build_s:.1f} s", flush=True)
    rng = random.Random(18 + mult)
    for k in range(snapshots - 1):  # the build published one; each update publishes one more
        present = sorted(p.name for p in src.iterdir())
        for name in rng.sample(present, max(1, one // 2)):
            (src / name).unlink()
        cli(["update", str(src), "--corpus", str(corpus)], env)
        print(f"  update {k + 1}: {last_gc(corpus)}", flush=True)
    # snapshots superseded less than retention.grace_s (60 s) ago are always kept: wait that out,
    # then apply the retention a scheduled corpus lives under
    time.sleep(61)
    cli(["snapshots", "gc", "--corpus", str(corpus)], env)
    kept = len([p for p in (corpus / "snapshots").iterdir() if p.name.startswith("snap-")])
    print(f"  after gc: {kept} snapshots", flush=True)
    return src, corpus, pool, {"documents": len(list(src.iterdir())), "built_from": len(base), "build_s": build_s,
                               "updates": snapshots - 1, "snapshots": kept}


def reuse_corpus(mult: int, work: Path) -> tuple[Path, Path, list[tuple[str, str]], dict[str, Any]]:
    """The corpus an earlier :func:`make_corpus` left in ``work`` (``--reuse``), as it left it."""
    src, corpus, _, pool = sources(mult, work, write=False)
    kept = len([p for p in (corpus / "snapshots").iterdir() if p.name.startswith("snap-")])
    print(f"{mult}x: reusing {corpus} ({kept} snapshots)", flush=True)
    return src, corpus, pool, {"documents": len(list(src.iterdir())), "build_s": None, "updates": None,
                                                 "snapshots": kept, "reused": True}


def sweep_rounds(corpus: Path, rounds: int, env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, list[dict[str, Any]]] = {"bytes": [], "digest": []}
    for r in range(rounds):
        for method in (("bytes", "digest") if r % 2 == 0 else ("digest", "bytes")):
            done = subprocess.run([sys.executable, "-c", SWEEP, str(corpus), method], env=env, check=True, capture_output=True, text=True)
            out[method].append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"  round {r + 1}: " + ", ".join(f"{m} {v[-1]['total_s']:.3f} s" for m, v in out.items()), flush=True)
    return out


def add_runs(src: Path, corpus: Path, pool: list[tuple[str, str]], repeats: int, env: dict[str, str]) -> list[dict[str, Any]]:
    saved = corpus.with_name(corpus.name + "-saved")
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(corpus, saved)
    rows = []
    for k in range(repeats):
        if k:
            restore(src, corpus, saved, pool)
        for name, text in pool:
            (src / name).write_text(text, encoding="utf-8")
        wall = cli(["update", str(src), "--corpus", str(corpus)], env)
        rows.append({"wall_s": wall, **last_gc(corpus)})
        print(f"  +1% update {k + 1}: {rows[-1]}", flush=True)
    restore(src, corpus, saved, pool)  # leave the corpus as it was made
    shutil.rmtree(saved)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,4", help="corpus sizes as multiples of the HotpotQA pieces (1x ~2,300 documents)")
    ap.add_argument("--snapshots", type=int, default=10, help="kept snapshots to reach (the default retention keeps 10)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved sweep rounds per method")
    ap.add_argument("--add-repeats", type=int, default=3, help="+1%% updates per size (median reported)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-bench-gc"))
    ap.add_argument("--reuse", action="store_true", help="measure the corpora an earlier run made in --work (not built again)")
    ap.add_argument("--out", type=Path, default=RESULTS / "gc_sweep.md")
    args = ap.parse_args()
    setup_env()
    env = dict(os.environ)
    started = time.perf_counter()
    machine_start = machine_line()
    sizes = []
    for mult in (int(s) for s in args.sizes.split(",")):
        if args.reuse:
            src, corpus, pool, made = reuse_corpus(mult, args.work)
        else:
            src, corpus, pool, made = make_corpus(mult, args.work, args.snapshots, env)
        sweeps = sweep_rounds(corpus, args.rounds, env)
        adds = add_runs(src, corpus, pool, args.add_repeats, env)
        sizes.append({"mult": mult, **made, "sweeps": sweeps, "adds": adds})
    result = {
        "command": script_command(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": git_commit(),
        "machine_start": machine_start, "machine_end": machine_line(), "busy_at_end": busy_processes(),
        "sizes": sizes, "wall_s": time.perf_counter() - started,
    }
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    args.out.write_text(markdown(result))
    print(markdown(result))


def markdown(result: dict[str, Any]) -> str:
    rows, add_rows = [], []
    for s in result["sizes"]:
        med = {m: {k: statistics.median(r[k] for r in runs) for k in ("kept_s", "sweep_s", "total_s", "peak_mb")} for m, runs in s["sweeps"].items()}
        first = {m: runs[0] for m, runs in s["sweeps"].items()}
        same = all((r["kept"], r["removed"]) == (first["bytes"]["kept"], first["bytes"]["removed"]) for runs in s["sweeps"].values() for r in runs)
        snaps = first["digest"]["snapshots"]
        for m, label in (("bytes", "full bit patterns (before)"), ("digest", "64-bit digests (now)")):
            rows.append([f"{s['mult']}x", snaps, label, f"{med[m]['kept_s']:.3f}", f"{med[m]['sweep_s']:.3f}", f"{med[m]['total_s']:.3f}",
                         f"{med[m]['peak_mb']:.0f}", f"{med['bytes']['total_s'] / med[m]['total_s']:.2f}×",
                         f"{first[m]['kept']:,} / {first[m]['removed']:,}" + ("" if same else " **differ**")])
        walls = sorted(a["wall_s"] for a in s["adds"])
        mid = sorted(s["adds"], key=lambda a: a["wall_s"])[len(walls) // 2]
        add_rows.append([f"{s['mult']}x", f"{s['documents']:,}", mid["snapshots_kept"], f"{mid['wall_s']:.2f}",
                         " / ".join(f"{w:.2f}" for w in walls), f"{mid['gc_s']:.3f}", f"{100 * mid['gc_s'] / mid['wall_s']:.1f}%"])
    return "\n".join([
        *report_header("The embedding-cache sweep after every publish: digests against full bit patterns", command=result["command"],
                       date=result["date"], commit=result["commit"], machine_start=result["machine_start"],
                       machine_end=result["machine_end"], busy_end=result["busy_at_end"], wall_s=result["wall_s"]),
        "",
        "Corpora: HotpotQA pieces (as `cold_path.py` cuts them), one `arborag build`, then `arborag update` runs deleting "
        "~0.5% of the documents each until the default retention kept the snapshots below. Each sweep is a fresh process "
        "(dry run: the same reading and matching, nothing removed); methods interleaved; medians in seconds. *kept vectors* = "
        "reading every kept snapshot's vectors into the set to match; *match* = reading the cache's shards and matching them.",
        "",
        md_table(["size", "snapshots kept", "method", "kept vectors s", "match s", "sweep s", "peak MB", "speedup", "entries kept / removed"], rows),
        "",
        "The +1% update on the same corpora with the shipped code (`arborag update` adding 1% new documents, fresh process, "
        "the corpus restored between runs; gc seconds from the runs table):",
        "",
        md_table(["size", "documents before it", "snapshots kept", "update s (median)", "runs s", "gc s", "gc share"], add_rows),
        "",
    ])


if __name__ == "__main__":
    main()
