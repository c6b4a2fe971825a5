"""How the arborag build scales with corpus size, and where its time goes.

Usage:
    python benchmarks/build_scaling.py [--base-tokens 250000] [--multipliers 1,2,4] [--profile auto]
    python benchmarks/build_scaling.py --quick          # N = 25k tokens: a small run of a few minutes
    python benchmarks/build_scaling.py --smoke --out /tmp/bs.md   # N = 3k tokens, 1N only: a check run

Builds the tree (extractive summaries, ``run_build(..., use_prefect=False)``) over N, 2N and 4N
tokens (WordPiece) of real text from the evaluation data directory — HotpotQA corpus paragraphs, NarrativeQA
passages, the FinanceBench PDFs' text (pypdf) and Cinderella — and prints the time ratios
(2N/N, 4N/N), the share of time per stage, and the build time against the time to embed the
same leaves alone (the floor: model loaded, no cache).

Corpus construction: the shared texts hold ~190k distinct tokens, so larger corpora are made of
*variants*, never exact repeats (content-addressed caches and document dedupe would collapse
those): replica 0 is the text as published; replica r >= 1 shuffles the paragraphs of all
sources (seeded by r and the size), rotates the sentence order inside every paragraph, drops
one word of every sentence of five words or more, and groups 4-16 paragraphs into a document —
so leaves differ in text and chunk boundaries while the topics (and so the clusters) are real. Each size is built in its own process with a fresh
corpus folder (no embedding cache shared between sizes).

Each size runs in a fresh worker process that first warms up (model load, numba/UMAP JIT for
both the small and the >= 4,096-point NNDescent path) — reported separately, excluded from the
build time. Targets: at >= 1M tokens the whole build <= 1.5x the leaf-embedding time;
4x the corpus <= 4.4x the time. When a target is missed, the biggest size is built once more
under py-spy (or cProfile) and the report says where the time goes.

Writes benchmarks/results/build_scaling.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    busy_processes,
    choose_torch_threads,
    cinderella_text,
    financebench_texts,
    fmt_ratio,
    fmt_s,
    git_commit,
    hotpot_paragraphs,
    instrument_build,
    machine_line,
    md_table,
    narrativeqa_passages,
    setup_env,
    split_sentences,
    timed,
    tree_breakdown,
    verdict,
    wait_for_quiet,
)

FLOOR_TARGET = 1.5
SCALE_TARGET = 4.4
STAGE_ORDER = ("ingest", "segment", "embed", "cluster", "summarize", "summary-embed", "tree-other", "vectors", "sparse", "publish")


# -- corpus ---------------------------------------------------------------------------------------
def load_units() -> list[tuple[str, list[str]]]:
    """(source, sentences) paragraphs from every shared text, in a fixed order."""
    units: list[tuple[str, list[str]]] = []
    for _, sents in hotpot_paragraphs():
        units.append(("hotpotqa", sents))
    for passage in narrativeqa_passages():
        for para in passage.split("\n"):
            s = split_sentences(para)
            if s:
                units.append(("narrativeqa", s))
    for para in cinderella_text().split("\n"):
        s = split_sentences(para)
        if s:
            units.append(("cinderella", s))
    for _, text in financebench_texts():
        # PDF text comes as lines (tables, headings); group ~600 characters of lines into a unit
        buf: list[str] = []
        size = 0
        for line in text.splitlines():
            line = line.strip()
            if not line:
                continue
            buf.append(line)
            size += len(line)
            if size >= 600:
                units.append(("financebench", split_sentences(" ".join(buf)) or [" ".join(buf)]))
                buf, size = [], 0
        if buf:
            units.append(("financebench", split_sentences(" ".join(buf)) or [" ".join(buf)]))
    return units


def _drop_a_word(sentence: str, rng: random.Random) -> str:
    """The sentence without one of its words (seeded), when it has at least five.

    Rotating and regrouping alone repeat chunks once a corpus holds more than a few replicas
    (a one-sentence paragraph is the same in every replica), and the build collapses repeated
    texts into one leaf; one dropped word per sentence keeps every variant's chunks distinct."""
    words = sentence.split(" ")
    if len(words) < 5:
        return sentence
    del words[rng.randrange(len(words))]
    return " ".join(words)


