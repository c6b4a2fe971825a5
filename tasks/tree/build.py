"""The RAPTOR tree (docs/METHODS.md §5): leaves -> (cluster -> summarize -> embed) per level.

:func:`build_tree` is pure: it takes the chunks table and their vectors and returns the
``nodes`` and ``edges`` tables (storage schemas NODES, EDGES) plus the vectors of every node.

- Level 0 nodes are the chunks: ``node_id = chunk_id``, ``text`` = the chunk text (the header is
  embedded with it — see :func:`leaf_embed_texts` — but not repeated in the node text),
  ``summarizer = summary_status = "leaf"``.
- Level L+1: :func:`arborag.tasks.cluster.fit.cluster_level` over level L; each cluster's children
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

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from arborag.config import ClusterConfig, SummarizeConfig, TreeConfig
from arborag.errors import BackendUnavailable, ConfigError, LLMError
from arborag.hashing import hash_bytes, short_id
from arborag.tokenizer import get_tokenizer
from arborag.storage.tables import conform
from arborag.tasks.cluster.fit import ClusterStats, cluster_level
from arborag.tasks.summarize.extractive import ExtractiveSummarizer
from arborag.tasks.summarize.types import Summarizer, SummaryResult
from arborag.tasks.tree.model import LevelModel, model_of
from arborag.tasks.tree.stats import LevelStats
from arborag.tasks.tree.frames import Level, assemble_edges, assemble_nodes, cluster_members, leaf_level, split_by_document, summary_inputs

__all__ = ["TreeResult", "build_tree", "fallback_name", "fallback_reasons", "leaf_embed_texts", "mark_fallbacks", "summary_node_id",
           "summary_ids", "cluster_id"]

log = logging.getLogger(__name__)

EmbedFn = Callable[[list[str]], np.ndarray]
MapFn = Callable[[Callable[..., Any], Iterable[Any]], Iterator[Any]]
TreeProgress = Callable[[LevelStats], None] | None
#: ``bar(description, total)`` -> a context giving ``advance(n)``: :func:`arborag.progress.progress_bar`'s shape
LevelBar = Callable[[str, int | None], AbstractContextManager[Callable[[int], None]]]


@dataclass
class TreeResult:
    nodes: pa.Table  # NODES schema
    edges: pa.Table  # EDGES schema
    vectors: np.ndarray  # float32 (nodes.num_rows, dim), rows aligned with nodes
    stats: list[LevelStats]  # one per level (level 0 = leaves)
    models: list[LevelModel] = field(default_factory=list)  # the fitted clustering per level (one corpus-wide tree only)


def leaf_embed_texts(leaves: pa.Table) -> list[str]:
    """What a leaf's vector embeds: ``header + "\\n\\n" + text`` (just ``text`` without header).

    The flow must embed leaves with this so the tree and the index agree.
    """
    cols = ["text", "header"] if "header" in leaves.column_names else ["text"]
    df = pl.from_arrow(leaves.select(cols))
    assert isinstance(df, pl.DataFrame)
    if "header" not in cols:
        return df["text"].to_list()
    has = pl.col("header").is_not_null() & (pl.col("header") != "")
    return df.select(pl.when(has).then(pl.col("header") + "\n\n" + pl.col("text")).otherwise(pl.col("text")).alias("t"))["t"].to_list()


def summary_node_id(level: int, summarizer_name: str, child_ids: Sequence[str]) -> str:
    return short_id("node", level, summarizer_name, sorted(child_ids))


def cluster_id(level: int, child_ids: Sequence[str]) -> str:
    return short_id("cluster", level, sorted(child_ids))


def fallback_name(name: str, fallback: ExtractiveSummarizer) -> str:
    """The ``summarizer`` of a summary the fallback wrote in place of ``name``'s: a fallback is
    never recorded (or content-addressed) as the configured summarizer's output."""
    return f"{name} (fallback: {fallback.name})"


def mark_fallbacks(node_ids: pl.Series, child_ids: pl.Series, level: int, name: str, fallback: ExtractiveSummarizer,
                   results: Sequence[SummaryResult]) -> tuple[pl.Series, pl.Series]:
    """``(node_ids, summarizer)`` per cluster: a fallback summary's id and summarizer name are those of
    :func:`fallback_name`, so a later build whose LLM answers writes a node with another id (its
    vector and text never mistaken for the fallback's) and the snapshot says which is which."""
    fb = pl.Series([r.status.startswith("fallback") for r in results], dtype=pl.Boolean)
    names = pl.Series("summarizer", [name] * len(results), dtype=pl.String)
    if not fb.any():
        return node_ids, names
    fb_name = fallback_name(name, fallback)
    fb_ids, _ = summary_ids(child_ids, level, fb_name)
    return (pl.select(pl.when(fb).then(fb_ids).otherwise(node_ids).alias(node_ids.name)).to_series(),
            pl.select(pl.when(fb).then(pl.lit(fb_name)).otherwise(names).alias("summarizer")).to_series())


