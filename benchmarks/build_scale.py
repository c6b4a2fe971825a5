"""A cold ``arborag build`` of ~N leaves of real text against the embedding floor of the same texts.

``build_leaves(n, workdir)`` writes a corpus of about ``n`` leaves (the shared evaluation texts,
then seeded *variants* of them as ``build_scaling.py`` makes: shuffled paragraphs, rotated
sentences, one word dropped per sentence, regrouped documents — never exact repeats, nor chunks
that collapse as repeated texts), runs ``arborag build`` in a subprocess
while sampling the peak RSS of its process tree (psutil), then encodes the built leaves' texts
alone in another subprocess (same embedder and batch settings, no cache): the floor.

Returns ``{"leaves", "build_s", "floor_s", "peak_rss_mib", ...}`` plus the per-stage seconds of
the build's run record (``stage_s``), the floor process's peak RSS and its model-load time.

Usage:
    python benchmarks/build_scale.py --leaves 10000 --workdir /tmp/bs
    python benchmarks/build_scale.py --smoke --workdir /tmp/bs      # 600 leaves, no report

The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: WordPiece tokens per leaf, measured on the shared texts with the default segmenter
#: (sentence strategy, 100-token chunks); used only to size the generated corpus.
TOKENS_PER_LEAF = 80.0
SMOKE_LEAVES = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _peak_rss(proc: subprocess.Popen[bytes], poll_s: float = 0.2) -> tuple[int, float]:
    """Wait for ``proc``; return (exit code, peak RSS of its process tree in MiB), sampled every ``poll_s``."""
    import psutil

    peak = 0
    try:
        root = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:
        root = None
    while proc.poll() is None:
        if root is not None:
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                procs = []
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
            peak = max(peak, total)
        time.sleep(poll_s)
    return proc.wait(), peak / 2**20


def _run_measured(cmd: list[str], log: Path) -> tuple[float, float]:
    """Run ``cmd`` (stdout and stderr into ``log``); return (wall seconds, peak RSS MiB). Raises on failure."""
    t0 = time.perf_counter()
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=dict(os.environ))
        box: dict[str, Any] = {}
        th = threading.Thread(target=lambda: box.update(r=_peak_rss(proc)))
        th.start()
        th.join()
    wall = time.perf_counter() - t0
    code, peak = box["r"]
    if code != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited with {code}; log {log}:\n{tail}")
    return wall, peak


def make_leaf_corpus(n: int, docs_dir: Path) -> dict[str, Any]:
    """Documents of about ``n`` leaves of real text (variants past the distinct text)."""
    from build_scaling import make_corpus

    info = make_corpus(int(n * TOKENS_PER_LEAF), 0, docs_dir)
    # the PDF-extracted text holds a few control characters, which ingest rightly refuses as binary
    for path in docs_dir.glob("*.txt"):
        text = path.read_text(encoding="utf-8")
        clean = _CONTROL.sub(" ", text)
        if clean != text:
            path.write_text(clean, encoding="utf-8")
    return info


def _floor(corpus: Path, out: Path) -> None:
    """Subprocess body: encode the built leaves' texts alone (model load timed apart), write JSON."""
    from _common import setup_env

    setup_env()
    from arborag.config import ArboragConfig
    from arborag.flows.build import leaves_for
    from arborag.storage.corpus import Corpus
    from arborag.tasks.embedding.cached import Embedder
    from arborag.tasks.tree.build import leaf_embed_texts

    cfg = ArboragConfig()
    texts = leaf_embed_texts(leaves_for(Corpus(corpus).read("chunks"), cfg.segment.strategy))
    distinct = list(dict.fromkeys(texts))
    emb = Embedder(cfg.embed)
    t0 = time.perf_counter()
    emb.embed(["warm up"] * 8)
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    emb.embed(distinct)
    out.write_text(json.dumps({"encode_s": time.perf_counter() - t0, "model_load_s": load, "texts": len(distinct), "leaves": len(texts)}))


