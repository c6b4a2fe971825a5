"""Table transforms before and after polars: node assembly, the update diff, the evaluation
aggregates and the cached-vector read, on synthetic tables shaped like the real ones.

    python benchmarks/tables.py                      # sizes 1e5,1e6; writes benchmarks/results/tables.md
    python benchmarks/tables.py --sizes 1e4 --only diff,vectors --out -   # quick look, no file

BEFORE is the row-loop code the project had before the move to polars, copied below verbatim
from commit 8cf3971 (the commit before the session that moved the transforms) and marked as
such; AFTER is the package's current function, imported. Both run in the same invocation, each
transform and side in a fresh child process (``python benchmarks/tables.py --child ...``) so
one's memory never hides the other's:

- time: wall seconds of the call (best of ``--repeat``; the inputs are built before the clock);
- memory: the RSS high-water mark of the child during the FIRST call minus its RSS just before
  it (the peak is reset with ``/proc/self/clear_refs`` after the inputs are built, freed heap is
  returned with ``malloc_trim`` and Arrow uses the system allocator, so the number is the
  transform's own peak: Python objects, numpy, Arrow and polars alike; not tracemalloc, which
  only sees Python-side allocations and slows row loops down). ``after peak / input`` relates it
  to the bytes of the inputs passed in (tables and matrices): about 1 = one copy of the input
  (typically the output), clearly above 1 = more than one copy held at once.

Before any timing, each transform runs BEFORE and AFTER on the smallest size in one child and
asserts that they give the same result (tables equal, vectors bit-equal), so the ratio compares
two implementations of the same thing. What is stubbed (identically for both sides): node
assembly gets a precomputed clustering, a summarizer that takes the first 200 characters of a
cluster's first child, a seeded random embedder and a ``len // 4`` token counter, so what is
timed is the table work of ``build_tree``, not UMAP, an LLM or a model (its per-cluster loops,
hashing each cluster's node id and calling the summarizer, remain on both sides). Node
assembly uses 64-d vectors by default (``--tree-dim``): both sides copy the matrix the same
number of times, and at 384-d those copies dominate and 10⁶ rows need ~8 GB per side.

The file is long because the baselines are verbatim copies (~400 lines) that must not be tidied.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import logging
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from _common import busy_processes, fmt_ratio, git_commit, machine_line, md_table, setup_env  # noqa: E402

setup_env()

from arborag.config import ClusterConfig, SummarizeConfig, TreeConfig  # noqa: E402
from arborag.errors import BackendUnavailable, ConfigError, LLMError, SchemaError  # noqa: E402
from arborag.hashing import short_id  # noqa: E402
from arborag.storage.schemas import CHUNKS, DOCUMENTS, EDGES, NODES, RESULTS  # noqa: E402
from arborag.storage.tables import conform  # noqa: E402
import arborag.tasks.tree as new_tree  # noqa: E402  (AFTER: imported before any clock starts)
from arborag.storage.arrays import arrow_to_vectors  # noqa: E402
from arborag.tasks.clustering import ClusterStats  # noqa: E402
from arborag.tasks.documents_diff import diff_documents  # noqa: E402
from arborag.tasks.evaluation.aggregate import ANSWER_METRICS, METRICS, aggregate, lazy  # noqa: E402
from arborag.tasks.summarize import ExtractiveSummarizer, Summarizer, SummaryResult  # noqa: E402

log = logging.getLogger("benchmarks.tables")
TRANSFORMS = ("tree", "diff", "eval", "vectors")
TITLES = {
    "tree": "(a) node + edge assembly (build_tree, 2 levels)",
    "diff": "(b) update diff vs the documents table",
    "eval": "(c) evaluation aggregates (4 report tables)",
    "vectors": "(d) cached-vector read (column -> matrix)",
}
BASE_COMMIT = "8cf3971"
SEED = 17


# ================================================================================================
# Synthetic tables
# ================================================================================================
_ALPHABET = np.frombuffer(b"etaoinshrdlucmfwypvbgkqjxz     ", dtype=np.uint8)  # ~1 in 6 is a space


def random_text(n: int, mean_chars: int, rng: np.random.Generator) -> pa.Array:
    """``n`` strings of random letters and spaces (lengths mean_chars/2 .. 3*mean_chars/2), built from
    buffers: consecutive windows of a tiled random pool (1,000,003 chars, so no two texts are equal)."""
    lengths = rng.integers(mean_chars // 2, mean_chars * 3 // 2 + 1, size=n, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.resize(_ALPHABET[rng.integers(0, len(_ALPHABET), size=1_000_003, dtype=np.uint8)], int(offsets[-1]))
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def hex_ids(n: int, rng: np.random.Generator, width: int = 16) -> pa.Array:
    """``n`` random lowercase hex ids (64 random bits for width 16: unique in practice)."""
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)[rng.integers(0, 16, size=n * width, dtype=np.uint8)]
    offsets = (np.arange(n + 1, dtype=np.int32) * width)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(digits)])


def numbered(prefix: str, values: np.ndarray, suffix: str = "") -> pa.Array:
    """``prefix<value>suffix`` strings, without a Python loop."""
    return pc.binary_join_element_wise(prefix, pc.cast(pa.array(values), pa.string()), suffix, "")


def unit_vectors(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal((n, dim), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def chunks_table(n: int, rng: np.random.Generator, *, text_chars: int) -> pa.Table:
    """A CHUNKS table of ``n`` chunks in ~n/20 documents, rows shuffled (chunk stage output is per file)."""
    n_docs = max(1, n // 20)
    doc_of = np.sort(rng.integers(0, n_docs, size=n))
    docs = hex_ids(n_docs, rng)
    starts = np.r_[0, np.flatnonzero(np.diff(doc_of)) + 1]
    ordinal = (np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))).astype(np.int32)
    text = random_text(n, text_chars, rng)
    lengths = pc.binary_length(text).to_numpy().astype(np.int64)
    start_char = (ordinal.astype(np.int64) * text_chars)
    table = pa.table({
        "chunk_id": hex_ids(n, rng), "doc_id": docs.take(pa.array(doc_of)), "section_id": pa.nulls(n, pa.string()),
        "ordinal": ordinal, "start_char": start_char, "end_char": start_char + lengths,
        "n_tokens": (lengths // 4).astype(np.int32), "text": text, "header": pa.nulls(n, pa.string()),
        "strategy": pa.array(np.full(n, "sentence")),
    }, schema=CHUNKS)
    return table.take(pa.array(rng.permutation(n)))


def documents_tables(n: int, rng: np.random.Generator, *, text_chars: int) -> tuple[pa.Table, pa.Table]:
    """(a DOCUMENTS table of ``n`` rows sorted by uri, the sources read now) for the update diff.

    The table: 0.5% error rows, 1% of documents also held at a second uri (``duplicate_uris``).
    Now: 1% of uris deleted, 1% changed, 0.2% failing, half the failed ones read again, 10% of
    the second copies deleted, +1% new uris (a tenth of them copies of known texts); shuffled.
    """
    uri = pc.binary_join_element_wise(numbered("corpus/d", np.arange(n) // 1000, "/"), numbered("f", np.arange(n), ".txt"), "")
    uri = uri.take(pc.sort_indices(uri))
    doc_id = hex_ids(n, rng)
    is_err = rng.random(n) < 0.005
    has_dup = (rng.random(n) < 0.01) & ~is_err
    sha = hex_ids(n, rng)
    dup_uri = pc.binary_join_element_wise(uri, ".copy", "")
    base = pc.binary_join_element_wise('"reader":"0123456789abcdef","source_sha":{"', uri, '":"', sha, '"}}', "")
    with_dup = pc.binary_join_element_wise('{"duplicate_uris":["', dup_uri, '"],', base, "")
    meta = pc.if_else(pa.array(has_dup), with_dup, pc.binary_join_element_wise("{", base, ""))
    err_meta = pc.binary_join_element_wise('{"reader":"0123456789abcdef","source_sha":"', sha, '"}', "")
    text = random_text(n, text_chars, rng)
    existing = pa.table({
        "doc_id": doc_id, "uri": uri, "title": uri, "mime": pa.array(np.full(n, "text/plain")),
        "n_chars": pc.binary_length(text).cast(pa.int64()), "text": pc.if_else(pa.array(is_err), pa.scalar(None, pa.large_string()), text),
        "metadata": pc.if_else(pa.array(is_err), err_meta, meta),
        "ingested_at": pa.array(np.full(n, np.datetime64("2026-11-01T00:00:00", "us"))).cast(pa.timestamp("us", tz="UTC")),
        "status": pa.array(np.where(is_err, "error", "ok")),
        "error": pc.if_else(pa.array(is_err), pa.scalar("unreadable"), pa.scalar(None, pa.string())),
    }, schema=DOCUMENTS)
    # what the sources hold now
    u = rng.random(n)
    keep = u >= 0.01
    changed = (u >= 0.01) & (u < 0.02) & ~is_err
    failing = ((u >= 0.02) & (u < 0.022)) | (is_err & (u < 0.5))
    new_id = pc.if_else(pa.array(changed | is_err), hex_ids(n, rng), doc_id)
    status = np.where(failing, "error", "ok")
    new_id = pc.if_else(pa.array(failing), pa.scalar(None, pa.string()), new_id)
    dup_keep = has_dup & (rng.random(n) >= 0.1)
    n_add = max(1, n // 100)
    copies = pa.array(rng.random(n_add) < 0.1)
    add_ids = pc.if_else(copies, doc_id.take(pa.array(rng.choice(np.flatnonzero(~is_err), n_add))), hex_ids(n_add, rng))
    keep_ix, dup_ix = pa.array(np.flatnonzero(keep)), pa.array(np.flatnonzero(dup_keep))
    incoming = pa.table({
        "uri": pa.chunked_array([uri.take(keep_ix), dup_uri.take(dup_ix), numbered("corpus/new/f", np.arange(n_add), ".txt")]),
        "doc_id": pa.chunked_array([new_id.take(keep_ix), doc_id.take(dup_ix), add_ids]),
        "status": pa.chunked_array([pa.array(status).take(keep_ix), pa.array(np.full(len(dup_ix), "ok")), pa.array(np.full(n_add, "ok"))]),
    })
    return existing, incoming.take(pa.array(rng.permutation(incoming.num_rows))).combine_chunks()


def results_table(n: int, rng: np.random.Generator) -> pa.Table:
    """A RESULTS table of ``n`` rows: 5 strategies x 5 systems x 4 budgets over n/100 questions."""
    def pick(values: Sequence[Any], p: Sequence[float] | None = None) -> np.ndarray:
        return np.asarray(values, dtype=object)[rng.choice(len(values), size=n, p=p)]

    def metric(p_null: float, p_nan: float = 0.0) -> pa.Array:
        x = rng.random(n)
        x[rng.random(n) < p_nan] = np.nan
        return pa.array(x, mask=rng.random(n) < p_null)

    n_levels = rng.integers(3, 12, size=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(n_levels, out=offsets[1:])
    levels = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.choice([0, 0, 0, 1, 1, 2, 3], size=int(offsets[-1])).astype(np.int32)))
    latency = rng.lognormal(3.0, 0.6, size=n)
    cols: dict[str, Any] = {
        "dataset": pa.array(np.full(n, "hotpotqa")),
        "qid": numbered("q", rng.integers(0, max(1, n // 100), size=n)),
        "type": pa.array(pick(["bridge", "comparison", "yes/no", None], [0.5, 0.3, 0.1, 0.1]), pa.string()),
        "strategy": pa.array(pick(["sentence", "ffs", "dfs", "dds", "rcs"]), pa.string()),
        "system": pa.array(pick(["flat", "bm25", "collapsed", "traversal", "hybrid"]), pa.string()),
        "mode": pa.array(pick(["dense", "sparse", "hybrid"]), pa.string()),
        "budget": pa.array(pick([500, 1000, 2000, 4000]).astype(np.int32)),
        "n_hits": pa.array(n_levels.astype(np.int32)),
        "context_tokens": pa.array(rng.integers(100, 4000, size=n).astype(np.int32), mask=rng.random(n) < 0.01),
        "levels": levels,
        "answer_hit": pa.array((rng.random(n) < 0.6).astype(np.float64), mask=rng.random(n) < 0.2),
        **{c: metric(0.01, 0.005) for c in ("recall_at_5", "recall_at_10", "recall_at_budget", "full_support", "mrr", "ndcg_at_10")},
        "level_mix": metric(0.0),
        "latency_ms": pa.array(latency, mask=rng.random(n) < 0.01),
        "embed_ms": pa.array(latency * 0.3, mask=rng.random(n) < 0.3),
        "n_gold": pa.array(np.full(n, 2, dtype=np.int32)), "n_gold_resolved": pa.array(np.full(n, 2, dtype=np.int32)),
        "prediction": pa.nulls(n, pa.string()),
        **{c: metric(0.8) for c in ("f1", "em", "rouge_l", "bleu_1", "bleu_4")},
        "error": pa.array(pick([None, "timeout"], [0.99, 0.01]), pa.string()),
        "config_hash": pa.array(np.full(n, "0123456789abcdef")),
    }
    return pa.table(cols, schema=RESULTS)


def vector_column(n: int, dim: int, rng: np.random.Generator) -> pa.FixedSizeListArray:
    """The ``vector`` column of an embedding-cache shard: fixed_size_list<float32>[dim], one chunk."""
    return pa.FixedSizeListArray.from_arrays(pa.array(unit_vectors(n, dim, rng).reshape(-1)), dim)


# ================================================================================================
# BEFORE: verbatim copies of the row-loop code at commit 8cf3971 (the commit before the session
# that moved these transforms to polars). Only the names changed (old_*), build_tree lost its
# docstring, and the imports point at today's modules (same helpers: short_id, conform, the
# summarizer types). ``cluster_level`` and ``get_tokenizer`` below are the stubs both sides get.
# ================================================================================================
# ---- git show 8cf3971:tasks/tree.py (lines 83-326) ---------------------------------------------
EmbedFn = Callable[[list[str]], np.ndarray]
TreeProgress = Callable[[dict[str, Any]], None] | None


@dataclass
class TreeResult:  # (8cf3971 tasks/tree.py: same fields as today's)
    nodes: pa.Table
    edges: pa.Table
    vectors: np.ndarray
    stats: list[dict[str, Any]]


def old_summary_node_id(level: int, summarizer_name: str, child_ids: Sequence[str]) -> str:
    return short_id("node", level, summarizer_name, sorted(child_ids))


def old_cluster_id(level: int, child_ids: Sequence[str]) -> str:
    return short_id("cluster", level, sorted(child_ids))


@dataclass
class _Node:
    node_id: str
    level: int
    text: str
    n_tokens: int
    doc_ids: tuple[str, ...]
    pos: int  # document-order position: leaf rank, or the smallest position of its children
    summary_of: str | None
    summarizer: str
    status: str


@dataclass
class _Tree:
    """One tree under construction (the corpus, or one document)."""

    current: list[_Node]
    vectors: np.ndarray
    done: bool = False
    nodes: list[_Node] = field(default_factory=list)
    node_vectors: list[np.ndarray] = field(default_factory=list)


def _safe_summaries(summarizer: Summarizer, clusters: list[list[str]], fallback: ExtractiveSummarizer) -> list[SummaryResult]:
    """The summarizer's results, with the extractive fallback wherever it failed."""
    results: list[Any] | None
    reason = ""
    try:
        results = list(summarizer.summarize_many(clusters))
        if len(results) != len(clusters):
            reason = f"fallback:wrong-count-{len(results)}-of-{len(clusters)}"
            results = None
    except (BackendUnavailable, ConfigError, LLMError):
        # No call can succeed (endpoint down, key rejected, model unknown): say so instead of
        # quietly building a whole tree of fallback summaries.
        raise
    except Exception as exc:  # noqa: BLE001 - any other summarizer failure degrades to extractive
        log.warning("summarizer %s failed on %d clusters: %r; using extractive summaries",
                    getattr(summarizer, "name", summarizer), len(clusters), exc)
        reason = f"fallback:{type(exc).__name__}"
        results = None
    if results is None:
        return [SummaryResult(r.text, reason, 0, 0) for r in fallback.summarize_many(clusters)]
    out: list[SummaryResult] = []
    for texts, r in zip(clusters, results):
        has_input = any(t.strip() for t in texts)
        if not isinstance(r, SummaryResult) or not isinstance(r.text, str):
            out.append(SummaryResult(fallback.summarize(texts).text, "fallback:invalid-result", 0, 0))
        elif has_input and not r.text.strip():
            out.append(SummaryResult(fallback.summarize(texts).text, "fallback:empty", r.tokens_in, r.tokens_out))
        else:
            out.append(r)
    return out


