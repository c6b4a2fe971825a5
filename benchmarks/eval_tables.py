"""The evaluation tables of docs/EVALUATION.md, re-run and written with their provenance.

    python benchmarks/eval_tables.py --datasets hotpotqa,narrativeqa,financebench,thematic

For each dataset: ``arborag eval DATASET --strategies sentence --systems ...`` (the real build and
query path, one build per dataset) into ``--work``, then ``benchmarks/results/eval_<dataset>.md`` =
a header (this command, the eval command, date, load average before and after, commit, whether an
LLM was configured) + the run's own ``summary.md``. Without an LLM the rows of the LLM searchers
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
from _common import REPO, RESULTS, git_commit, machine_line  # noqa: E402

SYSTEMS = ("auto,flat,bm25,collapsed,traversal,hybrid,hybrid-rrf,auto-rrf,auto-minmax,auto-tree,auto-summaries,"
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="hotpotqa,narrativeqa,financebench,thematic")
    ap.add_argument("--systems", default=SYSTEMS)
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-bench-eval"))
    ap.add_argument("--limit", type=int, default=None, help="only the first N questions (a smoke run; results go to eval_<dataset>-smoke.md)")
    args = ap.parse_args()
    llm = llm_configured()
    command = "python " + " ".join(["benchmarks/eval_tables.py", *sys.argv[1:]])
    for dataset in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        out = args.work / dataset
        cmd = ["arborag", "eval", dataset, "--out", str(out), "--strategies", "sentence", "--systems", args.systems, "--no-progress",
               "--no-prefect"]
        if args.limit:
            cmd += ["--limit", str(args.limit)]
        load_before = machine_line()
        started = datetime.now(timezone.utc)
        t0 = time.perf_counter()
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        done = subprocess.run([str(Path(sys.executable).parent / "arborag"), *cmd[1:]], cwd=REPO, env=env,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-3000:] + done.stderr[:3000] + "\n…\n" + done.stderr[-3000:])
            raise SystemExit(f"{dataset}: arborag eval failed with exit code {done.returncode}")
        summary = (out / "summary.md").read_text(encoding="utf-8")
        header = "\n".join([
            f"# Evaluation tables: {dataset}",
            "",
            f"- command: `{command}`; it ran `{' '.join(cmd)}` (OMP_NUM_THREADS={env['OMP_NUM_THREADS']})",
            f"- date: {started:%Y-%m-%d %H:%M} UTC; wall {seconds:.0f} s",
            f"- machine before: {load_before}",
            f"- machine after: {machine_line()}",
            f"- commit: {git_commit()}",
            "- LLM: " + ("configured (summarize.base_url): `level` and `multi` used it"
                         if llm else "**none configured**: `level` ran LevelRAG's offline plan and `multi` RM3 PRF variants; "
                         "their rows are labelled `level (no LLM)` and `multi (no LLM: PRF)`"),
            "",
            "The run's own summary.md follows.",
            "",
        ])
        name = f"eval_{dataset}{'-smoke' if args.limit else ''}.md"
        (RESULTS / name).write_text(header + "\n" + relabel(summary, llm), encoding="utf-8")
        print(f"{dataset}: {seconds:.0f} s -> {RESULTS / name}", flush=True)


if __name__ == "__main__":
    main()