def replica_docs(units: list[tuple[str, list[str]]], replica: int, seed: int) -> list[str]:
    """Documents of one replica: 0 = the texts as published (grouped by source), r >= 1 = a variant."""
    if replica == 0:
        docs: list[str] = []
        by_src: dict[str, list[str]] = defaultdict(list)
        for src, sents in units:
            by_src[src].append(" ".join(sents))
        for paras in by_src.values():
            for i in range(0, len(paras), 10):
                docs.append("\n\n".join(paras[i : i + 10]))
        return docs
    rng = random.Random(seed * 1000 + replica)
    order = list(range(len(units)))
    rng.shuffle(order)
    paras = []
    for i in order:
        sents = units[i][1]
        if len(sents) > 1:
            k = 1 + (replica - 1 + i) % (len(sents) - 1)
            sents = sents[k:] + sents[:k]
        paras.append(" ".join(_drop_a_word(s, rng) for s in sents))
    docs = []
    pos = 0
    while pos < len(paras):
        n = rng.randint(4, 16)
        docs.append("\n\n".join(paras[pos : pos + n]))
        pos += n
    return docs


def make_corpus(target_tokens: int, size_index: int, out_dir: Path) -> dict[str, Any]:
    """Write documents of >= ``target_tokens`` WordPiece tokens into ``out_dir``; returns stats."""
    from arborag.tokenizer import get_tokenizer

    tok = get_tokenizer()
    units = load_units()
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    total = 0
    n_docs = 0
    replica = 0
    seen: set[str] = set()
    while total < target_tokens:
        docs = replica_docs(units, replica, seed=size_index + 1)
        counts = tok.count_many(docs)
        for d, c in zip(docs, counts):
            if total >= target_tokens:
                break
            if d in seen:
                continue
            seen.add(d)
            (out_dir / f"doc-{n_docs:05d}.txt").write_text(d, encoding="utf-8")
            n_docs += 1
            total += int(c)
        replica += 1
    return {"tokens": total, "docs": n_docs, "replicas": replica, "chars": sum(len(d) for d in seen)}


# -- worker: one size in a fresh process ----------------------------------------------------------
def worker(args: argparse.Namespace) -> None:
    setup_env()
    out: dict[str, Any] = {"docs_dir": str(args.docs), "corpus": str(args.corpus)}
    with timed("imports") as t:
        import numpy as np

        from arborag.config import ArboragConfig
        from arborag.flows.build import leaves_for, run_build
        from arborag.storage.corpus import Corpus
        from arborag.embed.model import Embedder
        from arborag.tasks.cluster import fit as clustering
    out["imports_s"] = t.wall
    cfg = ArboragConfig()
    if args.threads not in ("default", "none", "0", "auto"):
        cfg = cfg.with_overrides(embed={"threads": int(args.threads)})
    out["torch_threads"] = cfg.embed.threads
    floor_embedder = Embedder(cfg.embed)
    with timed("model") as t:
        floor_embedder.embed(["warm up"] * 8)
    out["model_load_s"] = t.wall
    with timed("jit") as t:
        out["jit_small_s"] = clustering.warm_up()
        out["jit_large_s"] = clustering.warm_up(large=True)
        import lancedb  # noqa: F401  (imported lazily by the vectors / sparse stages: a per-process constant)
        import tantivy  # noqa: F401
    out["warmup_s"] = t.wall
    if args.corpus.exists():
        shutil.rmtree(args.corpus)
    sources = [str(args.docs)]
    out["load_before"] = wait_for_quiet(args.wait_load, args.wait_max)
    prof = start_profiler(args)
    with instrument_build() as rec, timed("build") as t:
        summary = run_build(sources, args.corpus, cfg, use_prefect=False, progress=False)
    stop_profiler(prof, args)
    out["build"] = {"wall": t.wall, "cpu": t.cpu, "other_cores": t.other_cores, "load1": t.load1_before}
    out["stages"] = tree_breakdown(rec)
    out["stage_raw"] = rec["stages"]
    out["tree_stats"] = rec["tree_stats"]
    out["calls"] = summary.get("calls")
    from arborag.tasks.tree.build import leaf_embed_texts

    leaves = leaves_for(Corpus(args.corpus).read("chunks"), cfg.segment.strategy)
    texts = leaf_embed_texts(leaves)
    distinct = list(dict.fromkeys(texts))
    out["leaves"] = leaves.num_rows
    out["distinct_leaves"] = len(distinct)
    out["leaf_tokens"] = int(np.asarray(leaves.column("n_tokens").to_numpy()).sum())
    out["levels"] = {str(s["level"]): int(s.get("n_nodes", 0)) for s in rec["tree_stats"]}
    if not args.no_floor:
        with timed("floor") as t:
            floor_embedder.embed(distinct)
        out["floor"] = {"wall": t.wall, "other_cores": t.other_cores, "load1": t.load1_before}
    args.json.write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")