def _check_vectors(vectors: np.ndarray, n: int, what: str, dim: int | None = None) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float32)
    if v.ndim != 2 or v.shape[0] != n or (dim is not None and v.shape[1] != dim):
        want = f"({n}, {dim if dim is not None else 'dim'})"
        raise ValueError(f"{what}: expected vectors of shape {want}, got {v.shape}")
    return v


def old_build_tree(
    leaves: pa.Table,
    leaf_vectors: np.ndarray,
    *,
    embed: EmbedFn,
    summarizer: Summarizer,
    cfg: ClusterConfig,
    tree_cfg: TreeConfig,
    run_id: str,
    progress: TreeProgress = None,
) -> TreeResult:
    leaves = conform("chunks", leaves)
    n = leaves.num_rows
    vectors = _check_vectors(leaf_vectors, n, "leaf_vectors")
    dim = vectors.shape[1]
    chunk_ids = leaves.column("chunk_id").to_pylist()
    if len(set(chunk_ids)) != n:
        dup = next(c for i, c in enumerate(chunk_ids) if c in chunk_ids[:i])
        raise SchemaError("chunks", f"chunk_id {dup!r} occurs more than once; deduplicate the chunks before build_tree")
    doc_ids = leaves.column("doc_id").to_pylist()
    ordinals = leaves.column("ordinal").to_pylist()
    starts = leaves.column("start_char").to_pylist()
    order = sorted(range(n), key=lambda i: (doc_ids[i], ordinals[i], starts[i], chunk_ids[i]))
    texts = leaves.column("text").to_pylist()
    n_tokens = leaves.column("n_tokens").to_pylist()
    leaf_nodes = [
        _Node(chunk_ids[i], 0, texts[i], int(n_tokens[i]), (doc_ids[i],), rank, None, "leaf", "leaf")
        for rank, i in enumerate(order)
    ]
    vectors = vectors[order]
    stats: list[dict[str, Any]] = [{"level": 0, "n_nodes": n, "n_docs": len(set(doc_ids))}]
    if progress is not None:
        progress(stats[0])

    if tree_cfg.scope == "document":
        trees: list[_Tree] = []
        start = 0
        for end in range(1, n + 1):
            if end == n or leaf_nodes[end].doc_ids != leaf_nodes[start].doc_ids:
                trees.append(_Tree(leaf_nodes[start:end], vectors[start:end]))
                start = end
    else:
        trees = [_Tree(leaf_nodes, vectors)] if n else []
    for t in trees:
        t.nodes.extend(t.current)
        t.node_vectors.append(t.vectors)

    tokenizer = get_tokenizer()
    summarize_cfg = getattr(summarizer, "cfg", None)
    fallback = ExtractiveSummarizer(summarize_cfg if isinstance(summarize_cfg, SummarizeConfig) else None)
    name = summarizer.name
    edges: list[tuple[str, str, float, int]] = []

    for level in range(1, cfg.max_levels + 1):
        active = [t for t in trees if not t.done and len(t.current) > cfg.dims + 1]
        for t in trees:
            if t not in active:
                t.done = True
        if not active:
            break
        st: dict[str, Any] = {"level": level, "n_trees": len(active), "n_input": sum(len(t.current) for t in active)}
        # 1. cluster every active tree
        t0 = time.perf_counter()
        per_tree: list[list[list[tuple[int, float]]]] = []
        cstats = ClusterStats()
        for t in active:
            cs = ClusterStats()
            per_tree.append(cluster_level(t.vectors, [x.n_tokens for x in t.current], cfg, stats=cs))
            cstats.add(cs)
            if len(active) == 1:
                st["global_k"] = cs.global_k
                st["local_ks"] = cs.local_ks
        st["cluster_s"] = time.perf_counter() - t0
        st.update(umap_s=cstats.umap_s, gmm_s=cstats.gmm_s, gmm_fits=cstats.gmm_fits,
                  umap_fits=cstats.umap_fits, reclustered=cstats.reclustered, cut=cstats.cut)
        # 2. children of every cluster in document order; summarize all at once
        jobs: list[tuple[int, list[tuple[int, float]]]] = []
        for ti, (t, clusters) in enumerate(zip(active, per_tree)):
            for c in clusters:
                jobs.append((ti, sorted(c, key=lambda rp: (t.current[rp[0]].pos, t.current[rp[0]].node_id))))
        cluster_texts = [[active[ti].current[r].text for r, _ in c] for ti, c in jobs]
        t0 = time.perf_counter()
        results = _safe_summaries(summarizer, cluster_texts, fallback)
        st["summarize_s"] = time.perf_counter() - t0
        st["n_clusters"] = len(jobs)
        st["n_fallback"] = sum(1 for r in results if r.status != "ok")
        st["tokens_in"] = sum(r.tokens_in for r in results)
        st["tokens_out"] = sum(r.tokens_out for r in results)
        # 3. embed the summaries (one call for all trees)
        t0 = time.perf_counter()
        new_vecs = _check_vectors(embed([r.text for r in results]), len(results), f"embed() at level {level}", dim)
        st["embed_s"] = time.perf_counter() - t0
        # 4. the new level of each tree
        counts = tokenizer.count_many([r.text for r in results])
        new_by_tree: dict[int, list[tuple[_Node, np.ndarray]]] = {}
        for j, ((ti, c), r) in enumerate(zip(jobs, results)):
            t = active[ti]
            children = [t.current[row] for row, _ in c]
            child_ids = [ch.node_id for ch in children]
            node = _Node(
                node_id=old_summary_node_id(level, name, child_ids),
                level=level,
                text=r.text,
                n_tokens=int(counts[j]),
                doc_ids=tuple(sorted({d for ch in children for d in ch.doc_ids})),
                pos=min(ch.pos for ch in children),
                summary_of=old_cluster_id(level, child_ids),
                summarizer=name,
                status=r.status,
            )
            for (_row, p), ch in zip(c, children):
                edges.append((node.node_id, ch.node_id, float(p), level))
            new_by_tree.setdefault(ti, []).append((node, new_vecs[j]))
        n_new = 0
        for ti, t in enumerate(active):
            items = sorted(new_by_tree.get(ti, []), key=lambda nv: (nv[0].pos, nv[0].node_id))
            nodes_l = [nv[0] for nv in items]
            vecs_l = np.stack([nv[1] for nv in items]) if items else np.zeros((0, dim), np.float32)
            t.nodes.extend(nodes_l)
            t.node_vectors.append(vecs_l)
            n_new += len(nodes_l)
            if len(nodes_l) >= len(t.current) or not nodes_l:
                t.done = True  # the level did not shrink: stop this tree
            t.current, t.vectors = nodes_l, vecs_l
        st["n_nodes"] = n_new
        stats.append(st)
        if progress is not None:
            progress(st)

    # assemble, sorted deterministically
    all_nodes: list[_Node] = [x for t in trees for x in t.nodes]
    all_vecs = np.concatenate([v for t in trees for v in t.node_vectors], axis=0) if trees else np.zeros((0, dim), np.float32)
    idx = sorted(range(len(all_nodes)), key=lambda i: (all_nodes[i].level, all_nodes[i].pos, all_nodes[i].node_id))
    all_nodes = [all_nodes[i] for i in idx]
    all_vecs = np.ascontiguousarray(all_vecs[idx], dtype=np.float32) if idx else all_vecs
    if len({x.node_id for x in all_nodes}) != len(all_nodes):  # pragma: no cover - ids are content hashes
        raise RuntimeError("duplicate node ids in the tree (a chunk id equals a summary id?)")
    nodes = pa.table(
        {
            "node_id": pa.array([x.node_id for x in all_nodes], pa.string()),
            "level": pa.array([x.level for x in all_nodes], pa.int32()),
            "text": pa.array([x.text for x in all_nodes], pa.large_string()),
            "n_tokens": pa.array([x.n_tokens for x in all_nodes], pa.int32()),
            "doc_ids": pa.array([list(x.doc_ids) for x in all_nodes], pa.list_(pa.string())),
            "summary_of": pa.array([x.summary_of for x in all_nodes], pa.string()),
            "summarizer": pa.array([x.summarizer for x in all_nodes], pa.string()),
            "summary_status": pa.array([x.status for x in all_nodes], pa.string()),
            "created_by_run": pa.array([run_id] * len(all_nodes), pa.string()),
        },
        schema=NODES,
    )
    edges.sort(key=lambda e: (e[3], e[0], e[1]))
    edges_t = pa.table(
        {
            "parent_id": pa.array([e[0] for e in edges], pa.string()),
            "child_id": pa.array([e[1] for e in edges], pa.string()),
            "probability": pa.array([e[2] for e in edges], pa.float32()),
            "level": pa.array([e[3] for e in edges], pa.int32()),
        },
        schema=EDGES,
    )
    return TreeResult(nodes=nodes, edges=edges_t, vectors=all_vecs, stats=stats)