def fallback_reasons(statuses: Iterable[str]) -> dict[str, int]:
    """How many summaries fell back, by reason (``fallback:<reason>`` statuses), most frequent first."""
    counts: dict[str, int] = {}
    for st in statuses:
        if st.startswith("fallback"):
            reason = st.split(":", 1)[1].strip() if ":" in st else st
            counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def summary_ids(child_ids: pl.Series, level: int, summarizer_name: str) -> tuple[pl.Series, pl.Series]:
    """:func:`summary_node_id` and :func:`cluster_id` of every cluster (``child_ids``: a list
    column), byte-identical to calling them one by one.

    The canonical JSON that :func:`arborag.hashing.short_id` hashes is built in polars (sorted
    children joined; polars sorts strings by UTF-8 bytes = code points, as ``sorted`` does);
    only the BLAKE2b call stays a loop over clusters. Clusters whose ids would need JSON
    escaping (quote, backslash, control characters) or that are empty go through ``short_id``.
    """
    inner = child_ids.list.eval(pl.element().sort()).list.join('","').to_list()
    needs_escape = r'[\x00-\x1f"\\]'
    if child_ids.explode().str.contains(needs_escape).any():  # rare: find the clusters concerned
        plain = ~child_ids.list.eval(pl.element().str.contains(needs_escape)).list.any().fill_null(True)
    else:
        plain = pl.repeat(True, len(child_ids), eager=True)
    plain = plain & (child_ids.list.len() > 0)
    node_head = f'["node",{int(level)},{json.dumps(summarizer_name, ensure_ascii=False)},["'
    cluster_head = f'["cluster",{int(level)},["'
    nodes: list[str] = []
    clusters: list[str] = []
    for j, (ok, body) in enumerate(zip(plain.to_list(), inner)):
        if ok:
            nodes.append(hash_bytes(f'{node_head}{body}"]]'.encode("utf-8"), digest_size=12))
            clusters.append(hash_bytes(f'{cluster_head}{body}"]]'.encode("utf-8"), digest_size=12))
        else:
            ids = child_ids[j].to_list()
            nodes.append(summary_node_id(level, summarizer_name, ids))
            clusters.append(cluster_id(level, ids))
    return pl.Series("node_id", nodes, dtype=pl.String), pl.Series("summary_of", clusters, dtype=pl.String)


#: clusters per summarization task when a fan-out ``map`` is given (a summary depends only on its cluster)
SUMMARY_FANOUT_CHUNK = 64


def _summarize_chunk(args: tuple[Summarizer, list[list[str]]]) -> list[SummaryResult]:
    summarizer, chunk = args
    return list(summarizer.summarize_many(chunk))


def _run_summarizer(summarizer: Summarizer, clusters: list[list[str]], map: MapFn | None) -> list[Any]:
    if map is None:
        return list(summarizer.summarize_many(clusters))
    chunks = [(summarizer, clusters[i : i + SUMMARY_FANOUT_CHUNK]) for i in range(0, len(clusters), SUMMARY_FANOUT_CHUNK)]
    return [r for part in map(_summarize_chunk, chunks) for r in part]


def _safe_summaries(summarizer: Summarizer, clusters: list[list[str]], fallback: ExtractiveSummarizer, map: MapFn | None = None) -> list[SummaryResult]:
    """The summarizer's results, with the extractive fallback wherever it failed.
    ``map`` (None: one call here) fans chunks of :data:`SUMMARY_FANOUT_CHUNK` clusters out.

    The extractive summarizer is its own fallback: its results are final (status ``ok``), never
    a ``fallback:…`` — which would mark the snapshot as not final and have every later build
    summarize again for nothing (no LLM is involved)."""
    results: list[Any] | None
    reason = ""
    if isinstance(summarizer, ExtractiveSummarizer):
        return [SummaryResult(r.text, "ok", 0, 0) for r in _run_summarizer(summarizer, clusters, map)]
    try:
        results = _run_summarizer(summarizer, clusters, map)
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
        if not isinstance(r, SummaryResult) or not isinstance(r.text, str):
            out.append(SummaryResult(fallback.summarize(texts).text, "fallback:invalid-result", 0, 0))
        elif not r.text.strip() and any(t.strip() for t in texts):  # empty summary of a non-empty cluster
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


