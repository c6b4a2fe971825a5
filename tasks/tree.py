"""The RAPTOR tree (SPEC §5): leaves -> (cluster -> summarize -> embed) per level.

:func:`build_tree` is pure: it takes the chunks table and their vectors and returns the
``nodes`` and ``edges`` tables (storage schemas NODES, EDGES) plus the vectors of every node.

- Level 0 nodes are the chunks: ``node_id = chunk_id``, ``text`` = the chunk text (the header is
  embedded with it — see :func:`leaf_embed_texts` — but not repeated in the node text),
  ``summarizer = summary_status = "leaf"``.
- Level L+1: :func:`arborag.tasks.clustering.cluster_level` over level L; each cluster's children
  (in document order) are summarized; the summaries are embedded with ``embed``. A summary's
  ``node_id = short_id("node", level, summarizer.name, sorted child ids)``, its ``summary_of``
  = ``short_id("cluster", level, sorted child ids)`` (the cluster's identity, independent of
  the summarizer), ``doc_ids`` = sorted union of its children's. Edges parent -> child carry
  the soft membership probability.
- Stop when a level has <= dims+1 nodes, a level did not shrink, or ``cfg.max_levels``
  summary levels exist. The top level may hold several nodes (no single root is forced).
- ``tree_cfg.scope == "document"`` builds one tree per doc_id, level by level in lockstep (one
  summarize call and one embed call per level for all documents); the tables are the same.
- A summarizer that raises :class:`BackendUnavailable`, :class:`ConfigError` or
  :class:`LLMError` (no call can succeed) fails the build. One that raises anything else,
  returns the wrong number of results or an empty text for a non-empty cluster is replaced,
  for those clusters, by the extractive summarizer with status ``fallback:<reason>`` — an
  exception text is never stored as a node text.

Cost (2,229 real chunks of <= 100 tokens, 3 summary levels, shared 2-core box at load ~5-6, bf16
embedder with torch threads=1): embedding the leaves 51 s; then build_tree 45 s = clustering 29 s
(UMAP 18 s, of which ~10 s is the global pass; GMM 10 s) + extractive summaries 1.4 s + embedding
the 378 summaries 15 s (they are longer than the leaves). Plus ~16-25 s of numba JIT once per
process (clustering.warm_up). Without clustering the tree costs 0.3x the leaf embedding.

Determinism: rows are sorted (nodes by level, document position, node_id; edges by level,
parent_id, child_id); same seed + same input => identical tables. Note that the bf16 embedder
is only bit-identical for the same torch thread count: summary vectors (and so the levels above
the first) can differ between threads=1 and threads=2 builds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from arborag.config import ClusterConfig, SummarizeConfig, TreeConfig
from arborag.errors import BackendUnavailable, ConfigError, LLMError, SchemaError
from arborag.hashing import short_id
from arborag.tokenizer import get_tokenizer
from arborag.storage.schemas import EDGES, NODES
from arborag.storage.tables import conform
from arborag.tasks.clustering import ClusterStats, cluster_level
from arborag.tasks.summarize import ExtractiveSummarizer, Summarizer, SummaryResult

__all__ = ["TreeResult", "build_tree", "leaf_embed_texts", "summary_node_id", "cluster_id"]

log = logging.getLogger(__name__)

EmbedFn = Callable[[list[str]], np.ndarray]
TreeProgress = Callable[[dict[str, Any]], None] | None


@dataclass
class TreeResult:
    nodes: pa.Table  # NODES schema
    edges: pa.Table  # EDGES schema
    vectors: np.ndarray  # float32 (nodes.num_rows, dim), rows aligned with nodes
    stats: list[dict[str, Any]]  # one dict per level (level 0 = leaves)


def leaf_embed_texts(leaves: pa.Table) -> list[str]:
    """What a leaf's vector embeds: ``header + "\\n\\n" + text`` (just ``text`` without header).

    The flow must embed leaves with this so the tree and the index agree.
    """
    texts = leaves.column("text").to_pylist()
    headers = leaves.column("header").to_pylist() if "header" in leaves.column_names else [None] * len(texts)
    return [f"{h}\n\n{t}" if h else t for h, t in zip(headers, texts)]


def summary_node_id(level: int, summarizer_name: str, child_ids: Sequence[str]) -> str:
    return short_id("node", level, summarizer_name, sorted(child_ids))


def cluster_id(level: int, child_ids: Sequence[str]) -> str:
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


def build_tree(
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
    """Build the RAPTOR tree over ``leaves`` (a CHUNKS table; rows aligned with ``leaf_vectors``).

    ``embed(texts) -> float32 (len(texts), dim)`` embeds summaries (the same model as the
    leaves). ``progress(level_stats)`` is called after each level with its stats dict.
    """
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
            cstats.gmm_fits += cs.gmm_fits
            cstats.umap_fits += cs.umap_fits
            cstats.reclustered += cs.reclustered
            cstats.cut += cs.cut
            cstats.umap_s += cs.umap_s
            cstats.gmm_s += cs.gmm_s
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
                node_id=summary_node_id(level, name, child_ids),
                level=level,
                text=r.text,
                n_tokens=int(counts[j]),
                doc_ids=tuple(sorted({d for ch in children for d in ch.doc_ids})),
                pos=min(ch.pos for ch in children),
                summary_of=cluster_id(level, child_ids),
                summarizer=name,
                status=r.status,
            )
            for (row, p), ch in zip(c, children):
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