# ---- git show 8cf3971:tasks/stages/ingest.py (lines 672-728): how the ingest merge loaded the table ----
_RECORD_URI = re.compile(r"(.+)#L\d+")


def _file_of(uri: str) -> str:
    """The file a uri belongs to: itself, or the file of a JSONL record uri ``FILE#L<n>``."""
    m = _RECORD_URI.fullmatch(uri)
    return m.group(1) if m else uri


@dataclass(slots=True)
class _Doc:
    row: dict[str, Any]
    meta: dict[str, Any]
    uris: dict[str, str | None]  # uri -> sha of the source bytes it was read from; first = primary
    dirty: bool = False


class _DocumentState:
    """The documents table as mutable state: ok docs by doc_id, error rows by uri."""

    def __init__(self, table: pa.Table) -> None:  # (the IngestReport argument is not needed here)
        self.docs: dict[str, _Doc] = {}
        self.errors: dict[str, dict[str, Any]] = {}
        self.by_uri: dict[str, str] = {}
        self.passthrough: list[dict[str, Any]] = []  # rows we do not manage (unknown status)
        self.by_file: dict[str, set[str]] = {}  # file uri -> uris it produced (ok or error)
        for row in table.to_pylist():
            try:
                meta = json.loads(row["metadata"]) if row["metadata"] else {}
            except json.JSONDecodeError:
                meta = {}
            if not isinstance(meta, dict):
                meta = {}
            if row["status"] == "error":
                self.errors[row["uri"]] = {**row, "_meta": meta}
                self._track(row["uri"])
            elif row["status"] == "ok":
                found = meta.get("source_sha")
                shas: dict[str, str | None] = found if isinstance(found, dict) else {}
                uris: dict[str, str | None] = {row["uri"]: shas.get(row["uri"])}
                for other in meta.get("duplicate_uris") or []:
                    uris[other] = shas.get(other)
                doc = _Doc(row, meta, uris)
                self.docs[row["doc_id"]] = doc
                for uri in uris:
                    self.by_uri[uri] = row["doc_id"]
                    self._track(uri)
            else:
                self.passthrough.append(row)

    def _track(self, uri: str) -> None:
        self.by_file.setdefault(_file_of(uri), set()).add(uri)


