"""The evaluation tables of docs/EVALUATION.md, re-run and written with their provenance.

    python benchmarks/eval_tables.py --datasets hotpotqa,narrativeqa,financebench,thematic

For each dataset: ``arborag eval DATASET --strategies sentence --systems ...`` (the real build and
query path, one build per dataset) into ``--work``, then ``benchmarks/results/eval_tables.md`` =
a header (this command, date, load average before and after, commit, whether an LLM was
configured) + a section per dataset: its eval command and the run's own ``summary.md``.
``--smoke --out DIR/eval_tables.md`` is a tiny check run. Without an LLM the rows of the LLM searchers
are renamed where they appear — ``level (no LLM)`` (LevelRAG's offline plan) and ``multi (no LLM:
PRF)`` (RM3 pseudo-relevance-feedback variants) — so no table passes them off as the LLM methods.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, REPO, RESULTS, machine_line, provenance_lines  # noqa: E402

SYSTEMS = ("hop,auto,flat,bm25,collapsed,traversal,hybrid,hybrid-rrf,auto-rrf,auto-minmax,auto-tree,auto-summaries,"
           "rerank,level,multi,segments")


def llm_configured() -> bool:
    """Whether ``arborag eval`` would reach an LLM (the LLM searchers read ``summarize.base_url``)."""
    from arborag.config import load_config

    return bool(load_config().summarize.base_url)


def relabel(text: str, llm: bool) -> str:
    """Rename the LLM searchers' rows (table cells and bar labels) when no LLM was configured."""
    if llm:
        return text
    text = re.sub(r"(?m)^\| level \|", "| level (no LLM) |", text)
    return re.sub(r"(?m)^\| multi \|", "| multi (no LLM: PRF) |", text)


def without_data_dir(text: str) -> str:
    """``text`` with this machine's evaluation data folder written as ``DATA_DIR`` (the report
    names the data by its place in that folder, not by a path of the machine that ran it)."""
    for path in sorted({str(DATA), str(DATA.resolve())}, key=len, reverse=True):
        text = text.replace(path, "DATA_DIR")
    return text


def demote(markdown: str) -> str:
    """Every heading one level down, so a run's summary.md sits under its dataset's section."""
    return re.sub(r"(?m)^#", "##", markdown)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="hotpotqa,narrativeqa,financebench,thematic")
    ap.add_argument("--systems", default=SYSTEMS)
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-bench-eval"))
    ap.add_argument("--limit", type=int, default=None, help="only the first N questions of each dataset")
    ap.add_argument("--out", type=Path, default=RESULTS / "eval_tables.md")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (HotpotQA, 3 questions, 3 systems)")
    args = ap.parse_args()
    if args.smoke:
        args.datasets, args.limit, args.systems = "hotpotqa", 3, "flat,bm25,collapsed"
    llm = llm_configured()
    command = "python " + " ".join(["benchmarks/eval_tables.py", *sys.argv[1:]])
    started = datetime.now(timezone.utc)
    load_before = machine_line()
    sections: list[str] = []
    for dataset in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        out = args.work / dataset
        cmd = ["arborag", "eval", dataset, "--out", str(out), "--strategies", "sentence", "--systems", args.systems, "--no-progress",
               "--no-prefect"]
        if args.limit:
            cmd += ["--limit", str(args.limit)]
        t0 = time.perf_counter()
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        done = subprocess.run([str(Path(sys.executable).parent / "arborag"), *cmd[1:]], cwd=REPO, env=env,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-3000:] + done.stderr[:3000] + "\n…\n" + done.stderr[-3000:])
            raise SystemExit(f"{dataset}: arborag eval failed with exit code {done.returncode}")
        summary = without_data_dir((out / "summary.md").read_text(encoding="utf-8"))
        sections.append(f"# {dataset}\n\n`{' '.join(cmd)}` (OMP_NUM_THREADS={env['OMP_NUM_THREADS']}), wall {seconds:.0f} s; "
                        f"the run's own summary.md follows.\n\n" + demote(relabel(summary, llm)))
        print(f"{dataset}: {seconds:.0f} s", flush=True)
    header = "\n".join([
        "# Evaluation tables",
        "",
        *provenance_lines(command, started, load_before),
        "- LLM: " + ("configured (summarize.base_url): `level` and `multi` used it"
                     if llm else "**none configured**: `level` ran LevelRAG's offline plan and `multi` RM3 PRF variants; "
                     "their rows are labelled `level (no LLM)` and `multi (no LLM: PRF)`"),
        "- data: `DATA_DIR` is the evaluation data folder (`arborag eval --data-dir`, `ARBORAG_DATA_DIR`)",
        "",
    ])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(header + "\n" + "\n\n".join(sections), encoding="utf-8")
    print(f"-> {args.out}", flush=True)


if __name__ == "__main__":
    main()