# -- profile ----------------------------------------------------------------------------------------
def start_profiler(args: argparse.Namespace) -> Any:
    """Profile the build only (not imports or warm-up): py-spy attached to this process, or cProfile."""
    if not args.profile_out:
        return None
    if args.profiler == "py-spy":
        import signal  # noqa: F401

        proc = subprocess.Popen(["py-spy", "record", "--pid", str(os.getpid()), "--rate", "20", "--nonblocking",
                                 "--format", "raw", "--output", str(args.profile_out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(2.0)  # let it attach
        if proc.poll() is not None:
            print("py-spy could not attach:", proc.stderr.read().decode(errors="replace")[-500:], flush=True)
            return None
        return proc
    import cProfile

    p = cProfile.Profile()
    p.enable()
    return p


def stop_profiler(prof: Any, args: argparse.Namespace) -> None:
    if prof is None:
        return
    if isinstance(prof, subprocess.Popen):
        import signal

        prof.send_signal(signal.SIGINT)
        try:
            prof.wait(timeout=120)
        except subprocess.TimeoutExpired:
            prof.kill()
        return
    prof.disable()
    prof.dump_stats(str(args.profile_out))


def summarize_pyspy(raw: Path, top: int = 18) -> list[str]:
    """Self and inclusive time per function from py-spy's raw (collapsed) output."""
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        k = int(n)
        total += k
        frames = [f.strip() for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        self_c[_short(frames[-1])] += k
        for f in {_short(f) for f in frames}:
            incl[f] += k
    if not total:
        return ["(no samples)"]
    lines = [f"{total:,} samples.", "", "Inclusive (share of all samples, functions of interest):", ""]
    keys = ("stage_", "run_build", "_run_stages", "build_tree", "cluster_level", "_reduce", "select_k", "_fit_gmm",
            "_raptor_pass", "_guard", "embed_cached", "embed ", "encode", "summarize_many", "_extract", "write_vectors",
            "build_sparse_index", "build_documents", "build_chunks", "segment_text", "fit_transform", "nearest_neighbors",
            "optimize_layout", "fit ", "bic", "count_many", "hash_text", "put_many", "write_table", "publish")
    rows = []
    for name, c in incl.most_common():
        if any(k in name for k in keys):
            rows.append([f"`{name}`", f"{100 * c / total:.1f}%"])
        if len(rows) >= 30:
            break
    lines.append(md_table(["function (file:line)", "inclusive"], rows))
    lines += ["", f"Top {top} by self time (where the CPU is actually spent):", ""]
    lines.append(md_table(["function (file:line)", "self"], [[f"`{n}`", f"{100 * c / total:.1f}%"] for n, c in self_c.most_common(top)]))
    return lines


def _short(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (pkg/file.py:123)"
    if "(" in frame and frame.endswith(")"):
        name, _, loc = frame.partition(" (")
        loc = loc[:-1]
        parts = loc.replace("\\", "/").split("/")
        if "site-packages" in parts:
            parts = parts[parts.index("site-packages") + 1 :]
        elif len(parts) > 2:
            parts = parts[-2:]
        path, _, _lineno = "/".join(parts).rpartition(":")
        return f"{name} ({path})"
    return frame


def summarize_cprofile(path: Path, top: int = 25) -> list[str]:
    import io
    import pstats

    s = io.StringIO()
    st = pstats.Stats(str(path), stream=s)
    st.sort_stats("cumulative").print_stats(top)
    s2 = io.StringIO()
    pstats.Stats(str(path), stream=s2).sort_stats("tottime").print_stats(top)
    return ["```", s.getvalue().strip()[-6000:], "```", "", "```", s2.getvalue().strip()[-6000:], "```"]


# -- driver -------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-tokens", type=int, default=250_000, help="N (WordPiece tokens)")
    ap.add_argument("--multipliers", default="1,2,4")
    ap.add_argument("--quick", action="store_true", help="N = 25k tokens (a small run)")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (N = 3k tokens, 1N only, no profile, no waiting)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/arborag-build-scaling"))
    ap.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                    help="profile the biggest size: when a target is missed (auto), always, or never")
    ap.add_argument("--profiler", choices=("py-spy", "cprofile"), default="py-spy")
    ap.add_argument("--wait-load", type=float, default=2.5)
    ap.add_argument("--wait-max", type=float, default=90.0)
    ap.add_argument("--threads", default="auto",
                    help="torch intra-op threads: N, 'default' (torch's), or 'auto' (1 when the load exceeds the cores at start)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the generated corpora and corpus folders")
    ap.add_argument("--render-only", action="store_true",
                    help="re-render the report from the JSON results (and py-spy profile) already in --workdir")
    # worker mode (internal)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--docs", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--no-floor", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--profile-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    setup_env()
    if args.quick and args.base_tokens == 250_000:
        args.base_tokens = 25_000
    if args.smoke:
        args.base_tokens, args.multipliers, args.profile, args.wait_max = 3_000, "1", "never", 0.0
    if args.out is None:
        args.out = RESULTS / "build_scaling.md"
    if not args.worker and args.threads == "auto":
        t = choose_torch_threads("auto")
        args.threads = str(t) if t else "default"
    mults = [int(m) for m in args.multipliers.split(",")]
    work = args.workdir
    if args.render_only:
        render_only(args, mults, work)
        return
    work.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    load_start = os.getloadavg()
    print(f"machine: {machine_line()}", flush=True)
    results: list[dict[str, Any]] = []
    for i, m in enumerate(mults):
        target = args.base_tokens * m
        docs_dir = work / f"docs-{m}N"
        t0 = time.perf_counter()
        corpus_info = make_corpus(target, i, docs_dir)
        print(f"\n[{m}N] corpus: {corpus_info['tokens']:,} tokens in {corpus_info['docs']} documents "
              f"({corpus_info['replicas']} replica(s)); generated in {time.perf_counter() - t0:.1f} s", flush=True)
        res = run_worker(docs_dir, work / f"corpus-{m}N", work / f"result-{m}N.json", args)
        res.update(mult=m, corpus_info=corpus_info)
        results.append(res)
        b, f = res["build"]["wall"], res.get("floor", {}).get("wall")
        print(f"  build {b:.1f} s, leaves {res['leaves']:,} ({res['distinct_leaves']:,} distinct), levels {res['levels']}, "
              f"leaf embedding alone {fmt_s(f)} s -> build/floor {fmt_ratio(b / f if f else None)}; "
              f"other load {res['build']['other_cores']:.2f} cores", flush=True)
        print("  stages: " + ", ".join(f"{k} {res['stages'][k]:.1f}" for k in STAGE_ORDER), flush=True)

    (work / "results.json").write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    big = results[-1]
    floor_ratio = big["build"]["wall"] / big["floor"]["wall"] if big.get("floor") else None
    scale = big["build"]["wall"] / results[0]["build"]["wall"] if len(results) > 1 else None
    missed = (floor_ratio is not None and floor_ratio > FLOOR_TARGET) or (scale is not None and scale > SCALE_TARGET)
    profile_lines: list[str] = []
    if args.profile == "always" or (args.profile == "auto" and missed):
        print(f"\nprofiling the biggest size with {args.profiler} ...", flush=True)
        profile_lines = run_profile(work / f"docs-{mults[-1]}N", work / f"corpus-{mults[-1]}N-profile", work, args)
    report = render(args, results, profile_lines, load_start=load_start, elapsed=time.time() - t_start)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print("\n" + report)
    print(f"written to {args.out}")
    if not args.keep:
        for p in work.glob("corpus-*"):
            shutil.rmtree(p, ignore_errors=True)


def _worker_cmd(docs: Path, corpus: Path, out_json: Path, args: argparse.Namespace, *, floor: bool = True) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--docs", str(docs), "--corpus", str(corpus),
           "--json", str(out_json), "--wait-load", str(args.wait_load), "--wait-max", str(args.wait_max), "--threads", str(args.threads)]
    if not floor:
        cmd.append("--no-floor")
    return cmd


def run_worker(docs: Path, corpus: Path, out_json: Path, args: argparse.Namespace) -> dict[str, Any]:
    out_json.unlink(missing_ok=True)
    proc = subprocess.run(_worker_cmd(docs, corpus, out_json, args), cwd=str(Path(__file__).resolve().parents[1]), check=False)
    if proc.returncode != 0 or not out_json.exists():
        raise SystemExit(f"worker failed for {docs} (exit {proc.returncode})")
    return json.loads(out_json.read_text(encoding="utf-8"))


def run_profile(docs: Path, corpus: Path, work: Path, args: argparse.Namespace) -> list[str]:
    out_json = work / "result-profile.json"
    repo = str(Path(__file__).resolve().parents[1])
    lines: list[str] = []
    profilers = ["py-spy", "cprofile"] if args.profiler == "py-spy" and shutil.which("py-spy") else ["cprofile"]
    for profiler in profilers:
        raw = work / ("profile.pyspy.txt" if profiler == "py-spy" else "profile.cprofile")
        raw.unlink(missing_ok=True)
        out_json.unlink(missing_ok=True)
        cmd = _worker_cmd(docs, corpus, out_json, args, floor=False) + ["--profile-out", str(raw), "--profiler", profiler]
        proc = subprocess.run(cmd, cwd=repo, check=False)
        if proc.returncode == 0 and raw.exists() and raw.stat().st_size > 0:
            if profiler == "py-spy":
                lines = [("py-spy (20 Hz, attached to the worker for the build only — imports and warm-up excluded; Python "
                         f"stacks of all threads, time in C/numba code counts for the Python frame that called it). Raw: `{raw}`."), ""]
                lines += summarize_pyspy(raw)
            else:
                lines = [f"cProfile around the build only (deterministic; adds overhead to Python-heavy code). Raw: `{raw}`.", ""]
                lines += summarize_cprofile(raw)
            break
        print(f"{profiler} produced no profile; trying the next profiler", flush=True)
    if out_json.exists():
        res = json.loads(out_json.read_text(encoding="utf-8"))
        lines = [f"Profiled build ({res.get('corpus_tokens', 'biggest size')}): "
                 f"{res['build']['wall']:.1f} s wall under the profiler, stages: "
                 + ", ".join(f"{k} {res['stages'][k]:.1f} s" for k in STAGE_ORDER), ""] + lines
    shutil.rmtree(corpus, ignore_errors=True)
    return lines


def render_only(args: argparse.Namespace, mults: list[int], work: Path) -> None:
    from arborag.tokenizer import get_tokenizer

    tok = get_tokenizer()
    combined = work / "results.json"
    if combined.exists():
        results = json.loads(combined.read_text(encoding="utf-8"))
    else:
        results = []
        for m in mults:
            res = json.loads((work / f"result-{m}N.json").read_text(encoding="utf-8"))
            files = sorted((work / f"docs-{m}N").glob("*.txt"))
            texts = [f.read_text(encoding="utf-8") for f in files]
            res.update(mult=m, corpus_info={"tokens": int(sum(tok.count_many(texts))), "docs": len(files),
                                            "chars": sum(len(t) for t in texts)})
            results.append(res)
    lines: list[str] = []
    raw = work / "profile.pyspy.txt"
    if raw.exists() and raw.stat().st_size:
        lines = [("py-spy (20 Hz, attached to the worker for the build only — imports and warm-up excluded; Python "
                 f"stacks of all threads, time in C/numba code counts for the Python frame that called it). Raw: `{raw}`."), ""]
        lines += summarize_pyspy(raw)
        pj = work / "result-profile.json"
        if pj.exists():
            res = json.loads(pj.read_text(encoding="utf-8"))
            lines = [f"Profiled build (biggest size, run again): {res['build']['wall']:.1f} s wall under the profiler, stages: "
                     + ", ".join(f"{k} {res['stages'][k]:.1f} s" for k in STAGE_ORDER), ""] + lines
    started = os.path.getmtime(work / f"docs-{mults[0]}N")
    report = render(args, results, lines, load_start=None,
                    elapsed=max(os.path.getmtime(p) for p in work.glob("result-*.json")) - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print(report)
    print(f"written to {args.out}")


def render(args: argparse.Namespace, results: list[dict[str, Any]], profile_lines: list[str], *,
           load_start: tuple[float, float, float] | None, elapsed: float) -> str:
    L: list[str] = []
    base = results[0]
    L.append("# arborag build scaling (extractive summaries, no Prefect)")
    L.append("")
    cmd = "python benchmarks/build_scaling.py" + (" --quick" if args.quick else "") + f" --threads {args.threads}" + \
        (f" --base-tokens {args.base_tokens}" if not args.quick and args.base_tokens != 250_000 else "")
    L.append(f"Command: `{cmd}` (run {time.strftime('%Y-%m-%d %H:%M')}, {elapsed / 60:.1f} min)")
    L.append("")
    if load_start is not None:
        L.append(f"- Machine: {machine_line()}; load average at start {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f}.")
        busy = busy_processes()
        if busy:
            L.append(f"- Other busy processes at the end: {', '.join(busy)}.")
    else:
        L.append(f"- Machine: {machine_line()} (report re-rendered from saved results; 1-min load just before each build: "
                 + ", ".join(f"{r['mult']}N {float(r.get('load_before', 0)):.2f}" for r in results) + ").")
    L.append(f"- commit: {git_commit()}. Default config (sentence leaves <= 100 tokens, bf16 MiniLM, batch 32, "
             "coarse-to-fine BIC, extractive summaries, embedded tantivy BM25).")
    L.append("- Corpus: HotpotQA paragraphs, NarrativeQA passages, FinanceBench PDF text (pypdf), Cinderella; sizes beyond the "
             "~190k distinct tokens are variants (shuffled paragraphs, rotated sentence order, regrouped documents), never exact "
             "repeats. Every size: fresh process, fresh corpus folder (no embedding cache), `run_build(..., use_prefect=False)`.")
    L.append("- Excluded from build time, reported: imports, model load, numba/UMAP JIT warm-up "
             "(`tasks.cluster.fit.warm_up()` + `warm_up(large=True)`). Stage times: wrappers around the flow's stage functions "
             "plus `build_tree`'s per-level `cluster_s` / `summarize_s` / `embed_s`.")
    L.append(f"- torch intra-op threads: {args.threads} (`--threads`; 'default' = torch's own; on this busy 2-core box 2 threads "
             "made embedding many times slower than 1 thread whenever another process held a core).")
    L.append("- Floor: the same distinct leaf texts embedded alone by a loaded `Embedder` (no cache), right after the build, in the same process.")
    L.append("")
    rows = []
    for r in results:
        b = r["build"]["wall"]
        f = r.get("floor", {}).get("wall")
        rows.append([
            f"{r['mult']}N", f"{r['corpus_info']['tokens']:,}", f"{r['corpus_info']['docs']:,}",
            f"{r['leaves']:,} ({r['distinct_leaves']:,})",
            ", ".join(f"{v:,}" for k, v in sorted(r["levels"].items(), key=lambda kv: int(kv[0])) if int(k) > 0),
            fmt_s(b), fmt_ratio(b / base["build"]["wall"]),
            fmt_s(f), fmt_ratio(b / f if f else None),
            f"{1000 * b / r['distinct_leaves']:.1f}",
            fmt_ratio((b / r["distinct_leaves"]) / (base["build"]["wall"] / base["distinct_leaves"])),
            f"{r['build']['other_cores']:.2f}",
            f"{r['jit_small_s']:.0f} + {r['jit_large_s']:.0f}",
        ])
    L.append(md_table(["size", "tokens", "docs", "leaves (distinct)", "summaries per level", "build s", "vs N",
                       "leaf embedding alone s", "build / floor", "ms per distinct leaf", "per-leaf cost vs N",
                       "other load (cores)", "JIT warm-up s (small + NNDescent)"], rows))
    L.append("")
    L.append("Leaves that are exact duplicates (a paragraph whose variant chunk came out identical) are embedded once by the "
             "build (content-addressed) and once by the floor (distinct texts); clustering fits distinct vectors once. "
             "The per-distinct-leaf columns normalise for that.")
    L.append("")
    L.append("### Share of build time per stage")
    L.append("")
    rows = []
    for r in results:
        b = r["build"]["wall"]
        st = r["stages"]
        acc = sum(st.values())
        rows.append([f"{r['mult']}N"] + [f"{fmt_s(st[k])} ({100 * st[k] / b:.0f}%)" for k in STAGE_ORDER] + [f"{fmt_s(b - acc)}"])
    L.append(md_table(["size", *STAGE_ORDER, "unaccounted"], rows))
    L.append("")
    L.append("### Stage time ratios (vs N)")
    L.append("")
    rows = []
    for k in STAGE_ORDER:
        row = [k]
        for r in results[1:]:
            den = base["stages"][k]
            row.append(fmt_ratio(r["stages"][k] / den) if den > 0.05 else "—")
        rows.append(row)
    L.append(md_table(["stage", *[f"{r['mult']}N / N" for r in results[1:]]], rows))
    L.append("")
    L.append("### Tree levels (biggest size)")
    L.append("")
    big = results[-1]
    rows = []
    for s in big["tree_stats"]:
        if s.get("level", 0) < 1:
            continue
        rows.append([s["level"], s.get("n_input"), s.get("n_clusters"), s.get("global_k", "—"),
                     fmt_s(s.get("cluster_s")), fmt_s(s.get("umap_s")), fmt_s(s.get("gmm_s")), s.get("umap_fits"), s.get("gmm_fits"),
                     s.get("reclustered"), s.get("cut"), fmt_s(s.get("summarize_s")), fmt_s(s.get("embed_s"))])
    L.append(md_table(["level", "nodes in", "clusters", "global k", "cluster s", "UMAP s", "GMM s", "UMAP fits", "GMM fits",
                       "re-clustered", "cut", "summarize s", "embed s"], rows))
    L.append("")
    f_big = big.get("floor", {}).get("wall")
    if f_big:
        st = big["stages"]
        b = big["build"]["wall"]
        lv = [x for x in big["tree_stats"] if x.get("level", 0) >= 1]
        umap_s = sum(float(x.get("umap_s") or 0) for x in lv)
        gmm_s = sum(float(x.get("gmm_s") or 0) for x in lv)
        n_sum = sum(int(x.get("n_nodes") or 0) for x in lv)
        rest = b - st["embed"] - st["cluster"] - st["summary-embed"]
        L.append("### Where the time goes (biggest size)")
        L.append("")
        L.append(f"- Build {fmt_s(b)} s = leaf embedding {fmt_s(st['embed'])} s (the floor alone took {fmt_s(f_big)} s) "
                 f"+ clustering {fmt_s(st['cluster'])} s ({100 * st['cluster'] / b:.0f}%: UMAP {fmt_s(umap_s)} s, GMM/BIC {fmt_s(gmm_s)} s) "
                 f"+ summary embedding {fmt_s(st['summary-embed'])} s ({100 * st['summary-embed'] / b:.0f}%, {n_sum:,} summaries) "
                 f"+ everything else {fmt_s(rest)} s ({100 * rest / b:.0f}%: ingest, segment, summarize, Parquet, LanceDB, tantivy, publish).")
        over = b - f_big
        L.append(f"- Beyond the floor: {fmt_s(over)} s; to reach ≤ {FLOOR_TARGET}× the build must lose "
                 f"{fmt_s(max(0.0, b - FLOOR_TARGET * f_big))} s. Clustering is {100 * st['cluster'] / over:.0f}% of the excess, "
                 f"summary embedding {100 * st['summary-embed'] / over:.0f}%.")
        L.append("")
    L.append("## Against the targets")
    L.append("")
    f = big.get("floor", {}).get("wall")
    L.append(f"- Whole build / leaf embedding at {big['corpus_info']['tokens']:,} tokens: "
             f"{verdict(big['build']['wall'] / f if f else None, FLOOR_TARGET, at_least=False)}"
             + ("" if big["corpus_info"]["tokens"] >= 1_000_000 else " (below 1M tokens: the target is stated for >= 1M)") + ".")
    for r in results[1:]:
        ratio = r["build"]["wall"] / base["build"]["wall"]
        tgt = SCALE_TARGET * r["mult"] / 4
        L.append(f"- {r['mult']}× the corpus: {verdict(ratio, tgt, at_least=False)}"
                 + (" (target 4.4× for 4×; scaled linearly for other multipliers)" if r["mult"] != 4 else "") + ".")
    L.append("")
    if profile_lines:
        L.append("## Profile of the biggest size")
        L.append("")
        L += profile_lines
        L.append("")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