def old_diff_documents(existing: pa.Table, incoming: pa.Table) -> dict[str, Any]:
    """The update diff as the old code would have written it (8cf3971 had no update diff): the
    table loaded by the ingest merge's loop above, then dicts and sets over ``to_pylist()`` rows."""
    state = _DocumentState(existing)
    now: dict[str, tuple[str | None, bool]] = {}
    for row in incoming.to_pylist():
        now[row["uri"]] = (row["doc_id"], row.get("status", "ok") == "ok")
    out: dict[str, list[tuple]] = {k: [] for k in ("added", "changed", "deleted", "unchanged", "failed")}
    for uri, (doc_id, ok) in now.items():
        old = state.by_uri.get(uri)
        if not ok:
            out["failed"].append((uri, old))
        elif old is None:
            out["added"].append((uri, doc_id))
        elif old == doc_id:
            out["unchanged"].append((uri, doc_id))
        else:
            out["changed"].append((uri, doc_id, old))
    for uri in state.by_uri.keys() | state.errors.keys():
        if uri not in now:
            out["deleted"].append((uri, state.by_uri.get(uri)))
    held = {r[1] for k in ("added", "changed", "unchanged", "failed") for r in out[k] if r[1] is not None}
    new_ids = {r[1] for k in ("added", "changed") for r in out[k]} - state.docs.keys()
    result: dict[str, Any] = {k: sorted(v) for k, v in out.items()}
    result["new_doc_ids"] = sorted(new_ids)
    result["gone_doc_ids"] = sorted(state.docs.keys() - held)
    return result


