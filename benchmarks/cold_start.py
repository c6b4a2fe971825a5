"""Benchmark: the cold start of a one-off `arborag query` process, before vs after.

Each run is a fresh interpreter answering one question with ``--json``, as a user's shell
would start it. Side by side in one run, interleaved:

- **before**: a faithful replica of the query path as it was before the cold-start work
  (kept here, since the code changed): the CLI's imports, the config, the snapshot's vectors
  read through ``lancedb`` (``open_table(...).to_arrow()``), edges read eagerly, the question
  embedded by :class:`arborag.embed.model.Embedder` (sentence-transformers), the numpy search
  and the document titles.
- **after**: the real ``arborag query`` of this commit (vectors from ``nodes.arrow`` without
  lancedb, :class:`arborag.embed.light.LightEmbedder`, lazy edges; sparse imports no torch).

Wall time, CPU time (user + sys of the child, from ``wait4``) and peak RSS per run. The
machine is shared (2 cores, other jobs): CPU time is the steadier figure.

    python benchmarks/cold_start.py --corpus /tmp/h9d --runs 3
    (build the corpus first: arborag build examples/corpus --corpus /tmp/h9d --no-prefect;
    without ``--corpus`` the script builds it into ``--work``)
    python benchmarks/cold_start.py --smoke --out /tmp/cs/cold_start.md   # one run each, no server: a check run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import socket
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, RESULTS, busy_processes, fmt_ratio, fmt_s, git_commit, machine_line, md_table, setup_env  # noqa: E402

QUESTION = "How did Cinderella reach her happy ending?"

# The query path before this change, step by step as query/index.py, storage/vectors.py and
# arborag/cli/query.py did it (module-level imports included: pyarrow.parquet, rich.table).
BEFORE = r'''
import json, sys
from pathlib import Path
corpus_dir, mode, text = sys.argv[1], sys.argv[2], sys.argv[3]
import arborag.cli.app  # the CLI's own imports
import pyarrow.parquet as pq
from rich.table import Table
from arborag.cli.common import config_from, offline_env
offline_env()
cfg = config_from(None)
from arborag.query.index import snapshot_embed_config, snapshot_sparse_config
from arborag.storage.corpus import Corpus
from arborag.storage.vectors import TABLE_NAME, VectorStore
import lancedb
corpus = Corpus(corpus_dir)
snap = corpus.published_dir()
info = json.loads((snap / "info.json").read_text(encoding="utf-8"))
lt = lancedb.connect(str(snap / "vectors.lance")).open_table(TABLE_NAME)
store = VectorStore(snap / "vectors.lance", lt.to_arrow(), None)
edges = pq.read_table(snap / "edges.parquet", columns=["parent_id", "child_id"])
children = {}
for p, c in zip(edges.column("parent_id").to_pylist(), edges.column("child_id").to_pylist()):
    children.setdefault(store.row_of[p], []).append(store.row_of[c])
if mode == "sparse":
    from arborag.storage.sparse import open_sparse_index
    sp = open_sparse_index(snap / "sparse", snapshot_sparse_config(info, cfg), corpus_name=None)
    ranked = [(store.row_of[h.node_id], float(h.score)) for h in sp.search(text, k=64, levels=None, doc_ids=None, lucene=False)]
else:
    from arborag.embed.model import Embedder
    vector = Embedder(snapshot_embed_config(info, cfg)).embed([text])[0]
    ranked = store.search(vector, k=64)
out, used = [], 0
for row, score in ranked:
    n = int(store.n_tokens[row])
    if used + n > cfg.query.budget:
        continue
    out.append({"node_id": store.node_ids[row], "score": round(score, 6)})
    used += n
    if used >= cfg.query.budget:
        break
print(json.dumps(out))
'''

AFTER = r'''
import sys
from arborag.cli.app import app
corpus_dir, mode, text = sys.argv[1], sys.argv[2], sys.argv[3]
app(["query", text, "--corpus", corpus_dir, "--mode", mode, "--json"], standalone_mode=False)
'''

# `arborag query --server URL` (the corpus argument carries the URL); the server is started once
# by the benchmark with the model resident and warmed up, as a deployment would run it.
SERVER = r'''
import sys
from arborag.cli.app import app
url, mode, text = sys.argv[1], sys.argv[2], sys.argv[3]
app(["query", text, "--server", url, "--mode", mode, "--json"], standalone_mode=False)
'''

SERVE = r'''
import sys, uvicorn
from arborag.serve import create_app
uvicorn.run(create_app(sys.argv[1], warm=True), host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
'''


@contextmanager
def running_server(corpus: Path) -> Iterator[str]:
    """A real server (uvicorn on 127.0.0.1, model loaded at startup) for the --server runs."""
    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(corpus), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.5)
        httpx.post(url + "/search", json={"text": "warm up"}, timeout=60)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def run_child(code: str, corpus: Path | str, mode: str) -> dict[str, float | list[str]]:
    """One fresh interpreter; its own wall, CPU (user+sys) and peak RSS."""
    with tempfile.TemporaryFile("w+") as fout, tempfile.TemporaryFile("w+") as ferr:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code, str(corpus), mode, QUESTION], stdout=fout, stderr=ferr)
        _, status, usage = os.wait4(proc.pid, 0)  # reaps it: its own rusage
        wall = time.perf_counter() - t0
        proc.returncode = status
        fout.seek(0)
        ferr.seek(0)
        out, err = fout.read(), ferr.read()
    if status != 0:
        raise SystemExit(f"query failed:\n{err[-2000:]}")
    hits = [h["node_id"] for h in json.loads(out)]
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024, "hits": hits}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=None,
                    help="a corpus built by this commit (has nodes.arrow); default: build examples/corpus into --work")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "arborag-bench-cold-start")
    ap.add_argument("--smoke", action="store_true", help="one run per path, no server: a check run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "cold_start.md")
    ap.add_argument("--no-server", action="store_true", help="skip the `arborag query --server` runs")
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.no_server = 1, True
    setup_env()
    if args.corpus is None:
        args.corpus = args.work / "corpus"
        built = subprocess.run([str(Path(sys.executable).parent / "arborag"), "build", str(REPO / "examples" / "corpus"),
                                "--corpus", str(args.corpus), "--no-prefect"], capture_output=True, text=True, check=False)
        if built.returncode != 0:
            raise SystemExit(f"build of examples/corpus failed:\n{built.stdout[-2000:]}\n{built.stderr[-3000:]}")
    load_before = machine_line()
    results: dict[tuple[str, str], list[dict]] = {}
    for mode in ("collapsed", "sparse"):
        for i in range(args.runs):
            for label, code in (("before", BEFORE), ("after", AFTER)):  # interleaved: same load for both
                r = run_child(code, args.corpus, mode)
                results.setdefault((mode, label), []).append(r)
                print(f"{mode:9s} {label:6s} run {i + 1}: wall {r['wall']:.2f} s  cpu {r['cpu']:.2f} s  rss {r['rss_mb']:.0f} MB", flush=True)
    if not args.no_server:
        with running_server(args.corpus) as url:
            for mode in ("collapsed", "sparse"):
                for i in range(args.runs):
                    r = run_child(SERVER, url, mode)
                    results.setdefault((mode, "server"), []).append(r)
                    print(f"{mode:9s} server run {i + 1}: wall {r['wall']:.2f} s  cpu {r['cpu']:.2f} s  rss {r['rss_mb']:.0f} MB", flush=True)
    rows, same = [], {}
    for mode in ("collapsed", "sparse"):
        b, a = results[(mode, "before")], results[(mode, "after")]
        same[mode] = all(x["hits"] == b[0]["hits"] for x in b + a + results.get((mode, "server"), []))
        med = {k: {lab: statistics.median(r[k] for r in results[(mode, lab)]) for lab in ("before", "after")} for k in ("wall", "cpu", "rss_mb")}
        target = 3.0 if mode == "collapsed" else 1.0
        for k, unit in (("wall", "s"), ("cpu", "s"), ("rss_mb", "MB")):
            runs_b = ", ".join(fmt_s(r[k]) if k != "rss_mb" else f"{r[k]:.0f}" for r in b)
            runs_a = ", ".join(fmt_s(r[k]) if k != "rss_mb" else f"{r[k]:.0f}" for r in a)
            ratio = med[k]["before"] / med[k]["after"] if med[k]["after"] else None
            tgt = f"≤ {target:g} s: {'MET' if med[k]['after'] <= target else 'MISSED'}" if k != "rss_mb" else ""
            rows.append([("dense collapsed" if mode == "collapsed" else "sparse"), f"{k} ({unit})", runs_b, runs_a,
                         f"{med[k]['before']:.2f}", f"{med[k]['after']:.2f}", fmt_ratio(ratio), tgt])
        if (mode, "server") in results:
            srv = results[(mode, "server")]
            for k, unit in (("wall", "s"), ("cpu", "s"), ("rss_mb", "MB")):
                m = statistics.median(r[k] for r in srv)
                vals = ", ".join(fmt_s(r[k]) if k != "rss_mb" else f"{r[k]:.0f}" for r in srv)
                rows.append([f"{'dense collapsed' if mode == 'collapsed' else 'sparse'} via --server", f"{k} ({unit})",
                             "", vals, "", f"{m:.2f}", fmt_ratio(med[k]["before"] / m if m else None), "client process only"])
    report = "\n".join([
        "# Cold start of a one-off `arborag query` (before vs after)",
        "",
        f"Generated by `python benchmarks/cold_start.py {' '.join(sys.argv[1:])}` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {git_commit()}.",
        f"Corpus: `arborag build examples/corpus` ({args.corpus}); question: \"{QUESTION}\", default budget.",
        "",
        f"Machine at start: {load_before}  ",
        f"Machine at end: {machine_line()}  ",
        f"Other busy processes at end: {', '.join(busy_processes()) or 'none above 20% CPU'}",
        "",
        "Each run is a fresh interpreter; before/after interleaved in the same run. CPU = user + sys of",
        "the child (wait4); wall includes waiting for cores on a shared 2-core machine, so CPU is",
        "the steadier figure. Ratio = median before / median after.",
        "",
        md_table(["query", "figure", "before runs", "after runs", "before median", "after median", "ratio", "target"], rows),
        "",
        f"Same hits before and after (and via --server) in every run: dense {same['collapsed']}, sparse {same['sparse']}.",
        "The --server rows are the client process only (a running server with the model resident,",
        "started and warmed up once by the benchmark); their ratio is against the before median.",
        "",
        "What each path imports: before, sentence-transformers (torch, transformers, scikit-learn, scipy)",
        "and lancedb; after, a dense query imports torch, safetensors and tokenizers and runs the model on",
        "one thread, a sparse query imports neither torch nor lancedb. (Import times are not measured",
        "by this script; `python -X importtime` shows them.)",
        "",
    ])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