def build_leaves(n: int, workdir: Path) -> dict[str, Any]:
    """Build ~``n`` leaves cold through the CLI and measure the embedding floor; see the module docstring."""
    from arborag.storage.corpus import Corpus

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    docs, corpus = workdir / "docs", workdir / "corpus"
    if corpus.exists():
        import shutil

        shutil.rmtree(corpus)
    t0 = time.perf_counter()
    info = make_leaf_corpus(n, docs)
    gen_s = time.perf_counter() - t0
    arborag = Path(sys.executable).with_name("arborag")
    build_cmd = [str(arborag), "build", str(docs), "--corpus", str(corpus)]
    build_s, peak = _run_measured(build_cmd, workdir / "build.log")
    runs = Corpus(corpus).read("runs").to_pylist()
    counts = json.loads(runs[-1]["counts"]) if runs else {}
    floor_json = workdir / "floor.json"
    floor_cmd = [sys.executable, str(Path(__file__).resolve()), "--floor-of", str(corpus), "--floor-out", str(floor_json)]
    floor_wall, floor_peak = _run_measured(floor_cmd, workdir / "floor.log")
    floor = json.loads(floor_json.read_text())
    return {
        "leaves": floor["leaves"],
        "distinct_leaves": floor["texts"],
        "build_s": round(build_s, 2),
        "floor_s": round(floor["encode_s"], 2),
        "peak_rss_mib": round(peak, 1),
        "ratio": round(build_s / floor["encode_s"], 2) if floor["encode_s"] else None,
        "floor_model_load_s": round(floor["model_load_s"], 2),
        "floor_process_s": round(floor_wall, 2),
        "floor_peak_rss_mib": round(floor_peak, 1),
        "stage_s": counts.get("seconds", {}),
        "docs": info["docs"],
        "tokens": info["tokens"],
        "corpus_gen_s": round(gen_s, 2),
        "load1": round(os.getloadavg()[0], 2),
        "config_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("ARBORAG_")},
    }


def render(rows: list[dict[str, Any]], command: str) -> str:
    from _common import git_commit, md_table

    stages = sorted({k for r in rows for k in r["stage_s"]}, key=lambda k: -max(r["stage_s"].get(k, 0) for r in rows))
    lines = [
        "# Cold build of N leaves against the embedding floor",
        "",
        f"Command: `{command}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ",
        f"Commit: {git_commit()}  ",
        f"Machine: {os.cpu_count()} cores; load average (1 min) after each run in the table",
        "",
        "build = wall time of `arborag build` (a subprocess, cold: imports, model load, no cache);",
        "floor = encoding the distinct leaf texts alone (same embedder and batch settings, model load excluded);",
        "peak RSS = the build's process tree, sampled every 0.2 s.",
        "",
        md_table(["leaves", "distinct leaf texts", "build s", "floor s", "build/floor", "peak RSS MiB", "load1", "settings"],
                 [[f"{r['leaves']:,}", f"{r['distinct_leaves']:,}", r["build_s"], r["floor_s"], r["ratio"], r["peak_rss_mib"], r["load1"],
                   " ".join(f"`{k}={v}`" for k, v in r.get("config_env", {}).items()) or "defaults"] for r in rows]),
        "",
        "Seconds per stage (the build's run record):",
        "",
        md_table(["stage", *[f"{r['leaves']:,}" for r in rows]], [[s, *[r["stage_s"].get(s, "") for r in rows]] for s in stages]),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--leaves", default="10000", help="comma-separated leaf counts, e.g. 10000,30000")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/arborag-build-scale"))
    ap.add_argument("--smoke", action="store_true", help=f"{SMOKE_LEAVES} leaves")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "build_scale.md", help="the Markdown report (overwritten)")
    ap.add_argument("--floor-of", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--floor-out", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--render-from", type=Path, default=None,
                    help="re-render --out from a log of this script (one JSON object per size), without building")
    args = ap.parse_args()
    if args.floor_of:
        _floor(args.floor_of, args.floor_out)
        return
    from _common import setup_env

    setup_env()
    if args.render_from:
        rows = [json.loads(line) for line in dict.fromkeys(args.render_from.read_text(encoding="utf-8").splitlines()) if line.startswith("{")]
        if args.out:
            args.out.write_text(render(rows, "python benchmarks/build_scale.py " + " ".join(sys.argv[1:])), encoding="utf-8")
        return
    sizes = [SMOKE_LEAVES] if args.smoke else [int(x) for x in args.leaves.split(",")]
    rows = []
    for n in sizes:
        r = build_leaves(n, args.workdir / f"n{n}")
        rows.append(r)
        print(json.dumps(r), flush=True)
    if args.out:
        args.out.write_text(render(rows, "python benchmarks/build_scale.py " + " ".join(sys.argv[1:])), encoding="utf-8")
    print(json.dumps(rows[-1]), flush=True)


if __name__ == "__main__":
    main()