# ---- git show 8cf3971:tasks/evaluation/metrics.py (lines 282-298) and tasks/evaluation/report.py (lines 59-87, 130-233) ----
def old_mean(values: Iterable[float | None]) -> float | None:
    """Mean of the non-None, non-NaN values; None when there are none."""
    vals = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else None


def old_percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between order statistics."""
    vals = sorted(float(v) for v in values if v is not None and not math.isnan(v))
    if not vals:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    pos = (len(vals) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def old_aggregate(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[tuple, dict[str, Any]]:
    """Group result rows by ``keys``: mean of every metric (None/NaN skipped), counts, latency."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out: dict[tuple, dict[str, Any]] = {}
    for key, rs in groups.items():
        agg: dict[str, Any] = {"n": len(rs)}
        for col, _ in METRICS + ANSWER_METRICS:
            agg[col] = old_mean(r.get(col) for r in rs)
        agg["n_answerable"] = sum(1 for r in rs if r.get("answer_hit") is not None)
        agg["errors"] = sum(1 for r in rs if r.get("error"))
        lat = [r["latency_ms"] for r in rs if r.get("latency_ms") is not None]
        agg["p50_ms"] = old_percentile(lat, 50)
        agg["p95_ms"] = old_percentile(lat, 95)
        search = [r["latency_ms"] - (r.get("embed_ms") or 0.0) for r in rs if r.get("latency_ms") is not None]
        agg["p50_search_ms"] = old_percentile(search, 50)
        agg["context_tokens"] = old_mean(r.get("context_tokens") for r in rs)
        agg["n_hits"] = old_mean(r.get("n_hits") for r in rs)
        level_counts: dict[int, int] = {}
        for r in rs:
            for lv in r.get("levels") or []:
                level_counts[int(lv)] = level_counts.get(int(lv), 0) + 1
        agg["level_counts"] = dict(sorted(level_counts.items()))
        out[key] = agg
    return out


def old_report_aggregates(results: pa.Table, budget: int, primary: str) -> list[dict[tuple, dict[str, Any]]]:
    """The four aggregate calls of the old ``render_summary`` (by system, budget, type, strategy)."""
    rows = results.to_pylist()
    return [
        old_aggregate([r for r in rows if r["strategy"] == primary and r["budget"] == budget], ["system"]),
        old_aggregate([r for r in rows if r["strategy"] == primary], ["system", "budget"]),
        old_aggregate([r for r in rows if r["strategy"] == primary and r["budget"] == budget], ["system", "type"]),
        old_aggregate([r for r in rows if r["budget"] == budget], ["strategy", "system"]),
    ]


# ---- git show 8cf3971:tasks/embeddings.py (lines 226-232): the cache shard's vector column ----
def old_read_vectors(vec_col: pa.Array) -> np.ndarray:
    """Line 232: any list column that is not fixed-size went through Python floats."""
    return np.asarray(vec_col.to_pylist(), dtype=np.float32)


