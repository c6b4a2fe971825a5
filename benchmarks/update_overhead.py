"""The small update's own seconds (issue 26): a CLI ``arborag update`` of +1% documents, side by
side for two (or more) installs of arborag, in fresh processes, on the same corpus.

Corpus: the 1x HotpotQA corpus of ``benchmarks/cold_path.py`` (its ``pieces(1)``: 99% form the base,
the last 1% is what the update adds). The base corpus is built once, by the first variant's
``arborag build`` (a fresh process, default settings; its wall seconds are reported as the cold
build the ratios are taken against), and copied aside. Then, for every round and every variant
(the order alternates each round, so neither always runs first): the base corpus and sources are
restored (``cp -a``: same paths, same file stats), the pool of new documents is added and
``<variant's arborag> update SRC --corpus C`` runs in a fresh process with the default settings
(the embedding worker as a user gets it). Reported per run: wall, CPU, other processes' cores
meanwhile (/proc/stat), the stage seconds and phases from the ``runs`` table, and a hash of what
the update published (nodes without ``created_by_run`` — a run id —, edges, links, chunks), which
must be the same for every variant.

Variants are ``LABEL=PATH`` to an ``arborag`` console script (another checkout's venv), e.g.::

    python benchmarks/update_overhead.py --variant before=/tmp/base-venv/bin/arborag \
        --variant after=.venv/bin/arborag --rounds 3

(default: the ``arborag`` beside this interpreter, label ``this tree``). Writes
``benchmarks/results/update_overhead.md`` and ``.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, busy_processes, git_commit, machine_line, md_table, setup_env  # noqa: E402
from cold_path import last_run, pieces, run_child  # noqa: E402

ORDER = ("plan", "segment", "embed", "tree-update", "vectors", "sparse", "links", "publish")


def prepare(work: Path, arborag: str, env: dict[str, str], rebuild: bool) -> dict[str, Any]:
    """The base corpus (built once) and the pool of added documents; the build's row."""
    base_src, pool, base_corpus = work / "src-base", work / "pool", work / "corpus-base"
    info_path = work / "build.json"
    if not rebuild and info_path.exists() and base_corpus.is_dir():
        return json.loads(info_path.read_text(encoding="utf-8"))
    allp = pieces(1)
    one = max(1, round(len(allp) * 0.01))
    base, added = allp[: len(allp) - one], allp[len(allp) - one:]
    for d in (base_src, pool, base_corpus, work / "src", work / "corpus"):
        shutil.rmtree(d, ignore_errors=True)
    for d, items in ((work / "src", base), (pool, added)):
        d.mkdir(parents=True)
        for name, text in items:
            (d / name).write_text(text, encoding="utf-8")
    # built at the paths the updates use (uris are absolute), then copied aside with their stats
    row = run_child([arborag, "build", str(work / "src"), "--corpus", str(work / "corpus")], "cold build (base corpus)", env)
    row.pop("stdout", None)
    subprocess.run(["cp", "-a", str(work / "src"), str(base_src)], check=True)
    subprocess.run(["cp", "-a", str(work / "corpus"), str(base_corpus)], check=True)
    info = {"documents": len(base), "added": len(added), "build": row, "built_with": arborag,
            "at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    info_path.write_text(json.dumps(info, indent=1), encoding="utf-8")
    return info


def reset(work: Path) -> None:
    for d in ("src", "corpus"):
        shutil.rmtree(work / d, ignore_errors=True)
    subprocess.run(["cp", "-a", str(work / "src-base"), str(work / "src")], check=True)
    subprocess.run(["cp", "-a", str(work / "corpus-base"), str(work / "corpus")], check=True)
    subprocess.run(["cp", "-a", f"{work / 'pool'}/.", str(work / "src")], check=True)


def published_hash(corpus: Path) -> str:
    """Content hash of the published snapshot's tables (nodes without the run id column)."""
    import pyarrow.parquet as pq

    snap = corpus / "snapshots" / json.loads((corpus / "manifest.json").read_text())["snapshot"]
    h = hashlib.sha256()
    for name in ("nodes", "edges", "links", "chunks"):
        path = snap / f"{name}.parquet"
        if not path.exists():
            continue
        t = pq.read_table(path)
        if "created_by_run" in t.column_names:
            t = t.drop(["created_by_run"])
        h.update(name.encode())
        h.update(json.dumps(t.to_pylist(), sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


# --in-process: the run alone, in a process whose model is loaded (and lancedb imported) first, the
# embedding in-process (ARBORAG_EMBED_WORKER=0): the update's own work without the start-up and
# without the embedding worker's import racing it — what the variants' code changes, less noisy.
IN_PROCESS = r'''
import json, os, sys, time
os.environ["ARBORAG_EMBED_WORKER"] = "0"
from arborag.env import offline_env
offline_env()
from arborag.config import load_config
cfg = load_config(None)
from arborag.embedder import preload
thread = preload(cfg.embed)
if thread is not None:
    thread.join()
import lancedb  # noqa: F401  (both variants' runs start with it imported)
from arborag.flows.update import run_update
t0 = time.perf_counter()
out = run_update([sys.argv[1]], sys.argv[2], cfg, use_prefect=False)
print(json.dumps({"run_wall": time.perf_counter() - t0, "mode": out.get("mode")}))
'''


def one_update(work: Path, label: str, arborag: str, env: dict[str, str], in_process: bool = False) -> dict[str, Any]:
    reset(work)
    if in_process:
        python = str(Path(arborag).parent / "python")
        row = run_child([python, "-c", IN_PROCESS, str(work / "src"), str(work / "corpus")], f"in-process update +1% [{label}]", env)
        row["run_wall"] = json.loads(row["stdout"].strip().splitlines()[-1])["run_wall"]
    else:
        row = run_child([arborag, "update", str(work / "src"), "--corpus", str(work / "corpus")], f"update +1% [{label}]", env)
    row.pop("stdout", None)
    run = last_run(work / "corpus")
    counts = run["counts"]
    return {"variant": label, **row, "run_s": run["seconds"], "stages": counts.get("seconds", {}), "phases": counts.get("phases", {}),
            "age_at_start": counts.get("process_age_at_start"), "mode": counts.get("mode"), "published": published_hash(work / "corpus")}


def markdown(result: dict[str, Any]) -> str:
    build = result["build"]["build"]
    variants = [v for v, _ in result["variants"]]
    runs = result["runs"]
    in_process = result.get("in_process")
    lines = [
        "# The small update's own seconds: " + ("the update run in a warm process (model loaded, embedding in-process)" if in_process
                                                  else "CLI `arborag update`") + " of +1% (issue 26)",
        "",
        f"Generated by `{result['command']}` on {result['date']}, commit {result['commit']}.  ",
        f"Machine at start: {result['machine_start']}  ",
        f"Machine at end: {result['machine_end']}  ",
        f"Other busy processes at end: {', '.join(result['busy_end']) or 'none above 20% CPU'}  ",
        "**The machine was shared** (two other engineers' builds and tests on the same 2 cores): every number here is",
        "inflated by that load and noisy; compare the variants with each other (interleaved rounds), not with an idle run.",
        "",
        f"Corpus: {result['build']['documents']:,} HotpotQA documents (cold_path.py's 1x) + {result['build']['added']} added. "
        f"Base built once by `{result['build']['built_with']}` at {result['build']['at']}: **{build['wall']:.2f} s** wall "
        f"(others {build.get('other_cores') or 0:.2f} cores) — the cold build the ratios use (same shared machine).",
        "",
        "Variants: " + "; ".join(f"**{v}** = `{p}`" for v, p in result["variants"]),
        "",
        *(["Mode **--in-process**: each run is a fresh Python process that loads the model and imports lancedb first, then times "
           "`run_update` alone (`wall s` below is that run's wall; the embedding runs in-process). Start-up and the embedding "
           "worker are left out: this is the update's own work. Percentages are still of the CLI cold build.", ""] if in_process else []),
        "## Every run",
        "",
    ]
    head = ["round", "variant", "wall s", "cpu s", "others (cores)", "load1", "run s", "start→run s", *ORDER, "published"]
    rows = []
    for r in runs:
        rows.append([r["round"], r["variant"], f"{r.get('run_wall', r['wall']):.2f}", f"{r['cpu']:.2f}", f"{r['other_cores'] or 0:.2f}", f"{r['load1']:.2f}",
                     f"{r['run_s']:.2f}", f"{r['age_at_start'] or 0:.2f}", *(f"{r['stages'].get(s, 0):.3f}" for s in ORDER), r["published"]])
    lines += [md_table(head, rows), "", "## Median per variant", ""]
    head = ["variant", "wall s", "% of cold build", "start→run s", *ORDER, "stages but embed + tree-update"]
    rows = []
    for v in variants:
        mine = [r for r in runs if r["variant"] == v]
        med = lambda xs: statistics.median(xs)  # noqa: E731
        wall = med([r.get("run_wall", r["wall"]) for r in mine])
        rest = med([sum(x for s, x in r["stages"].items() if s not in ("embed", "tree-update")) for r in mine])
        rows.append([v, f"{wall:.2f}", f"{100 * wall / build['wall']:.1f}%", f"{med([r['age_at_start'] or 0 for r in mine]):.2f}",
                     *(f"{med([r['stages'].get(s, 0) for r in mine]):.3f}" for s in ORDER), f"{rest:.3f}"])
    lines += [md_table(head, rows), ""]
    hashes = sorted({r["published"] for r in runs})
    lines.append("Published content (nodes without created_by_run, edges, links, chunks): "
                 + ("**identical** for every run and variant" if len(hashes) == 1 else f"**differs**: {', '.join(hashes)}")
                 + f" (`{hashes[0]}`)." if hashes else "")
    if in_process:
        lines += ["", "`embed` and `tree-update` hold the embedding (leaves; summaries), in-process with the model loaded; "
                  "`start→run` is the process's age at the run's start (model load included) — not the CLI's start-up.", ""]
    else:
        lines += ["", "`embed` and `tree-update` hold the embedding (leaves; summaries), which waits for the embedding worker's "
                  "torch import on a cold process; the other stages and start→run are the update's own work.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", default=[], help="LABEL=PATH of an arborag console script (repeat)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/arborag-bench-update-overhead")
    ap.add_argument("--rebuild", action="store_true", help="build the base corpus again even if --work holds one")
    ap.add_argument("--out", default=str(RESULTS / "update_overhead.md"))
    ap.add_argument("--in-process", action="store_true",
                    help="time the run alone in a process with the model loaded first (embedding in-process): the update's own work")
    ap.add_argument("--report-only", metavar="JSON", help="re-render the markdown of a saved .json (nothing is run)")
    args = ap.parse_args()
    if args.report_only:
        saved = json.loads(Path(args.report_only).read_text(encoding="utf-8"))
        Path(args.report_only).with_suffix(".md").write_text(markdown(saved), encoding="utf-8")
        print(f"wrote {Path(args.report_only).with_suffix('.md')}")
        return
    setup_env()
    env = dict(os.environ)
    variants = [tuple(v.split("=", 1)) for v in args.variant] or [("this tree", str(Path(sys.executable).parent / "arborag"))]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    machine_start = machine_line()
    build = prepare(work, variants[0][1], env, args.rebuild)
    runs = []
    for rnd in range(1, args.rounds + 1):
        order = variants if rnd % 2 else variants[::-1]
        for label, path in order:
            runs.append({"round": rnd, **one_update(work, label, path, env, args.in_process)})
    result = {
        "command": "python benchmarks/update_overhead.py " + " ".join(sys.argv[1:]),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": git_commit(),
        "machine_start": machine_start, "machine_end": machine_line(), "busy_end": busy_processes(),
        "variants": variants, "build": build, "runs": runs, "in_process": args.in_process,
    }
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    out.write_text(markdown(result), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
