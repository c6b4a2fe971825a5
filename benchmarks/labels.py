"""Label precision of the tree's summary labels on the shared HotpotQA and NarrativeQA corpora.

For each corpus: prepare the shared data as a folder of files (``tasks/evaluation/datasets.py``),
build it with ``arborag build --no-prefect`` (default config: sentence leaves, extractive
summaries, labels by c-TF-IDF), then read the published snapshot and measure

- how many summary nodes carry keywords and a title (target: all of them);
- label precision (``tasks/evaluation/labels.py``): the share of a cluster's leaves that contain
  one of its keywords, against the same share for its siblings' keywords, and the margin;
- the time :func:`arborag.tasks.summarize.labels.label_nodes` takes to label the whole tree again.

    python benchmarks/labels.py [--work /tmp/arborag-labels] [--datasets hotpotqa narrativeqa]

Writes benchmarks/results/labels.md and labels.json (command, date, load average, commit);
``--smoke --out DIR/labels.md`` is a tiny check run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, RESULTS, busy_processes, git_commit, machine_line, md_table, setup_env  # noqa: E402


def measure(name: str, work: Path, limit: int | None = None) -> dict:
    import polars as pl

    from arborag.storage.corpus import Corpus
    from arborag.storage.tables import read_table
    from arborag.tasks.evaluation.datasets import prepare_dataset
    from arborag.tasks.evaluation.labels import label_precision_of
    from arborag.tasks.summarize.labels import label_nodes

    prepared = prepare_dataset(name, work / name / "data", data_dir=DATA, limit=limit)
    corpus_dir = work / name / "corpus"
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    proc = subprocess.run([str(Path(sys.executable).parent / "arborag"), "build", str(prepared.corpus_dir), "--corpus", str(corpus_dir), "--no-prefect"],
                          capture_output=True, text=True, check=False)
    build_s = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"build of {name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    snap = Corpus(corpus_dir).published_dir()
    nodes = read_table("nodes", snap / "nodes.parquet", missing_ok=False)
    edges = read_table("edges", snap / "edges.parquet", missing_ok=False)
    df = pl.from_arrow(nodes)
    summaries = df.filter(pl.col("level") > 0)
    labelled = summaries.filter((pl.col("keywords").list.len() > 0) & pl.col("title").is_not_null())
    titled = summaries.filter(pl.col("title").is_not_null() & (pl.col("title") != ""))
    t1 = time.perf_counter()
    label_nodes(nodes, edges)
    label_s = time.perf_counter() - t1
    prec = label_precision_of(corpus_dir)
    examples = (summaries.sort(["level", "n_tokens"], descending=True).group_by("level", maintain_order=True).head(2)
                .select("level", "title", pl.col("keywords").list.head(6).list.join(", ").alias("keywords")).to_dicts())
    return {
        "dataset": name, "documents": prepared.n_files, "leaves": int(df.filter(pl.col("level") == 0).height),
        "summaries": summaries.height, "with_keywords_and_title": labelled.height, "with_title": titled.height,
        "levels": {int(k): int(v) for k, v in df.group_by("level").len().sort("level").iter_rows()},
        "title_sources": dict(summaries.group_by("title_source").len().sort("title_source").iter_rows()),
        "build_s": round(build_s, 1), "load_at_build_start": round(load0, 2), "label_s": round(label_s, 3),
        "precision": prec, "examples": examples,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-labels"))
    ap.add_argument("--datasets", nargs="+", default=["hotpotqa", "narrativeqa"])
    ap.add_argument("--limit", type=int, default=None, help="only the first N questions' documents of each dataset")
    ap.add_argument("--out", type=Path, default=RESULTS / "labels.md", help="the report; the .json is written beside it")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (HotpotQA, 8 questions' documents)")
    args = ap.parse_args()
    if args.smoke:
        args.datasets, args.limit = ["hotpotqa"], 8
    setup_env()
    started = datetime.now(timezone.utc)
    machine0 = machine_line()
    commit = git_commit()  # the code that builds and measures (read before anything runs)
    rows = [measure(name, args.work, args.limit) for name in args.datasets]
    out = {
        "command": "python benchmarks/labels.py " + " ".join(sys.argv[1:]), "date": started.isoformat(timespec="seconds"),
        "machine_at_start": machine0, "machine_at_end": machine_line(), "busy_at_end": busy_processes(), "commit": commit,
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    def f(x: float | None) -> str:
        return "–" if x is None else f"{x:.3f}"

    table = md_table(
        ["corpus", "documents", "leaves", "summaries", "with keywords + title", "clusters compared", "own keywords", "siblings' keywords",
         "margin", "clusters won", "label s", "build s"],
        [[r["dataset"], r["documents"], r["leaves"], r["summaries"], r["with_keywords_and_title"], r["precision"]["clusters"],
          f(r["precision"]["own"]), f(r["precision"]["siblings"]), f(r["precision"]["margin"]),
          "–" if r["precision"]["wins"] is None else f"{r['precision']['wins']:.0%}", f"{r['label_s']:.2f}", f"{r['build_s']:.0f}"] for r in rows],
    )
    levels = md_table(["corpus", "level", "clusters", "own", "siblings'", "margin"],
                      [[r["dataset"], lv, p["clusters"], f(p["own"]), f(p["siblings"]), f(p["margin"])]
                       for r in rows for lv, p in r["precision"]["by_level"].items()])
    ex = md_table(["corpus", "level", "title", "keywords"], [[r["dataset"], e["level"], e["title"], e["keywords"]] for r in rows for e in r["examples"]])
    md = f"""# Label precision of summary labels

Command: `{out['command']}` · date {out['date']} · commit {out['commit']}
Machine at start: {machine0}; at end: {out['machine_at_end']} (other busy processes: {', '.join(out['busy_at_end']) or 'none above 20% at the end'}).
Builds: default config (sentence leaves ≤ 100 tokens, extractive summaries, MiniLM), `arborag build --no-prefect`.

Label precision (tasks/evaluation/labels.py): for each summary node with a sibling, the share of its
leaves that contain one of its own keywords ("own") against the mean share containing one of each
sibling's keywords ("siblings'"); margin = own − siblings', averaged over clusters; "clusters won" =
share of clusters whose own keywords cover more of their leaves. Keywords: the 8 stored per node.

{table}

Per level:

{levels}

Examples (the two largest summaries of each level):

{ex}

"label s" is the time to label the whole tree again from its nodes and edges (the build does it once);
"build s" is the whole cold build on the shared machine (load average above), for scale only.
"""
    args.out.write_text(md, encoding="utf-8")
    print(md)


if __name__ == "__main__":
    main()
