"""The published tree brought up to date locally, not rebuilt (docs/METHODS.md §5.9).

:func:`update_tree` is pure: it changes none of its inputs. Level by level, from the leaves up,
the clusters of level L+1 lose the children that left level L and gain the ones that joined it:

- **new leaves** are assigned with the level's fitted global model (:mod:`arborag.tasks.tree.model`):
  its ``transform`` (:func:`~arborag.tasks.cluster.fitted.knn_transform`) and ``predict_proba``, soft
  membership at ``cluster.threshold`` with the argmax fallback (as the build); inside each
  global cluster joined, the leaf joins the nearest of that global cluster's current clusters
  by centroid cosine. (The local fits are kept too, but measured hold-one-out on 396 HotpotQA
  paragraphs — 150 leaves taken out and placed again — the local transform + predict_proba put
  a leaf back into one of its own clusters 55% of the time, the nearest centroid inside each
  global cluster it joins 79%, the nearest centroid over all clusters 82%, the clusters of its
  nearest leaf 76%.) No usable global fit: the nearest centroid over all clusters;
- **a join is admitted only when the new node is as close to the cluster's centroid as the level's
  members usually are to theirs** (:class:`_Gates`: its cosine to the centroid at least the
  :data:`ADMIT_QUANTILE` = 5 % quantile of every member's cosine to the centroid of the other
  members of its cluster, over the level; one threshold per level, so a loose cluster admits no
  more than a tight one). A node whose chosen clusters all refuse it joins the nearest cluster by
  centroid that admits it; a node no cluster admits is turned away. The turned-away nodes of a
  level open **new clusters** of that level (:func:`_open`: the build's clustering of just them
  when there are more than ``cluster.dims + 1``, else groups nearest first under the same
  threshold, else a cluster of one), summarized as the build summarizes any cluster; their
  summaries are new nodes of the level and go up through the same rule (``rejected`` and
  ``opened`` in :class:`~arborag.tasks.tree.stats.UpdateLevelStats`). So a document of another
  domain starts topics of its own instead of joining the nearest one. Measured with the Cinderella
  story (38 leaves) added to FinanceBench filings: to the Amcor and PepsiCo 8-Ks (79 leaves, 15
  level-1 clusters) the nearest story leaf is 0.20 below the threshold, and to all five filings
  (408 leaves, 87 clusters) 0.27 below; no summary below the top mixes story and filings. A
  per-cluster threshold (the lowest member's cosine to the others' centroid, less a margin of
  0.05) let 4 and 15 story leaves into loose legal-text clusters (up to 0.06 above it) and mixed
  one level-1 summary in each. A filing leaf taken out and placed again passes the threshold of
  one of its own clusters 94.9 % / 94.6 % of the time (87.3 % / 90.2 % with the per-cluster one).
  On the HotpotQA hold-one-out above (the 396 paragraphs make 708 leaves; 150 held out) 82.0 %
  are placed back into one of their own clusters (78.7 % without a rule, 78.0 % with the
  per-cluster one) and 7 are turned away (1). Quantiles 0.02 / 0.10: the nearest story leaf
  0.09 / 0.25 below the threshold with two filings, 0.19 / 0.33 with five; HotpotQA 80.7 % both,
  2 / 14 turned away;
- **a rewritten summary** (its cluster's membership changed) replaces the old one in the old
  one's parents — a changed summary is a changed child of its parent — so the change
  propagates upward;
- **removed nodes** (a deleted document's leaves, replaced or emptied summaries) leave every
  cluster they were in.

Then per level: a cluster left empty disappears (and leaves its parents); a cluster left with
one child when it had more is dissolved — its child stays in its other clusters or joins the
nearest other cluster of the level; a changed cluster over ``cluster.max_cluster_tokens`` is
split by the build's own guard (:func:`~arborag.tasks.cluster.fit.split_cluster`); and **only**
clusters whose member set changed (and the opened ones) are summarized again. Ids stay content-addressed
(``summary_node_id`` over sorted child ids), so an untouched cluster keeps its summary, its id
and its cached embedding. The number of levels stays the published tree's; the drift guard in
the flow re-fits the whole tree once too much has changed.

The runner (:func:`arborag.tasks.stages.tree_update.run_tree_update`) reads the previous
snapshot and stages what :func:`update_tree` returns. Per-document trees take the exact path
of :mod:`arborag.tasks.tree.update_docs` instead.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import pyarrow as pa

from arborag.config import ClusterConfig, SummarizeConfig
from arborag.errors import SchemaError
from arborag.tasks.cluster.fitted import knn_transform
from arborag.tasks.summarize.extractive import ExtractiveSummarizer
from arborag.tasks.summarize.types import Summarizer
from arborag.tasks.tree.model import LevelModel, UpdateResult
from arborag.tasks.tree.stats import UpdateLevelStats

if TYPE_CHECKING:  # the build (and the clustering it imports) loads when an update runs, not on import
    from arborag.tasks.tree.build import EmbedFn

__all__ = ["UpdateResult", "update_tree"]


@dataclass(frozen=True)
class _Node:
    level: int
    text: str
    n_tokens: int
    doc_ids: list[str]
    pos: int
    summary_of: str | None
    summarizer: str
    summary_status: str
    created_by_run: str | None


class _Vectors:
    """Node id -> vector (leaves from the staged matrix, summaries embedded through the cache).

    New summaries are *deferred* (:meth:`defer`): their texts wait until a vector of one of them
    is asked for (a dissolved or split cluster's members) or the update ends, and are then
    embedded in one call (:meth:`flush`) — one round trip to the embedding worker for the whole
    update instead of one per level, and at the end beside the labels and table writes
    (:func:`update_tree`'s ``background``)."""

    def __init__(self, dim: int, embed: EmbedFn | None = None) -> None:
        self.dim = dim
        self.embed = embed
        self.rows: dict[str, int] = {}
        self.blocks: list[np.ndarray] = []
        self.n = 0
        self.waiting: dict[str, str] = {}  # deferred: node id -> text, in the order deferred

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.rows or node_id in self.waiting

    def add(self, ids: Sequence[str], vecs: np.ndarray) -> None:
        vecs = np.asarray(vecs, np.float32).reshape(len(ids), self.dim)
        for i, node_id in enumerate(ids):
            self.rows[node_id] = self.n + i
        self.blocks.append(vecs)
        self.n += len(ids)
        self._all: np.ndarray | None = None

    def defer(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Embed ``texts`` (the new nodes ``ids``) later, with the other deferred ones."""
        for node_id, text in zip(ids, texts):
            if node_id not in self:
                self.waiting[node_id] = text

    def flush(self) -> None:
        """Embed every deferred text now, in one call."""
        if not self.waiting:
            return
        if self.embed is None:
            raise RuntimeError("deferred texts but no embed function")
        ids, texts = list(self.waiting), list(self.waiting.values())
        vecs = self.embed(texts)
        self.waiting = {}
        self.add(ids, vecs)

    def get(self, ids: Sequence[str]) -> np.ndarray:
        if self.waiting and any(i in self.waiting for i in ids):
            self.flush()
        if getattr(self, "_all", None) is None:
            self._all = np.concatenate(self.blocks) if self.blocks else np.zeros((0, self.dim), np.float32)
        return self._all[[self.rows[i] for i in ids]] if ids else np.zeros((0, self.dim), np.float32)  # type: ignore[index]


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def update_tree(
    prev_nodes: pa.Table,
    prev_edges: pa.Table,
    models: dict[int, LevelModel],
    leaves: pa.Table,
    leaf_vectors: np.ndarray,
    *,
    embed: EmbedFn,
    summarizer: Summarizer,
    cfg: ClusterConfig,
    run_id: str,
    background: bool = False,
) -> UpdateResult:
    """The tree ``prev_nodes``/``prev_edges`` updated to the leaves ``leaves`` (rows aligned with
    ``leaf_vectors``); see the module docstring. ``embed`` embeds summaries through the cache
    (the previous summaries' texts are cache hits); the new summaries are embedded together, in
    one call, when the update ends (or earlier, when a step needs one of their vectors).
    ``background``: that last call runs on a thread of its own and the result's vectors are
    ``pending`` (:meth:`UpdateResult.wait_vectors`), so a caller labels and writes the tables
    while the embedding worker embeds. The vectors are the same either way."""
    from arborag.tasks.cluster.fit import split_cluster
    from arborag.tasks.tree.build import _safe_summaries, fallback_reasons, mark_fallbacks, summary_ids
    from arborag.tokenizer import get_tokenizer

    leaf_vectors = np.asarray(leaf_vectors, np.float32)
    if leaf_vectors.shape[0] != leaves.num_rows:
        raise SchemaError("leaf_vectors", f"{leaf_vectors.shape[0]} vectors for {leaves.num_rows} leaves")
    dim = leaf_vectors.shape[1]
    name = summarizer.name
    summarize_cfg = getattr(summarizer, "cfg", None)
    fallback = ExtractiveSummarizer(summarize_cfg if isinstance(summarize_cfg, SummarizeConfig) else None)
    tokenizer = get_tokenizer()

    # the previous tree
    old = prev_nodes.to_pylist()
    info: dict[str, _Node] = {
        r["node_id"]: _Node(int(r["level"]), r["text"], int(r["n_tokens"]), list(r["doc_ids"] or []), 0, r["summary_of"],
                            r["summarizer"], r["summary_status"], r["created_by_run"])
        for r in old
    }
    top = max((n.level for n in info.values()), default=0)
    parents_of: dict[str, list[tuple[str, float]]] = {}
    members: dict[str, dict[str, float]] = {}
    for e in prev_edges.to_pylist():
        members.setdefault(e["parent_id"], {})[e["child_id"]] = float(e["probability"])
        parents_of.setdefault(e["child_id"], []).append((e["parent_id"], float(e["probability"])))
    by_level: dict[int, list[str]] = {}
    for node_id, n in info.items():
        by_level.setdefault(n.level, []).append(node_id)

    # level 0: the leaves now, in document order
    # a leaf's documents: every one its text occurs in (collapsed repeats: tasks/build/repeats.py), else its own
    has_docs = "doc_ids" in leaves.column_names
    lv = pl.from_arrow(leaves.select(["chunk_id", "doc_id", "ordinal", "start_char", "text", "n_tokens", *(["doc_ids"] if has_docs else [])]))
    assert isinstance(lv, pl.DataFrame)
    lv = lv if has_docs else lv.with_columns(pl.concat_list(pl.col("doc_id")).alias("doc_ids"))
    order = lv.with_row_index("row").sort(["doc_id", "ordinal", "start_char", "chunk_id"])
    vecs = _Vectors(dim, embed)
    vecs.add(order["chunk_id"].to_list(), leaf_vectors[order["row"].to_numpy()])
    current: dict[str, _Node] = {}
    for pos, (cid, docs, text, ntok) in enumerate(zip(order["chunk_id"], order["doc_ids"].to_list(), order["text"], order["n_tokens"])):
        # created_by_run None: the leaves' rows of the result (that column included) are _leaf_rows'
        current[cid] = _Node(0, text, int(ntok), docs, pos, None, "leaf", "leaf", None)
    leaf_rows = _leaf_rows(order, prev_nodes, run_id)
    old_level = set(by_level.get(0, []))
    removed: set[str] = old_level - current.keys()
    added: list[str] = [c for c in order["chunk_id"].to_list() if c not in old_level]
    replaced: dict[str, list[str]] = {}
    persist: set[str] = set()
    # previous summaries' vectors: their texts are in the embedding cache
    prev_summaries = [i for lvl in range(1, top + 1) for i in by_level.get(lvl, [])]
    if prev_summaries:
        vecs.add(prev_summaries, embed([info[i].text for i in prev_summaries]))

    out_nodes: dict[str, _Node] = dict(current)
    out_edges: list[tuple[str, str, float, int]] = []
    stats: list[UpdateLevelStats] = []
    out_models: list[LevelModel] = []
    n_assigned = len(added)
    for level in range(1, top + 1):
        t0 = time.perf_counter()
        clusters = {p: dict(members.get(p, {})) for p in by_level.get(level, [])}
        before = {p: set(m) for p, m in clusters.items()}
        model = models.get(level)
        gone_children = set(removed) | (set(replaced) - persist)  # a split's piece may keep the old cluster's id
        training_dropped = None
        if model is not None:
            model, training_dropped = model.without_training(gone_children)
        origin: dict[str, tuple[int, int]] = {}
        if model is not None:
            for p in clusters:
                so = info[p].summary_of
                if so is not None and so in model.origins:
                    origin[p] = model.origins[so]
        # 1. children that left; 2. rewritten children take their old one's place
        for c in gone_children:
            for p, _ in parents_of.get(c, []):
                if p in clusters:
                    clusters[p].pop(c, None)
        for old_id, news in replaced.items():
            for p, prob in parents_of.get(old_id, []):
                if p in clusters:
                    for new_id in news:
                        clusters[p][new_id] = prob
        # 3. new children (new leaves; a new cluster's summary one level up): by the fitted models, each
        # join admitted only as close to the cluster's centroid as its own members; the rest open clusters
        orphans = [c for c in added if not any(c in m for m in clusters.values())]
        assigned = assigned_by_centroid = rejected = opened = None
        opened_groups: list[list[tuple[str, float]]] = []
        if orphans:
            gates = _Gates.of(vecs, clusters)
            placed, turned_away, fell_back = _place(orphans, vecs, clusters, gates, origin, model, cfg)
            for c, joins in placed.items():
                for p, prob in joins:
                    clusters[p][c] = prob
            opened_groups = _open(turned_away, vecs, out_nodes, cfg, gates.threshold)
            assigned, assigned_by_centroid = len(orphans) - len(turned_away), fell_back
            rejected, opened = len(turned_away), len(opened_groups)
        # 4. dissolve clusters left with one child (they had more); empty ones disappear
        dissolved = 0
        for p in list(clusters):
            m = clusters[p]
            if len(m) == 1 and len(before[p]) > 1 and len(clusters) > 1:
                (child, prob), = m.items()
                del clusters[p]
                dissolved += 1
                if not any(child in mm for mm in clusters.values()):
                    target = _nearest(vecs.get([child])[0], vecs, clusters)
                    clusters[target][child] = prob
        emptied = sum(1 for p in list(clusters) if not clusters[p] and clusters.pop(p) is not None)
        # 5. which clusters changed membership; split the oversized ones with the build's guard
        changed = [p for p in clusters if set(clusters[p]) != before[p]]
        jobs: list[tuple[str, list[tuple[str, float]]]] = []  # (old parent, members) per new summary
        splits = 0
        for p in changed:
            kids = sorted(clusters[p].items(), key=lambda kv: (out_nodes[kv[0]].pos, kv[0]))
            if len(kids) > 1 and sum(out_nodes[k].n_tokens for k, _ in kids) > cfg.max_cluster_tokens:
                ids = [k for k, _ in kids]
                pieces = split_cluster(vecs.get(ids), np.array([out_nodes[k].n_tokens for k in ids]), [pr for _, pr in kids], cfg)
                if len(pieces) > 1:
                    splits += 1
                for piece in pieces:
                    jobs.append((p, [(ids[r], float(pr)) for r, pr in piece]))
            else:
                jobs.append((p, kids))
        # a piece with exactly the old members (the guard cut the newcomers off) keeps the old summary
        next_persist: set[str] = set()
        kept_jobs = []
        for old_p, kids in jobs:
            if {k for k, _ in kids} == before.get(old_p):
                next_persist.add(old_p)
                out_nodes[old_p] = replace(info[old_p], pos=min(out_nodes[k].pos for k, _ in kids))
                out_edges.extend((old_p, k, prob, level) for k, prob in kids)
            else:
                kept_jobs.append((old_p, kids))
        # and the clusters opened for the nodes no cluster admitted (old parent None: new nodes of the level)
        all_jobs: list[tuple[str | None, list[tuple[str, float]]]] = [
            *kept_jobs, *((None, sorted(kids, key=lambda kv: (out_nodes[kv[0]].pos, kv[0]))) for kids in opened_groups)]
        # 6. summarize only those
        new_ids: list[str] = []
        summarized: dict[str, Any] = {}  # n_fallback, fallback_reasons, tokens_in, tokens_out: when there were summaries to write
        if all_jobs:
            child_lists = pl.Series("child_ids", [[k for k, _ in kids] for _, kids in all_jobs], dtype=pl.List(pl.String))
            node_ids, of = summary_ids(child_lists, level, name)
            texts_in = [[out_nodes[k].text for k, _ in kids] for _, kids in all_jobs]
            results = _safe_summaries(summarizer, texts_in, fallback)
            node_ids, names = mark_fallbacks(node_ids, child_lists, level, name, fallback, results)
            summarized = {"n_fallback": sum(1 for r in results if r.status != "ok"), "fallback_reasons": fallback_reasons(r.status for r in results),
                          "tokens_in": sum(r.tokens_in for r in results), "tokens_out": sum(r.tokens_out for r in results)}
            texts = [r.text for r in results]
            n_tok = tokenizer.count_many(texts)
            vecs.defer(node_ids.to_list(), texts)  # embedded with the other levels' new summaries
            for (was, kids), nid, so, text, nt, r, who in zip(all_jobs, node_ids.to_list(), of.to_list(), texts, n_tok, results, names.to_list()):
                docs = sorted({d for k, _ in kids for d in out_nodes[k].doc_ids})
                out_nodes[nid] = _Node(level, text, int(nt), docs, min(out_nodes[k].pos for k, _ in kids), so, who, r.status, run_id)
                for k, prob in kids:
                    out_edges.append((nid, k, prob, level))
                new_ids.append(nid)
                if was is not None and was in origin:
                    origin[nid] = origin[was]
        # 7. the untouched clusters keep their summary (position recomputed from their children)
        next_removed: set[str] = set()
        next_replaced: dict[str, list[str]] = {}
        for p in by_level.get(level, []):
            if p in next_persist:
                continue
            if p in clusters and p not in changed:
                out_nodes[p] = replace(info[p], pos=min(out_nodes[k].pos for k in clusters[p]))
                for k, prob in clusters[p].items():
                    out_edges.append((p, k, prob, level))
            else:
                next_removed.add(p)
        next_added: list[str] = []
        for (was, _), nid in zip(all_jobs, new_ids):
            if was is None:
                next_added.append(nid)  # an opened cluster's summary: a new node of the level
            else:
                next_replaced.setdefault(was, []).append(nid)
        next_removed -= set(next_replaced)
        if model is not None:
            out_models.append(replace(model, origins={so: o for p, o in origin.items()
                                                      if p in out_nodes and out_nodes[p].level == level and (so := out_nodes[p].summary_of)}))
        stats.append(UpdateLevelStats(
            level, len(all_jobs), removed_children=len(removed), new_children=len(added), replaced_children=len(replaced),
            training_dropped=training_dropped, assigned=assigned, assigned_by_centroid=assigned_by_centroid,
            assigned_leaves=n_assigned if level == 1 else None, rejected=rejected, opened=opened, dissolved=dissolved, emptied=emptied, split=splits,
            clusters=sum(1 for n in out_nodes.values() if n.level == level), seconds=round(time.perf_counter() - t0, 3), **summarized,
        ))
        removed, replaced, persist, added = next_removed, next_replaced, next_persist, next_added
    # the last level's replaced/removed have no parents: nothing more to do
    return _assemble(out_nodes, out_edges, vecs, out_models, stats, background, leaf_rows=leaf_rows)


#: The share of a level's members that may be farther from their cluster's centroid than a new
#: node joining a cluster of that level is from its centroid (:class:`_Gates`; the module
#: docstring has the measurements it was chosen by).
ADMIT_QUANTILE = 0.05


@dataclass(frozen=True)
class _Gates:
    """Who may join the clusters of a level: a new node joins cluster ``p`` only when its cosine to
    ``p``'s centroid (the mean of the members' unit vectors) is at least ``threshold``, one number
    for the level: the :data:`ADMIT_QUANTILE` quantile of every member's cosine to the centroid of
    the *other* members of its cluster (a member measured as a newcomer is, from outside), over
    every cluster of the level with two members or more. So a new node must be as close to the
    cluster it joins as 95 % of the level's members are to theirs, however loose that cluster is
    (a cluster whose own members sit far from its centroid admits nothing farther than the level's
    members usually are). ``-inf`` when no cluster of the level has two members: nothing to
    measure, every join is admitted."""

    ids: list[str]
    centroids: np.ndarray  # (len(ids), dim) unit rows
    threshold: float

    @classmethod
    def of(cls, vecs: _Vectors, clusters: dict[str, dict[str, float]]) -> _Gates:
        ids = [p for p, m in clusters.items() if m]
        cents = np.zeros((len(ids), vecs.dim), np.float32)
        spreads: list[np.ndarray] = []
        for j, p in enumerate(ids):
            u = _unit(vecs.get(list(clusters[p])))
            total = u.sum(axis=0)
            cents[j] = _unit(total)
            if len(u) >= 2:
                rest = _unit(total[None, :] - u)  # each member's view of the others' centroid
                spreads.append(np.einsum("ij,ij->i", u, rest))
        threshold = float(np.quantile(np.concatenate(spreads), ADMIT_QUANTILE)) if spreads else -np.inf
        return cls(ids, cents, threshold)

    def admits(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(cosines, admitted)``: each row of ``x`` against each cluster's centroid, and whether it may join."""
        sims = _unit(np.asarray(x, np.float32)) @ self.centroids.T
        return sims, sims >= self.threshold


def _place(
    new: list[str], vecs: _Vectors, clusters: dict[str, dict[str, float]], gates: _Gates, origin: dict[str, tuple[int, int]],
    model: LevelModel | None, cfg: ClusterConfig,
) -> tuple[dict[str, list[tuple[str, float]]], list[str], int]:
    """``(joins, turned_away, fell_back)``: the clusters each new node joins (:func:`_assign`'s choices
    that ``gates`` admit; none admitted: the nearest cluster by centroid that admits it, probability
    1), the nodes no cluster admits (in the order given), and how many of :func:`_assign`'s choices
    fell back to the nearest centroid."""
    if not gates.ids:
        return {}, list(new), 0
    proposed, fell_back = _assign(new, vecs, clusters, {p: o for p, o in origin.items() if p in gates.ids}, model, cfg)
    col = {p: j for j, p in enumerate(gates.ids)}
    sims, ok = gates.admits(vecs.get(new))
    joins: dict[str, list[tuple[str, float]]] = {}
    turned_away: list[str] = []
    for r, c in enumerate(new):
        kept = [(p, prob) for p, prob in proposed[c] if p in col and ok[r, col[p]]]
        if not kept and ok[r].any():
            kept = [(gates.ids[int(np.argmax(np.where(ok[r], sims[r], -np.inf)))], 1.0)]
        if kept:
            joins[c] = kept
        else:
            turned_away.append(c)
    return joins, turned_away, fell_back


def _open(new: list[str], vecs: _Vectors, nodes: dict[str, _Node], cfg: ClusterConfig, threshold: float) -> list[list[tuple[str, float]]]:
    """New clusters of the level for the nodes ``new`` that no cluster admitted: more than
    ``cfg.dims + 1`` of them (the build's own minimum for a level) are clustered as the build
    clusters a level (:func:`~arborag.tasks.cluster.fit.cluster_level`, its token guard included);
    fewer are grouped nearest first, each node joining the opened group whose centroid is nearest
    when its cosine to it is at least ``threshold`` (the level's, :class:`_Gates`) and the group stays under
    ``cfg.max_cluster_tokens``, else opening a group of its own (one member: summarized like any
    one-child cluster of the build)."""
    if not new:
        return []
    x = _unit(vecs.get(new))
    tokens = [nodes[c].n_tokens for c in new]
    if len(new) > cfg.dims + 1:
        from arborag.tasks.cluster.fit import cluster_level

        return [[(new[r], float(prob)) for r, prob in c] for c in cluster_level(x, np.asarray(tokens), cfg)]
    groups: list[list[int]] = []
    sums: list[np.ndarray] = []
    sizes: list[int] = []
    for r in range(len(new)):
        best, score = -1, -np.inf
        for g, total in enumerate(sums):
            s = float(_unit(total) @ x[r])
            if s >= threshold and s > score and sizes[g] + tokens[r] <= cfg.max_cluster_tokens:
                best, score = g, s
        if best < 0:
            groups.append([r]); sums.append(x[r].copy()); sizes.append(tokens[r])
        else:
            groups[best].append(r); sums[best] = sums[best] + x[r]; sizes[best] += tokens[r]
    return [[(new[r], 1.0) for r in g] for g in groups]


def _assign(
    new: list[str], vecs: _Vectors, clusters: dict[str, dict[str, float]], origin: dict[str, tuple[int, int]],
    model: LevelModel | None, cfg: ClusterConfig,
) -> tuple[dict[str, list[tuple[str, float]]], int]:
    """Clusters each new node joins, with its membership probability; and how many fell back to
    the nearest centroid (no usable fit)."""
    x = vecs.get(new)
    out: dict[str, list[tuple[str, float]]] = {c: [] for c in new}
    gf = model.global_fit() if model is not None else None
    usable = gf is not None and len(gf.train_ids) >= 2 and all(t in vecs for t in gf.train_ids)
    if not usable:
        for c, v in zip(new, x):
            out[c].append((_nearest(v, vecs, clusters), 1.0))
        return out, len(new)
    assert gf is not None and model is not None
    by_origin: dict[tuple[int, int], list[str]] = {}
    for p, o in origin.items():
        if p in clusters:
            by_origin.setdefault(o, []).append(p)
    reduced = knn_transform(x, vecs.get(gf.train_ids), gf.fit.reduced, gf.fit.n_neighbors)
    fell_back = 0
    for g_col, g_members in enumerate(gf.memberships(reduced, cfg.threshold)):
        cands_g = [p for (g, _), ps in by_origin.items() if g == g_col for p in ps]
        for r, p_g in g_members:
            # inside the global cluster: the nearest of its clusters by centroid (see the module docstring)
            cands = cands_g
            if not cands:
                cands, fell_back = list(clusters), fell_back + 1
            target = cands[0] if len(cands) == 1 else _nearest(x[r], vecs, {p: clusters[p] for p in cands})
            out[new[r]].append((target, float(p_g)))
    for c in new:  # one entry per cluster (max probability)
        best: dict[str, float] = {}
        for p, prob in out[c]:
            best[p] = max(prob, best.get(p, 0.0))
        out[c] = sorted(best.items())
    return out, fell_back


def _nearest(v: np.ndarray, vecs: _Vectors, clusters: dict[str, dict[str, float]]) -> str:
    """The cluster whose centroid (mean of its members' unit vectors) is most cosine-similar to ``v``."""
    best, score = next(iter(clusters)), -np.inf
    u = _unit(np.asarray(v, np.float32))
    for p, m in clusters.items():
        if not m:
            continue
        c = _unit(vecs.get(list(m)).mean(axis=0))
        s = float(c @ u)
        if s > score:
            best, score = p, s
    return best


#: The nodes table's columns as ``_assemble`` builds them, and ``pos`` (the order within a level).
_NODE_FRAME: dict[str, Any] = {"node_id": pl.String, "level": pl.Int32, "text": pl.String, "n_tokens": pl.Int32, "doc_ids": pl.List(pl.String),
               "summary_of": pl.String, "summarizer": pl.String, "summary_status": pl.String, "created_by_run": pl.String, "pos": pl.Int64}


def _leaf_rows(order: pl.DataFrame, prev_nodes: pa.Table, run_id: str) -> pl.DataFrame:
    """The leaves' rows of the updated nodes table (:data:`_NODE_FRAME`), from ``order`` (the
    leaves in document order: ``pos`` is the row) in columns: a leaf keeps the run that created it
    when the previous tree had it, else it is this run's. Most of a tree's nodes are leaves; the
    summaries (few) come from :func:`update_tree`'s nodes."""
    prev = pl.from_arrow(prev_nodes.select(["node_id", "level", "created_by_run"]))
    assert isinstance(prev, pl.DataFrame)
    had = prev.filter(pl.col("level") == 0).select(pl.col("node_id").alias("chunk_id"), pl.col("created_by_run").alias("_prev_run"),
                                                   pl.lit(True).alias("_had"))
    return order.with_row_index("pos").join(had, on="chunk_id", how="left", maintain_order="left").select(
        pl.col("chunk_id").alias("node_id"),
        pl.lit(0).alias("level"),
        "text",
        "n_tokens",
        "doc_ids",
        pl.lit(None).alias("summary_of"),
        pl.lit("leaf").alias("summarizer"),
        pl.lit("leaf").alias("summary_status"),
        pl.when(pl.col("_had").fill_null(False)).then(pl.col("_prev_run")).otherwise(pl.lit(run_id)).alias("created_by_run"),
        "pos",
    ).cast(_NODE_FRAME)  # type: ignore[arg-type]


def _assemble(nodes: dict[str, _Node], edges: list[tuple[str, str, float, int]], vecs: _Vectors, models: list[LevelModel], stats: list[UpdateLevelStats],
              background: bool = False, *, leaf_rows: pl.DataFrame) -> UpdateResult:
    """The result tables: the leaves' rows (:func:`_leaf_rows`) and the summaries of ``nodes``
    (turned from Python objects into columns here), ordered by (level, position, id); every edge once."""
    from arborag.storage.frames import to_table

    rows = [i for i in nodes if nodes[i].level > 0]
    built = pl.DataFrame(
        {
            "node_id": rows,
            "level": [nodes[i].level for i in rows],
            "text": [nodes[i].text for i in rows],
            "n_tokens": [nodes[i].n_tokens for i in rows],
            "doc_ids": [nodes[i].doc_ids for i in rows],
            "summary_of": [nodes[i].summary_of for i in rows],
            "summarizer": [nodes[i].summarizer for i in rows],
            "summary_status": [nodes[i].summary_status for i in rows],
            "created_by_run": [nodes[i].created_by_run for i in rows],
            "pos": [nodes[i].pos for i in rows],
        },
        schema=_NODE_FRAME,
    )
    df = pl.concat([leaf_rows, built]).sort(["level", "pos", "node_id"]).drop("pos")
    ids = df["node_id"].to_list()
    pending: Future[np.ndarray] | None = None
    if background and vecs.waiting:
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="arborag-summary-vectors")
        pending = pool.submit(vecs.get, ids)
        pool.shutdown(wait=False)
    e = pl.DataFrame(
        {"parent_id": [x[0] for x in edges], "child_id": [x[1] for x in edges], "probability": [x[2] for x in edges], "level": [x[3] for x in edges]},
        schema={"parent_id": pl.String, "child_id": pl.String, "probability": pl.Float32, "level": pl.Int32},
    ).unique(["parent_id", "child_id"], keep="first").sort(["level", "parent_id", "child_id"])
    if pending is not None:
        return UpdateResult(to_table(df, "nodes"), to_table(e, "edges"), np.zeros((0, vecs.dim), np.float32), models, stats, pending=pending)
    return UpdateResult(to_table(df, "nodes"), to_table(e, "edges"), vecs.get(ids), models, stats)