def old_read_fixed(vec_col: pa.Array) -> np.ndarray:
    """Lines 227-230: the fixed-size-list branch (already without Python floats)."""
    dim = vec_col.type.list_size
    flat = vec_col.flatten().to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float32).reshape(-1, dim)


# ================================================================================================
# Stubs both node-assembly sides get, and the AFTER side (today's package functions)
# ================================================================================================
class PrecomputedClusters:
    """``cluster_level`` stand-in: for a level of n nodes, a seeded permutation cut into
    ceil(n / 8) clusters (membership p in [0.5, 1)), plus a tenth of the nodes also in a second
    cluster (p in [0.05, 0.3)): soft clustering's shape. Computed before the clock starts."""

    def __init__(self) -> None:
        self.by_n: dict[int, list[list[tuple[int, float]]]] = {}

    def prepare(self, n: int, levels: int) -> None:
        for _ in range(levels):
            if n <= TREE_CFG.dims + 1 or n in self.by_n:
                return
            self.by_n[n] = self._make(n)
            n = len(self.by_n[n])

    @staticmethod
    def _make(n: int) -> list[list[tuple[int, float]]]:
        rng = np.random.default_rng(n)
        k = math.ceil(n / 8)
        groups = np.array_split(rng.permutation(n), k)
        p = rng.uniform(0.5, 1.0, size=n)
        clusters = [[(int(r), float(p[r])) for r in g] for g in groups]
        extra = rng.choice(n, size=n // 10, replace=False)
        home = np.empty(n, dtype=np.int64)
        for c, g in enumerate(groups):
            home[g] = c
        other = (home[extra] + 1 + rng.integers(0, max(1, k - 1), size=len(extra))) % k
        for r, c, q in zip(extra.tolist(), other.tolist(), rng.uniform(0.05, 0.3, size=len(extra)).tolist()):
            if c != home[r]:
                clusters[c].append((r, q))
        return clusters

    def __call__(self, vectors: np.ndarray, n_tokens: Any, cfg: ClusterConfig, *, stats: Any = None) -> list[list[tuple[int, float]]]:
        return self.by_n[len(vectors)]


cluster_level = PrecomputedClusters()  # the name old_build_tree looks up


class _LenTokenizer:
    def count_many(self, texts: list[str]) -> list[int]:
        return [len(t) // 4 for t in texts]


def get_tokenizer() -> _LenTokenizer:  # the name old_build_tree looks up
    return _LenTokenizer()


class FirstCharsSummarizer:
    """Summary = the first 200 characters of the cluster's first child (no model)."""

    name = "first200"
    cfg = None

    def summarize_many(self, clusters: list[list[str]]) -> list[SummaryResult]:
        return [SummaryResult(texts[0][:200], "ok", 0, 0) for texts in clusters]


def _embed_stub(dim: int) -> Callable[[list[str]], np.ndarray]:
    return lambda texts: unit_vectors(len(texts), dim, np.random.default_rng(len(texts)))


TREE_CFG = ClusterConfig(max_levels=2)


def run_tree(side: str, inputs: dict[str, Any]) -> Any:
    kw = dict(embed=_embed_stub(inputs["dim"]), summarizer=FirstCharsSummarizer(), cfg=TREE_CFG, tree_cfg=TreeConfig(), run_id="bench")
    if side == "before":
        return old_build_tree(inputs["chunks"], inputs["vectors"], **kw)
    new_tree.cluster_level = cluster_level  # the same stubs as the copy above
    new_tree.get_tokenizer = get_tokenizer
    return new_tree.build_tree(inputs["chunks"], inputs["vectors"], **kw)


def run_diff(side: str, inputs: dict[str, Any]) -> Any:
    if side == "before":
        return old_diff_documents(inputs["existing"], inputs["incoming"])
    return diff_documents(inputs["existing"], inputs["incoming"])


def run_eval(side: str, inputs: dict[str, Any]) -> Any:
    results, budget, primary = inputs["results"], 4000, "sentence"
    if side == "before":
        return old_report_aggregates(results, budget, primary)
    lf = lazy(results)  # what today's render_summary does (tasks/evaluation/report.py)
    at_primary = lf.filter(pl.col("strategy") == primary)
    at_budget = lf.filter(pl.col("budget") == budget)
    return [
        aggregate(at_primary.filter(pl.col("budget") == budget), ["system"]),
        aggregate(at_primary, ["system", "budget"]),
        aggregate(at_primary.filter(pl.col("budget") == budget), ["system", "type"]),
        aggregate(at_budget, ["strategy", "system"]),
    ]


def run_vectors(side: str, inputs: dict[str, Any]) -> Any:
    if side == "before":
        return old_read_vectors(inputs["column"])
    if side == "before-fixed":
        return old_read_fixed(inputs["column"])
    return arrow_to_vectors(inputs["column"])


RUNNERS: dict[str, Callable[[str, dict[str, Any]], Any]] = {"tree": run_tree, "diff": run_diff, "eval": run_eval, "vectors": run_vectors}


def make_inputs(transform: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(SEED + n)
    if transform == "tree":
        chunks = chunks_table(n, rng, text_chars=args.text_chars)
        cluster_level.prepare(n, TREE_CFG.max_levels)
        return {"chunks": chunks, "vectors": unit_vectors(n, args.tree_dim, rng), "dim": args.tree_dim}
    if transform == "diff":
        existing, incoming = documents_tables(n, rng, text_chars=args.doc_chars)
        return {"existing": existing, "incoming": incoming}
    if transform == "eval":
        return {"results": results_table(n, rng)}
    return {"column": vector_column(n, args.dim, rng)}


def input_bytes(inputs: dict[str, Any]) -> int:
    total = 0
    for v in inputs.values():
        if isinstance(v, (pa.Table, pa.Array, pa.ChunkedArray)):
            total += v.nbytes
        elif isinstance(v, np.ndarray):
            total += v.nbytes
    return total


# ================================================================================================
# Same result on both sides
# ================================================================================================
def _diff_as_lists(d: Any) -> dict[str, Any]:
    out = {k: [tuple(r.values()) for r in getattr(d, k).to_pylist()] for k in ("added", "changed", "deleted", "unchanged", "failed")}
    out["new_doc_ids"] = d.new_doc_ids.to_pylist()
    out["gone_doc_ids"] = d.gone_doc_ids.to_pylist()
    return out


def same_result(transform: str, before: Any, after: Any) -> tuple[bool, str]:
    """(equal?, what was compared / where it differs)."""
    if transform == "tree":
        checks = {"nodes": before.nodes.equals(after.nodes), "edges": before.edges.equals(after.edges),
                  "vectors": before.vectors.shape == after.vectors.shape and bool(np.array_equal(before.vectors, after.vectors))}
        bad = [k for k, ok in checks.items() if not ok]
        return not bad, f"nodes ({after.nodes.num_rows} rows), edges ({after.edges.num_rows}) and vectors equal" if not bad else f"differ: {bad}"
    if transform == "diff":
        a = _diff_as_lists(after)
        bad = [k for k in a if a[k] != before[k]]
        counts = ", ".join(f"{k} {len(v)}" for k, v in a.items())
        return not bad, f"every class equal ({counts})" if not bad else f"differ: {bad}"
    if transform == "eval":
        bad = [i for i, (b, a) in enumerate(zip(before, after)) if b != a]
        groups = sum(len(a) for a in after)
        return not bad and len(before) == len(after), f"4 tables, {groups} groups, every value equal (floats bit-equal)" if not bad else f"tables {bad} differ"
    ok = before.shape == after.shape and bool(np.array_equal(before, after))
    return ok, f"{after.shape} float32 matrices bit-equal" if ok else "matrices differ"


# ================================================================================================
# Measuring (child process) and the run (parent)
# ================================================================================================
def _status_kb(field_name: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _settle() -> None:
    """Free what can be freed before the baseline (Python garbage, heap tails, Arrow's pool)."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak() -> bool:
    """Reset the RSS high-water mark (VmHWM) to the current RSS (Linux >= 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    hwm, rss = _status_kb("VmHWM"), _status_kb("VmRSS")
    return hwm is not None and rss is not None and hwm <= rss + 1024


def child(transform: str, side: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """Build the inputs, then time the transform; memory is the first call's peak above the baseline."""
    inputs = make_inputs(transform, n, args)
    nbytes = input_bytes(inputs)
    _settle()
    reset = _reset_peak()
    base_kb = _status_kb("VmRSS") or 0
    t0 = time.perf_counter()
    out = RUNNERS[transform](side, inputs)
    times = [time.perf_counter() - t0]
    peak_kb = (_status_kb("VmHWM") if reset else None) or _peak_rusage_kb()
    zero_copy = None
    if transform == "vectors":
        flat = inputs["column"].values
        zero_copy = bool(out.__array_interface__["data"][0] == flat.buffers()[1].address + flat.offset * 4)
    del out
    for _ in range(args.repeat - 1):
        _settle()
        t0 = time.perf_counter()
        out = RUNNERS[transform](side, inputs)
        times.append(time.perf_counter() - t0)
        del out
    return {"transform": transform, "side": side, "n": n, "seconds": min(times), "times": times,
            "peak_extra_mb": max(0, peak_kb - base_kb) / 1024, "base_mb": base_kb / 1024, "input_mb": nbytes / 2**20,
            "peak_reset": reset, "zero_copy": zero_copy}


def _peak_rusage_kb() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def check(transform: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    inputs = make_inputs(transform, n, args)
    before = RUNNERS[transform]("before", inputs)
    after = RUNNERS[transform]("after", inputs)
    ok, detail = same_result(transform, before, after)
    return {"transform": transform, "n": n, "ok": ok, "detail": detail}


def _spawn(argv: list[str], timeout: float) -> dict[str, Any]:
    env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system", "POLARS_MAX_THREADS": os.environ.get("POLARS_MAX_THREADS", "2")}
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], capture_output=True, text=True,
                              timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}


def _python_floats_gb(n: int, dim: int) -> float:
    """What ``column.to_pylist()`` of n x dim floats costs: a 24-byte float object and an
    8-byte list slot per number, plus a list header per row."""
    return (n * dim * 32 + n * 64) / 1e9


def _common_args(args: argparse.Namespace) -> list[str]:
    return ["--dim", str(args.dim), "--tree-dim", str(args.tree_dim), "--text-chars", str(args.text_chars),
            "--doc-chars", str(args.doc_chars), "--repeat", str(args.repeat)]


def run(args: argparse.Namespace) -> int:
    sizes = sorted({int(float(s)) for s in args.sizes.split(",")})
    only = [t for t in (args.only.split(",") if args.only else TRANSFORMS)]
    started = datetime.now(timezone.utc)
    load_before = os.getloadavg()
    print(f"machine: {machine_line()}", flush=True)
    checks: list[dict[str, Any]] = []
    if not args.no_check:
        for t in only:
            r = _spawn(["--check", t, str(sizes[0]), *_common_args(args)], args.timeout)
            r.setdefault("transform", t)
            r.setdefault("n", sizes[0])
            checks.append(r)
            print(f"check {t} @ {sizes[0]:,}: {'OK' if r.get('ok') else 'FAILED'} {r.get('detail') or r.get('error')}", flush=True)
    rows: list[dict[str, Any]] = []
    for n in sizes:
        for t in only:
            sides = ["before", "after"] + (["before-fixed"] if t == "vectors" else [])
            for side in sides:
                if t == "vectors" and side == "before" and _python_floats_gb(n, args.dim) > args.max_python_gb:
                    r = {"skipped": f"not run: needs ~{_python_floats_gb(n, args.dim):.0f} GB of Python floats (> --max-python-gb {args.max_python_gb:g})"}
                else:
                    r = _spawn(["--child", t, side, str(n), *_common_args(args)], args.timeout)
                r.update(transform=t, side=side, n=n)
                rows.append(r)
                desc = r.get("error") or r.get("skipped") or f"{r['seconds']:.3f} s, peak +{r['peak_extra_mb']:.0f} MB"
                print(f"{t:8s} {side:12s} n={n:>9,}: {desc}", flush=True)
    report = render(rows, checks, sizes, args, started, load_before)
    print("\n" + report)
    if args.out != "-":
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report, encoding="utf-8")
        print(f"wrote {out}")
    return 0 if all(c.get("ok") for c in checks) else 1


def _get(rows: list[dict[str, Any]], t: str, side: str, n: int) -> dict[str, Any]:
    return next((r for r in rows if r["transform"] == t and r["side"] == side and r["n"] == n), {})


def _s(r: dict[str, Any]) -> str:
    if "seconds" not in r:
        return "—"
    x = r["seconds"]
    return f"{x:.4f}" if x < 0.01 else f"{x:.3f}" if x < 10 else f"{x:.1f}"


def _mb(r: dict[str, Any]) -> str:
    return f"{r['peak_extra_mb']:,.0f}" if "peak_extra_mb" in r else "—"


def render(rows: list[dict[str, Any]], checks: list[dict[str, Any]], sizes: list[int], args: argparse.Namespace,
           started: datetime, load_before: tuple[float, float, float]) -> str:
    header = ["transform", "rows", "before s", "after s", "speedup", "before peak +MB", "after peak +MB", "input MB", "after peak / input"]
    table, misses, notes = [], [], []
    for n in sizes:
        for t in dict.fromkeys(r["transform"] for r in rows):
            b, a = _get(rows, t, "before", n), _get(rows, t, "after", n)
            ratio = b["seconds"] / a["seconds"] if "seconds" in b and "seconds" in a and a["seconds"] > 0 else None
            per_input = a["peak_extra_mb"] / a["input_mb"] if a.get("input_mb") else None
            table.append([TITLES[t], f"{n:,}", _s(b), _s(a), f"**{fmt_ratio(ratio)}**" if ratio else "—", _mb(b), _mb(a),
                          f"{a['input_mb']:,.0f}" if "input_mb" in a else "—", f"{per_input:.2f}" if per_input is not None else "—"])
            if n == max(sizes) and ratio is not None and ratio < 5:
                misses.append(f"{t} ({ratio:.1f}×)")
            for side, r in (("before", b), ("after", a)):
                if r.get("skipped") or r.get("error"):
                    notes.append(f"- {t} {side} at {n:,} rows: {r.get('skipped') or r.get('error')}")
            fixed = _get(rows, t, "before-fixed", n)
            if "seconds" in fixed and "seconds" in a:
                notes.append(f"- (d) at {n:,} rows, the old fixed-size-list branch (flatten + to_numpy, 8cf3971 tasks/embeddings.py:227-230): "
                             f"{_s(fixed)} s, peak +{_mb(fixed)} MB (already no Python floats; today's `arrow_to_vectors`: {_s(a)} s, with its null and shape checks); "
                             f"zero-copy (the matrix views the Arrow buffer): {a.get('zero_copy')}")
    lines = [
        "# Table transforms: before (row loops, 8cf3971) and after (polars / storage.arrays)\n",
        f"- date: {started:%Y-%m-%d %H:%M} UTC; commit {git_commit()}",
        f"- machine: {machine_line()} (load at start {load_before[0]:.2f}); busy now: {', '.join(busy_processes()) or 'nothing above 20%'}",
        f"- command: `python benchmarks/tables.py --sizes {args.sizes}" + (f" --only {args.only}" if args.only else "") + f" --repeat {args.repeat}`; "
        f"vectors {args.dim}-d (vector read), {args.tree_dim}-d (node assembly); chunk text ~{args.text_chars} chars, document text ~{args.doc_chars} chars",
        "- each cell: one fresh child process; seconds = best of --repeat calls; peak +MB = RSS high-water mark of the first call "
        "above the RSS just before it (peak reset via /proc/self/clear_refs; system allocator for Arrow). "
        "`after peak / input`: ≈1 = the transform held one copy of its input (its output), >1.5 = more than one copy at once.\n",
        md_table(header, table),
        "",
        "Same result before and after (asserted on the smallest size, before any timing):\n",
    ]
    for c in checks:
        lines.append(f"- {c['transform']} @ {c['n']:,} rows: {'OK' if c.get('ok') else 'FAILED'} — {c.get('detail') or c.get('error')}")
    if not checks:
        lines.append("- not run (--no-check)")
    lines.append("")
    lines.append(f"Target ≥ 5× at {max(sizes):,} rows: " + ("missed by " + ", ".join(misses) if misses else "met by every transform measured") + ".")
    if notes:
        lines += ["", "Notes:", *notes]
    lines += ["", "What each row runs (both sides in the same invocation; BEFORE copied verbatim from 8cf3971 into this script):", ""]
    lines += [
        "- (a) `build_tree` over a CHUNKS table (~n/20 documents, rows shuffled) with 2 summary levels: before = the old list-of-`_Node` code, "
        "after = `arborag.tasks.tree.build_tree` (polars frames of `tasks/tree_frames.py`). Clustering precomputed (ceil(n/8) clusters per level, "
        "a tenth of the nodes in a second cluster), summarizer = first 200 chars, random embedder, len/4 token counts — identical stubs on both sides.",
        "- (b) the `update` diff: before = the ingest merge's loading loop over `documents.to_pylist()` (json.loads per row) + dict/set diff over "
        "`incoming.to_pylist()`; after = `arborag.tasks.documents_diff.diff_documents`. Table: 0.5% error rows, 1% held at a second uri; "
        "sources: 1% deleted, 1% changed, 0.2% failing, +1% new (a tenth copies of known texts).",
        "- (c) the four aggregate calls of the report (by system, system × budget, system × type, strategy × system): before = `to_pylist()` + "
        "the old dict grouping with metrics.mean/percentile; after = `arborag.tasks.evaluation.aggregate.aggregate` on lazy filters, as `tasks/evaluation/report.py` calls it.",
        "- (d) an embedding-cache vector column (fixed_size_list<float32>, one chunk) to a matrix: before = `np.asarray(column.to_pylist())` "
        "(8cf3971 tasks/embeddings.py:232, the branch for list columns), after = `arborag.storage.arrays.arrow_to_vectors`.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1e5,1e6", help="comma-separated row counts (the smallest is also the equality check)")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(TRANSFORMS)}")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "tables.md"), help="Markdown report ('-': none)")
    ap.add_argument("--dim", type=int, default=384, help="vector dim of the cached-vector read")
    ap.add_argument("--tree-dim", type=int, default=64,
                    help="vector dim of node assembly (64: at 384 the same vector copies on both sides dominate and 10^6 rows need ~8 GB per side)")
    ap.add_argument("--text-chars", type=int, default=400, help="mean chunk text length")
    ap.add_argument("--doc-chars", type=int, default=300, help="mean document text length (kept small: the old loop holds it all in Python)")
    ap.add_argument("--repeat", type=int, default=1, help="calls per child; the best time is reported")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per child")
    ap.add_argument("--max-python-gb", type=float, default=4.0, help="skip the to_pylist vector read above this estimate")
    ap.add_argument("--no-check", action="store_true", help="skip the equality check")
    ap.add_argument("--child", nargs=3, metavar=("TRANSFORM", "SIDE", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--check", nargs=2, metavar=("TRANSFORM", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        t, side, n = args.child
        print("RESULT " + json.dumps(child(t, side, int(n), args)), flush=True)
        return 0
    if args.check:
        t, n = args.check
        print("RESULT " + json.dumps(check(t, int(n), args)), flush=True)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