def _no_bar(description: str, total: int | None) -> AbstractContextManager[Callable[[int], None]]:
    return contextlib.nullcontext(lambda n=1: None)


def _cluster_trees(
    active: list[Level], cfg: ClusterConfig, st: dict[str, Any], map: MapFn | None = None, fitted: list[Any] | None = None,
    bar: LevelBar | None = None,
) -> list[list[list[tuple[int, float]]]]:
    """Cluster every active tree's current level; add the clustering counters to ``st``.
    ``fitted`` receives the level's fits when there is one tree (corpus scope). ``bar`` shows the
    level's clustering (one step per tree; a running clock for one tree, whose fits are one step)."""
    from arborag.tasks.cluster.umap_import import layout_compiled

    t0 = time.perf_counter()
    per_tree: list[list[list[tuple[int, float]]]] = []
    total = ClusterStats()
    what = f"cluster level {st['level']} ({st['n_input']:,} nodes" + (f" in {len(active):,} trees)" if len(active) > 1 else ")")
    if bar is not None and not layout_compiled():
        what += " — compiling UMAP's code for this machine, once"
    with (bar or _no_bar)(what, len(active) if len(active) > 1 else None) as advance:
        for t in active:
            cs = ClusterStats()
            per_tree.append(cluster_level(t.vectors, t.frame["n_tokens"].to_numpy(), cfg, stats=cs, map=map,
                                          fitted=fitted if len(active) == 1 else None))
            total.add(cs)
            advance(1)
            if len(active) == 1:
                st["global_k"] = cs.global_k
                st["local_ks"] = cs.local_ks
    st["cluster_s"] = time.perf_counter() - t0
    st.update(umap_s=total.umap_s, gmm_s=total.gmm_s, gmm_fits=total.gmm_fits, umap_fits=total.umap_fits,
              reclustered=total.reclustered, cut=total.cut, global_s=total.global_s, global_umap_s=total.global_umap_s,
              global_layout_s=total.global_layout_s, umap_cpu_s=total.umap_cpu_s, gmm_cpu_s=total.gmm_cpu_s)
    return per_tree


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
    map: MapFn | None = None,
    bar: LevelBar | None = None,
) -> TreeResult:
    """Build the RAPTOR tree over ``leaves`` (a CHUNKS table; rows aligned with ``leaf_vectors``).

    ``embed(texts) -> float32 (len(texts), dim)`` embeds summaries (the same model as the
    leaves). ``progress(level_stats)`` is called after each level with its :class:`LevelStats`; ``bar``
    (:func:`arborag.progress.progress_bar`'s shape) shows each level's clustering as it runs.
    ``run_id`` is written to every node's ``created_by_run``. ``map`` (None: all in this
    process) fans out the per-cluster local clusterings and the summarization calls (e.g. to
    Dask workers through Prefect); the tables are the same either way.
    """
    # collapsed leaves (tasks/build/repeats.py) carry every document of a repeated text: level 0's doc_ids
    doc_ids = leaves.column("doc_ids") if "doc_ids" in leaves.column_names else None
    leaves = conform("chunks", leaves.drop_columns([c for c in ("doc_ids", "repeats") if c in leaves.column_names]))
    if doc_ids is not None:
        leaves = leaves.append_column("doc_ids", doc_ids)
    n = leaves.num_rows
    vectors = _check_vectors(leaf_vectors, n, "leaf_vectors")
    dim = vectors.shape[1]
    level0 = leaf_level(leaves, vectors)
    stats = [LevelStats(0, n, n_docs=level0.frame["doc_id"].n_unique())]
    if progress is not None:
        progress(stats[0])
    if not n:
        trees: list[Level] = []
    elif tree_cfg.scope == "document":
        trees = split_by_document(level0)
    else:
        trees = [level0]
    pieces: list[tuple[int, int, Level, pl.DataFrame]] = [(i, 0, t, _leaf_extra(len(t))) for i, t in enumerate(trees)]  # (tree, level, nodes, extra columns)
    done = [False] * len(trees)
    tokenizer = get_tokenizer()
    summarize_cfg = getattr(summarizer, "cfg", None)
    fallback = ExtractiveSummarizer(summarize_cfg if isinstance(summarize_cfg, SummarizeConfig) else None)
    name = summarizer.name
    edges: list[pl.DataFrame] = []
    models: list[LevelModel] = []

    for level in range(1, cfg.max_levels + 1):
        for i, t in enumerate(trees):
            done[i] = done[i] or len(t) <= cfg.dims + 1
        active_ix = [i for i in range(len(trees)) if not done[i]]
        if not active_ix:
            break
        active = [trees[i] for i in active_ix]
        st: dict[str, Any] = {"level": level, "n_trees": len(active), "n_input": sum(len(t) for t in active)}
        # 1. cluster every active tree; 2. the children of every cluster in document order
        fitted: list[Any] = []
        per_tree = _cluster_trees(active, cfg, st, map, fitted if len(trees) == 1 else None, bar)
        members, first = [], 0
        for t, clusters in zip(active, per_tree):
            members.append(cluster_members(t.frame, clusters, first))
            first += len(clusters)
        jobs = pl.concat([summary_inputs(m) for m in members], how="vertical_relaxed")
        # 3. summarize all clusters at once, embed the summaries with one call
        t0 = time.perf_counter()
        results = _safe_summaries(summarizer, jobs["texts"].to_list(), fallback, map)
        st["summarize_s"] = time.perf_counter() - t0
        st["n_clusters"] = len(results)
        st["n_fallback"] = sum(1 for r in results if r.status != "ok")
        st["fallback_reasons"] = fallback_reasons(r.status for r in results)
        st["tokens_in"] = sum(r.tokens_in for r in results)
        st["tokens_out"] = sum(r.tokens_out for r in results)
        texts = [r.text for r in results]
        t0 = time.perf_counter()
        new_vecs = _check_vectors(embed(texts), len(results), f"embed() at level {level}", dim)
        st["embed_s"] = time.perf_counter() - t0
        # 4. the new level of each tree (a loop over clusters: ids hash each cluster's children)
        node_ids, of = summary_ids(jobs["child_ids"], level, name)
        node_ids, names = mark_fallbacks(node_ids, jobs["child_ids"], level, name, fallback, results)
        if fitted:
            models.append(model_of(level, fitted[0], active[0].frame["node_id"].to_list(), of.to_list(), cfg.threshold))
        summaries = jobs.select(["job", "doc_ids", "pos"]).with_columns(
            node_ids,
            of,
            pl.Series("text", texts, dtype=pl.String),
            pl.Series("n_tokens", np.asarray(tokenizer.count_many(texts), dtype=np.int32)),
            pl.Series("summary_status", [r.status for r in results], dtype=pl.String),
            names,
        )
        n_new, first = 0, 0
        for i, t, m, clusters in zip(active_ix, active, members, per_tree):
            mine = summaries.slice(first, len(clusters)).with_row_index("vec").sort(["pos", "node_id"], maintain_order=True)
            vecs = new_vecs[first + mine["vec"].to_numpy()] if mine.height else np.zeros((0, dim), np.float32)
            edges.append(
                m.join(mine.select("job", pl.col("node_id").alias("parent_id")), on="job")
                .select("parent_id", pl.col("node_id").alias("child_id"), pl.col("p").alias("probability"), pl.lit(level, dtype=pl.Int32).alias("level"))
            )
            first += len(clusters)
            new = Level(mine.select(["node_id", "text", "n_tokens", "doc_ids", "pos"]), vecs)
            pieces.append((i, level, new, mine.select(["summary_of", "summarizer", "summary_status"])))
            n_new += len(new)
            if len(new) >= len(t) or not len(new):
                done[i] = True  # the level did not shrink: stop this tree
            trees[i] = new
        st["n_nodes"] = n_new
        stats.append(LevelStats(**st))
        if progress is not None:
            progress(stats[-1])

    pieces.sort(key=lambda p: p[0])  # tree by tree, levels in build order (the order of the vectors)
    nodes, all_vecs = assemble_nodes([(lv, t, extra) for _, lv, t, extra in pieces], dim, run_id)
    return TreeResult(nodes=nodes, edges=assemble_edges(edges), vectors=all_vecs, stats=stats, models=models)


def _leaf_extra(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {"summary_of": [None] * n, "summarizer": ["leaf"] * n, "summary_status": ["leaf"] * n},
        schema={"summary_of": pl.String, "summarizer": pl.String, "summary_status": pl.String},
    )
