"""How a cold update starts (issue 26): the console script's early worker spawn and lancedb's helper
process, each against its absence, in interleaved fresh processes.

A single cold update varies by about ±10% on this machine, more than either change is worth, so
every variant runs ``--rounds`` times, interleaved (A B C A B C ...), each time from the same state:
the corpus restored from a copy and the added files written again. Variants of a cold
``arborag update SRC --corpus C`` adding 1% of the documents:

- ``default``: the ``arborag`` console script as installed (``arborag.launch``: the embedding
  worker is spawned before the command line's imports; an incremental update's lancedb import
  and vector-table write in a low-priority helper process);
- ``no helper``: the same with ``ARBORAG_IMPORT_HELPER=0`` — lancedb imported on a thread of the
  run (what every update did before), the vector table written there;
- ``no early spawn``: a script named ``arborag`` that runs ``arborag.cli.app`` directly (the entry
  point before ``arborag.launch``): the worker starts when the update command starts it.

and the no-op update (nothing changed) with and without the early spawn. Sizes: 300 documents and
the 2,295 of ``benchmarks/cold_path.py``'s 1x corpus (the same pieces, the same 1% added).

Run::

    python benchmarks/update_start.py                 # both sizes, 6 rounds
    python benchmarks/update_start.py --sizes 300 --rounds 3

Writes ``benchmarks/results/update_start.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
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
from cold_path import last_run, pieces, restore, run_child  # noqa: E402

ARBORAG = str(Path(sys.executable).parent / "arborag")
OLD_ENTRY = "#!{python}\nimport sys\nfrom arborag.cli import app\nsys.exit(app())\n"
VARIANTS = ("default", "no helper", "no early spawn")


def _state(work: Path, n_docs: int | None, env: dict[str, str]) -> tuple[Path, Path, Path, list[tuple[str, str]]]:
    """A built corpus of the base documents (after one no-op update, as a schedule leaves it), its
    saved copy, and the 1% to add."""
    all_pieces = pieces(1)
    if n_docs:
        all_pieces = all_pieces[:n_docs]
    one = max(1, round(len(all_pieces) * 0.01))
    base, pool = all_pieces[:-one], all_pieces[-one:]
    src, corpus, saved = work / "src", work / "corpus", work / "saved"
    for d in (src, corpus, saved):
        shutil.rmtree(d, ignore_errors=True)
    src.mkdir(parents=True)
    for name, text in base:
        (src / name).write_text(text, encoding="utf-8")
    run_child([ARBORAG, "build", str(src), "--corpus", str(corpus)], f"build of {len(base)} documents", env)
    run_child([ARBORAG, "update", str(src), "--corpus", str(corpus)], "no-op update (the state a schedule leaves)", env)
    shutil.copytree(corpus, saved)
    return src, corpus, saved, pool


def one_size(work: Path, n_docs: int | None, rounds: int, env: dict[str, str]) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    old = work / "old-entry" / "arborag"  # named arborag: the worker is wanted by the console script's name
    old.parent.mkdir(exist_ok=True)
    old.write_text(OLD_ENTRY.format(python=sys.executable), encoding="utf-8")
    old.chmod(0o755)
    src, corpus, saved, pool = _state(work, n_docs, env)
    argv = {"default": [ARBORAG], "no helper": [ARBORAG], "no early spawn": [str(old)]}
    envs = {"default": env, "no helper": {**env, "ARBORAG_IMPORT_HELPER": "0"}, "no early spawn": env}
    add: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        for v in VARIANTS:
            restore(src, corpus, saved, pool)
            for name, text in pool:
                (src / name).write_text(text, encoding="utf-8")
            row = run_child([*argv[v], "update", str(src), "--corpus", str(corpus)], f"+1% {v} ({r + 1}/{rounds})", env=envs[v])
            run = last_run(corpus)
            row.pop("stdout", None)
            row["writer"] = (run["counts"].get("vectors") or {}).get("writer")
            row["phases"] = run["counts"].get("phases") or {}
            row["stages"] = run["counts"].get("seconds") or {}
            add[v].append(row)
    restore(src, corpus, saved, pool)
    noop: dict[str, list[dict[str, Any]]] = {"default": [], "no early spawn": []}
    for r in range(rounds):
        for v in noop:
            row = run_child([*argv[v], "update", str(src), "--corpus", str(corpus)], f"no-op {v} ({r + 1}/{rounds})", env=env)
            row.pop("stdout", None)
            noop[v].append(row)
    return {"documents": len(list(src.iterdir())), "added": len(pool), "rounds": rounds, "add": add, "noop": noop}


def _summary(rows: list[dict[str, Any]]) -> list[str]:
    walls = [r["wall"] for r in rows]
    cpus = [r["cpu"] for r in rows]
    return [fmt_s(statistics.mean(walls)), fmt_s(statistics.median(walls)), " / ".join(fmt_s(w) for w in walls),
            fmt_s(statistics.mean(cpus)), f"{max((r.get('other_cores') or 0.0) for r in rows):.2f}"]


def markdown(result: dict[str, Any]) -> str:
    lines = [*report_header("How a cold update starts: early worker spawn and lancedb's helper, A/B (issue 26)",
                            command=result["command"], date=result["date"], commit=result["commit"],
                            machine_start=result["machine_start"], machine_end=result["machine_end"],
                            busy_end=result["busy_end"], wall_s=result["wall_s"]),
             "", "Fresh `arborag update` processes, variants interleaved round by round, each +1% run from the same",
             "restored state (module docs of `benchmarks/update_start.py`). \"others\" = the most cores other",
             "processes kept busy during any run of the row (/proc/stat).", ""]
    head = ["variant", "mean wall s", "median wall s", "runs (wall s, in order)", "mean cpu s", "others max"]
    for size in result["sizes"]:
        lines += [f"## {size['documents']:,} documents, +{size['added']} added", ""]
        rows = []
        for v in VARIANTS:
            got = size["add"][v]
            waited = statistics.mean(r["phases"].get("run waited for the embedding worker", 0.0) for r in got)
            vec = statistics.mean(r["stages"].get("vectors", 0.0) for r in got)
            links = statistics.mean(r["stages"].get("links", 0.0) for r in got)
            rows.append([f"+1% update, {v} (vectors written by: {got[-1]['writer']}; waited for the worker {waited:.2f} s, "
                         f"links {links:.2f} s, vectors {vec:.2f} s: means)", *_summary(got)])
        for v, got in size["noop"].items():
            rows.append([f"no-op update, {v}", *_summary(got)])
        lines += [md_table(head, rows), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="300,all", help="documents per corpus: numbers, or 'all' (2,295: the 1x corpus)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-bench-update-start"))
    ap.add_argument("--max-load", type=float, default=1.0)
    ap.add_argument("--max-wait", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "update_start.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    setup_env()
    env = dict(os.environ)
    env.pop("ARBORAG_IMPORT_HELPER", None)
    result: dict[str, Any] = {"command": "python benchmarks/update_start.py " + " ".join(sys.argv[1:]),
                              "date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "commit": git_commit(),
                              "machine_start": machine_line(), "sizes": []}
    for size in args.sizes.split(","):
        wait_for_quiet(args.max_load, args.max_wait)
        n = None if size.strip() == "all" else int(size)
        result["sizes"].append(one_size(args.work / size.strip(), n, args.rounds, env))
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
