"""Where a cold build imports lancedb (issue 26): a low-priority helper process from the build's
start against a thread of the run beside the leaf embedding, in interleaved fresh builds.

A cold build varies by a few seconds from one run to the next on this machine, about what the
change is worth, so the two variants run ``--rounds`` times each, interleaved (A B B A A B ...),
every build a fresh ``arborag build SRC --corpus C`` into an empty corpus folder (default settings)
of ``benchmarks/cold_path.py``'s 1x corpus (2,295 HotpotQA pieces):

- ``default``: as installed — the console script's build asks a model-less helper process
  (``embed_worker.preimport``, nice 19) to import lancedb at its start; the vectors stage writes
  the table there;
- ``no helper``: ``ARBORAG_IMPORT_HELPER=0`` — lancedb imported on a thread of the run once
  ingest and segment are done, beside the leaf embedding (what every build did before), the
  table written in the run.

Reported per variant: wall and CPU seconds, the embed and tree stages' seconds (runs table),
who wrote the vector table, and the node-id hash of every build (the trees must not change).

Run::

    python benchmarks/build_helper.py               # 4 rounds
    python benchmarks/build_helper.py --rounds 2

Writes ``benchmarks/results/build_helper.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, busy_processes, fmt_s, git_commit, machine_line, md_table, report_header, setup_env, wait_for_quiet  # noqa: E402
from cold_path import compile_project, last_run, node_ids, pieces, run_child  # noqa: E402

ARBORAG = str(Path(sys.executable).parent / "arborag")
VARIANTS = ("default", "no helper")


def run(work: Path, rounds: int, env: dict[str, str]) -> dict[str, Any]:
    base = pieces(1)
    base = base[: -max(1, round(len(base) * 0.01))]  # the 1x base corpus of cold_path.py
    src = work / "src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for name, text in base:
        (src / name).write_text(text, encoding="utf-8")
    envs = {"default": env, "no helper": {**env, "ARBORAG_IMPORT_HELPER": "0"}}
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]  # neither variant always runs first
        for v in order:
            corpus = work / "corpus"
            shutil.rmtree(corpus, ignore_errors=True)
            os.sync()
            row = run_child([ARBORAG, "build", str(src), "--corpus", str(corpus)], f"build, {v} ({r + 1}/{rounds})", env=envs[v])
            row.pop("stdout", None)
            counts = last_run(corpus)["counts"]
            row["writer"] = (counts.get("vectors") or {}).get("writer")
            row["stages"] = counts.get("seconds") or {}
            row["node_ids_hash"] = hashlib.sha256("\n".join(node_ids(corpus)).encode()).hexdigest()[:16]
            rows[v].append(row)
    return {"documents": len(base), "rounds": rounds, "rows": rows}


def markdown(result: dict[str, Any]) -> str:
    size = result["size"]
    lines = [*report_header("Where a cold build imports lancedb: helper process vs a thread, A/B (issue 26)",
                            command=result["command"], date=result["date"], commit=result["commit"],
                            machine_start=result["machine_start"], machine_end=result["machine_end"],
                            busy_end=result["busy_end"], wall_s=result["wall_s"]),
             "", f"Bytecode: {result['bytecode']}.", "",
             f"Fresh `arborag build` processes of {size['documents']:,} documents into an empty corpus, the two variants",
             "interleaved (module docs of `benchmarks/build_helper.py`). \"others\" = the most cores other processes",
             "kept busy during any build of the row (/proc/stat).", ""]
    head = ["variant", "mean wall s", "median wall s", "builds (wall s, in order)", "mean cpu s", "mean embed stage s",
            "mean tree stage s", "vector table written by", "node ids hash", "others max"]
    table = []
    for v in VARIANTS:
        got = size["rows"][v]
        walls = [r["wall"] for r in got]
        table.append([v, fmt_s(statistics.mean(walls)), fmt_s(statistics.median(walls)), " / ".join(fmt_s(w) for w in walls),
                      fmt_s(statistics.mean(r["cpu"] for r in got)),
                      fmt_s(statistics.mean(r["stages"].get("embed", 0.0) for r in got)),
                      fmt_s(statistics.mean(r["stages"].get("tree", 0.0) for r in got)),
                      ", ".join(sorted({str(r["writer"]) for r in got})), ", ".join(sorted({r["node_ids_hash"] for r in got})),
                      f"{max((r.get('other_cores') or 0.0) for r in got):.2f}"])
    lines += [md_table(head, table), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-bench-build-helper"))
    ap.add_argument("--max-load", type=float, default=1.0)
    ap.add_argument("--max-wait", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "build_helper.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    setup_env()
    env = dict(os.environ)
    env.pop("ARBORAG_IMPORT_HELPER", None)
    result: dict[str, Any] = {"command": "python benchmarks/build_helper.py " + " ".join(sys.argv[1:]),
                              "date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "commit": git_commit(),
                              "machine_start": machine_line(), "bytecode": compile_project(env)}
    wait_for_quiet(args.max_load, args.max_wait)
    args.work.mkdir(parents=True, exist_ok=True)
    result["size"] = run(args.work, args.rounds, env)
    result["machine_end"] = machine_line()
    result["busy_end"] = ", ".join(busy_processes())
    result["wall_s"] = time.perf_counter() - t0
    report = markdown(result)
    args.out.write_text(report, encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    print(report)
    print(f"benchmark wall time: {result['wall_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
