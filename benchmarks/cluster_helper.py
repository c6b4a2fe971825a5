"""The clustering's helper process (issue 26): cold CLI builds with and without it, interleaved.

A cold console-script ``arborag build`` starts an embedding worker process; while a level of 1,000+
rows is clustered that process takes every other GMM fit and local clustering
(``arborag/tasks/lanes.py``). ``ARBORAG_CLUSTER_HELPER=0`` turns that off. This script runs fresh
``arborag build SRC --corpus C`` processes into empty corpora, the two settings alternating
(off, on, off, on, ...), and reports each build's wall seconds, the tree stage and the per-level
clustering seconds from the runs table, and a hash of the published node ids (which must not differ).

Run::

    python benchmarks/cluster_helper.py --src /tmp/arborag-bench-cold/src-1x --rounds 2

``--src``: a folder of documents (``benchmarks/cold_path.py`` makes ``src-1x``, 2,295 HotpotQA
pieces). Writes ``benchmarks/results/cluster_helper.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, busy_processes, fmt_s, git_commit, machine_line, md_table, report_header, setup_env, wait_for_quiet  # noqa: E402
from cold_path import ARBORAG, last_run, run_child  # noqa: E402

SETTINGS = {"off": {"ARBORAG_CLUSTER_HELPER": "0"}, "on": {}}


def node_hash(corpus: Path) -> str:
    import pyarrow.parquet as pq

    from arborag.storage.corpus import Corpus

    nodes = Corpus(corpus).published_dir() / "nodes.parquet"
    ids = sorted(pq.read_table(nodes, columns=["node_id"]).column("node_id").to_pylist())
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=Path("/tmp/arborag-bench-cold/src-1x"), help="folder of documents to build")
    ap.add_argument("--rounds", type=int, default=2, help="pairs of builds (off, on)")
    ap.add_argument("--max-load", type=float, default=1.0)
    ap.add_argument("--max-wait", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "cluster_helper.md")
    args = ap.parse_args()
    if not args.src.is_dir():
        raise SystemExit(f"--src {args.src} is not a folder: run benchmarks/cold_path.py --sizes 1 first (it makes src-1x)")
    setup_env()
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    machine_start = machine_line()
    print(f"load at start {wait_for_quiet(args.max_load, args.max_wait):.2f}", flush=True)
    runs: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="arborag-cluster-helper-"))
    try:
        for rnd in range(1, args.rounds + 1):
            for name, extra in SETTINGS.items():
                corpus = work / f"{name}-{rnd}"
                env = {**os.environ, **extra}
                row = run_child([*ARBORAG, "build", str(args.src), "--corpus", str(corpus)], f"build, helper {name}, round {rnd}", env)
                counts = last_run(corpus)["counts"]
                levels = [s for s in counts.get("tree", {}).get("stats", []) if s.get("level", 0) >= 1]
                runs.append({"setting": name, "round": rnd, "wall": row["wall"], "cpu": row["cpu"], "other_cores": row["other_cores"],
                             "tree_s": counts.get("seconds", {}).get("tree"), "embed_s": counts.get("seconds", {}).get("embed"),
                             "cluster_s": [round(s.get("cluster_s", 0.0), 3) for s in levels],
                             "gmm_s": [round(s.get("gmm_s", 0.0), 3) for s in levels], "node_hash": node_hash(corpus)})
                shutil.rmtree(corpus, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"command": "python benchmarks/cluster_helper.py " + " ".join(sys.argv[1:]), "date": started.strftime("%Y-%m-%d %H:%M UTC"),
              "commit": git_commit(), "machine_start": machine_start, "machine_end": machine_line(), "busy_end": busy_processes(),
              "wall_s": time.perf_counter() - t0, "src": str(args.src), "runs": runs}
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    args.out.write_text(render(result), encoding="utf-8")
    print(render(result))


def render(r: dict[str, Any]) -> str:
    rows = [[x["setting"], x["round"], fmt_s(x["wall"]), fmt_s(x["embed_s"]), fmt_s(x["tree_s"]),
             " / ".join(fmt_s(c) for c in x["cluster_s"][:2]), " / ".join(fmt_s(c) for c in x["gmm_s"][:2]),
             "—" if x["other_cores"] is None else f"{x['other_cores']:.2f}", x["node_hash"]] for x in r["runs"]]
    med = []
    for name in SETTINGS:
        xs = [x for x in r["runs"] if x["setting"] == name]
        med.append([name, fmt_s(statistics.median(x["wall"] for x in xs)), fmt_s(statistics.median(x["tree_s"] for x in xs)),
                    fmt_s(statistics.median(x["cluster_s"][0] for x in xs)),
                    fmt_s(statistics.median(x["cluster_s"][1] for x in xs if len(x["cluster_s"]) > 1))])
    same = len({x["node_hash"] for x in r["runs"]}) == 1
    return "\n".join([
        *report_header("The clustering's helper process: cold CLI builds with and without it (issue 26)", command=r["command"],
                       date=r["date"], commit=r["commit"], machine_start=r["machine_start"], machine_end=r["machine_end"],
                       busy_end=r["busy_end"], wall_s=r["wall_s"]),
        f"Sources: `{r['src']}`", "",
        "Each row a fresh `arborag build` into an empty corpus, default settings; *off* = "
        "`ARBORAG_CLUSTER_HELPER=0` (local fits on threads, everything else in the run's process), *on* = the "
        "default (the embedding worker takes every other fit: arborag/tasks/lanes.py). Settings alternate; "
        "seconds of the tree stage and of each level's clustering come from the runs table; \"others\" = "
        "average cores other processes kept busy during the build.", "",
        md_table(["helper", "round", "wall s", "embed s", "tree s", "cluster s, level 1 / 2", "GMM fit s (summed), level 1 / 2",
                  "others", "node ids hash"], rows), "",
        "Medians:", "",
        md_table(["helper", "wall s", "tree s", "level-1 cluster s", "level-2 cluster s"], med), "",
        f"Published node ids {'identical in every build' if same else 'DIFFER between builds'}.", "",
    ])


if __name__ == "__main__":
    main()
