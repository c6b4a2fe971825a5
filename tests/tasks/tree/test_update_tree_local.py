"""The local tree update (tasks/tree/update.update_tree) on synthetic clustered vectors: the tree
it returns keeps the build's invariants after adds, deletes, a cluster that grows past the token
limit (split by the build's guard) and a cluster left with one child (dissolved); and the fitted
models survive a save/load round trip. PCA stands in for UMAP (no numba JIT; the real UMAP runs
in test_update_incremental.py), real GMMs and the extractive summarizer; the embedding of
summaries is a deterministic stand-in (a hash-seeded vector), so no model loads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from arborag.config import ClusterConfig, TreeConfig
from arborag.storage.schemas import CHUNKS
from arborag.tasks.summarize.extractive import ExtractiveSummarizer
from arborag.tasks.tree.build import build_tree, summary_node_id
from arborag.tasks.tree.update import update_tree
from arborag.tasks.tree.model import load_models, save_models

DIM = 24
WORDS = ["amber", "birch", "cobalt", "dune", "ember", "fjord", "glacier", "harbor"]


def _embed(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), DIM), np.float32)
    for i, t in enumerate(texts):
        rng = np.random.default_rng(int(hashlib.blake2b(t.encode(), digest_size=8).hexdigest(), 16))
        out[i] = rng.standard_normal(DIM)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _leaves(spec: list[tuple[str, int, int]], centers: np.ndarray, seed: int) -> tuple[pa.Table, np.ndarray]:
    """``spec``: (doc_id, topic, n chunks) -> a CHUNKS table and clustered vectors (rows aligned)."""
    rng = np.random.default_rng(seed)
    rows, vecs = [], []
    for doc, topic, n in spec:
        for j in range(n):
            text = f"{WORDS[topic]} note {doc} {j}. The {WORDS[topic]} of {doc} is item {j}."
            rows.append({"chunk_id": f"{doc}-{j}", "doc_id": doc, "section_id": None, "ordinal": j, "start_char": j * 10,
                         "end_char": j * 10 + 9, "n_tokens": 20, "text": text, "header": "", "strategy": "sentence"})
            v = centers[topic] + 0.15 * rng.standard_normal(DIM)
            vecs.append(v / np.linalg.norm(v))
    return pa.Table.from_pylist(rows, schema=CHUNKS), np.asarray(vecs, np.float32)


def _check(nodes: pa.Table, edges: pa.Table, name: str) -> None:
    """The build's invariants: ids, edges, content-addressed summary ids, doc_ids, coverage."""
    n = {r["node_id"]: r for r in nodes.to_pylist()}
    assert len(n) == nodes.num_rows
    kids: dict[str, list[str]] = {}
    parents: dict[str, int] = {}
    for e in edges.to_pylist():
        assert e["parent_id"] in n and e["child_id"] in n
        assert n[e["parent_id"]]["level"] == e["level"] == n[e["child_id"]]["level"] + 1
        kids.setdefault(e["parent_id"], []).append(e["child_id"])
        parents[e["child_id"]] = parents.get(e["child_id"], 0) + 1
    top = max(r["level"] for r in n.values())
    for node_id, r in n.items():
        if r["level"] > 0:
            assert kids.get(node_id), f"summary {node_id} has no children"
            assert node_id == summary_node_id(r["level"], name, kids[node_id])
            assert sorted(r["doc_ids"]) == sorted({d for k in kids[node_id] for d in n[k]["doc_ids"]})
        if r["level"] < top:
            assert parents.get(node_id, 0) >= 1, f"level-{r['level']} node {node_id} has no parent"


@pytest.fixture(scope="module", autouse=True)
def pca_for_umap() -> Iterator[None]:
    """PCA stands in for UMAP here (the update logic is under test, and this file stays fast
    without numba's JIT); tests/flows/update/test_update_incremental.py runs the real UMAP."""
    from arborag.tasks.cluster import fit
    from arborag.tasks.cluster.reduction import pca

    mp = pytest.MonkeyPatch()
    mp.setattr(fit, "umap_reduce", lambda x, dims, nn, seed, stats: pca(x, max(1, min(dims, len(x) - 2))))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def built() -> dict:
    centers = np.random.default_rng(7).standard_normal((6, DIM))
    spec = [(f"d{i:02d}", i % 6, 4) for i in range(30)]
    leaves, vecs = _leaves(spec, centers, 1)
    cfg = ClusterConfig(dims=4, max_cluster_tokens=400)
    summ = ExtractiveSummarizer()
    res = build_tree(leaves, vecs, embed=_embed, summarizer=summ, cfg=cfg, tree_cfg=TreeConfig(), run_id="r0")
    assert res.models and res.models[0].global_fit() is not None
    return {"centers": centers, "spec": spec, "leaves": leaves, "vecs": vecs, "cfg": cfg, "summ": summ, "res": res}


def _update(built: dict, leaves: pa.Table, vecs: np.ndarray, cfg: ClusterConfig | None = None, tmp: Path | None = None, *,
            embed=_embed, background: bool = False):
    res = built["res"]
    models = {m.level: m for m in res.models}
    if tmp is not None:  # through the files the snapshot keeps
        save_models(tmp, res.models)
        models = load_models(tmp)
    return update_tree(res.nodes, res.edges, models, leaves, vecs, embed=embed, summarizer=built["summ"],
                       cfg=cfg or built["cfg"], run_id="r1", background=background)


def _recording(calls: list[list[str]]):
    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return _embed(texts)
    return embed


def _check_vectors(up, leaves: pa.Table, leaf_vecs: np.ndarray) -> None:
    """Every row of the result's vectors is its node's: a leaf's given vector, a summary's text embedded."""
    rows = {cid: i for i, cid in enumerate(leaves.column("chunk_id").to_pylist())}
    vectors = up.wait_vectors()
    assert vectors.shape == (up.nodes.num_rows, DIM)
    for i, r in enumerate(up.nodes.select(["node_id", "level", "text"]).to_pylist()):
        want = leaf_vecs[rows[r["node_id"]]] if r["level"] == 0 else _embed([r["text"]])[0]
        np.testing.assert_array_equal(vectors[i], want)


def test_update_tree_add_and_delete_keep_the_invariants(built: dict, tmp_path: Path) -> None:
    _check(built["res"].nodes, built["res"].edges, built["summ"].name)
    spec = [s for s in built["spec"] if s[0] not in ("d03", "d10")] + [("new1", 2, 3), ("new2", 5, 2)]
    leaves, vecs = _leaves(spec, built["centers"], 1)
    up = _update(built, leaves, vecs, tmp=tmp_path / "clusters")
    _check(up.nodes, up.edges, built["summ"].name)
    ids = set(up.nodes.column("node_id").to_pylist())
    assert not {f"d03-{j}" for j in range(4)} & ids and {"new1-0", "new2-1"} <= ids
    assert not any(d in ("d03", "d10") for ds in up.nodes.column("doc_ids").to_pylist() for d in ds)
    # a leaf keeps the run that created it; a new one is this run's
    leaf_runs = {r["node_id"]: r["created_by_run"] for r in up.nodes.to_pylist() if r["level"] == 0}
    assert {leaf_runs[c] for c in leaf_runs if c.startswith("new")} == {"r1"}
    assert {leaf_runs[c] for c in leaf_runs if not c.startswith("new")} == {"r0"}
    new_parents = {e["parent_id"] for e in up.edges.to_pylist() if e["child_id"].startswith("new1")}
    assert new_parents and up.stats[0].assigned_by_centroid == 0  # placed by the fitted models
    # the fitted models put the new topic-2 leaves beside old topic-2 leaves
    text = {r["node_id"]: r["text"] for r in up.nodes.to_pylist()}
    for p in new_parents:
        siblings = [e["child_id"] for e in up.edges.to_pylist() if e["parent_id"] == p and not e["child_id"].startswith("new")]
        assert siblings and all(WORDS[2] in text[c] for c in siblings), (p, [text[c] for c in siblings])
    old_summaries = {r["node_id"] for r in built["res"].nodes.to_pylist() if r["level"] > 0}
    kept = old_summaries & ids
    assert kept, "untouched clusters keep their summaries"
    assert up.summaries == len({r["node_id"] for r in up.nodes.to_pylist() if r["level"] > 0} - old_summaries)


def test_update_tree_changes_none_of_its_inputs(built: dict) -> None:
    """The models handed in (training rows, origins) and the previous tables are as they were after an
    update that drops leaves from the fits, rewrites summaries and adds leaves; a second update from
    the same inputs gives the same tree."""
    res = built["res"]
    models = {m.level: m for m in res.models}
    before = {lv: ([list(f.train_ids) for f in m.fits], dict(m.origins), [f.fit.reduced.copy() for f in m.fits]) for lv, m in models.items()}
    nodes_before, edges_before = res.nodes.to_pylist(), res.edges.to_pylist()
    spec = [s for s in built["spec"] if s[0] not in ("d03", "d10")] + [("new1", 2, 3)]
    leaves, vecs = _leaves(spec, built["centers"], 1)

    def run():
        return update_tree(res.nodes, res.edges, models, leaves, vecs, embed=_embed, summarizer=built["summ"], cfg=built["cfg"], run_id="r1")

    first = run()
    assert sum(s.training_dropped or 0 for s in first.stats) > 0 and first.summaries > 0  # the update did drop and rewrite
    for lv, m in models.items():
        ids, origins, reduced = before[lv]
        assert [f.train_ids for f in m.fits] == ids and m.origins == origins
        assert all(np.array_equal(f.fit.reduced, r) for f, r in zip(m.fits, reduced))
    assert res.nodes.to_pylist() == nodes_before and res.edges.to_pylist() == edges_before
    second = run()
    assert second.nodes.equals(first.nodes) and second.edges.equals(first.edges)
    assert [(m.level, [f.train_ids for f in m.fits], m.origins) for m in second.models] == \
        [(m.level, [f.train_ids for f in m.fits], m.origins) for m in first.models]


def test_update_tree_splits_a_cluster_that_grows_past_the_token_limit(built: dict) -> None:
    spec = list(built["spec"]) + [(f"grow{i}", 4, 4) for i in range(8)]  # 32 more leaves of topic 4
    leaves, vecs = _leaves(spec, built["centers"], 1)
    cfg = built["cfg"].model_copy(update={"max_cluster_tokens": 160})
    up = _update(built, leaves, vecs, cfg)
    _check(up.nodes, up.edges, built["summ"].name)
    tok = {r["node_id"]: r["n_tokens"] for r in up.nodes.to_pylist()}
    kids: dict[str, list[str]] = {}
    for e in up.edges.to_pylist():
        if e["level"] == 1:
            kids.setdefault(e["parent_id"], []).append(e["child_id"])
    rewritten = {r["node_id"] for r in up.nodes.to_pylist() if r["level"] == 1 and r["created_by_run"] == "r1"}
    assert rewritten and sum(s.split or 0 for s in up.stats) >= 1
    for p in rewritten:
        assert len(kids[p]) == 1 or sum(tok[k] for k in kids[p]) <= cfg.max_cluster_tokens


def test_update_tree_dissolves_a_cluster_left_with_one_child(built: dict) -> None:
    res = built["res"]
    kids: dict[str, list[str]] = {}
    for e in res.edges.to_pylist():
        if e["level"] == 1:
            kids.setdefault(e["parent_id"], []).append(e["child_id"])
    parent, children = next((p, c) for p, c in sorted(kids.items()) if len(c) >= 3)
    keep = children[0]
    drop = set(children[1:])
    chunks = built["leaves"]
    mask = pa.array([cid not in drop for cid in chunks.column("chunk_id").to_pylist()])
    up = _update(built, chunks.filter(mask), built["vecs"][np.asarray(mask.to_pylist())])
    _check(up.nodes, up.edges, built["summ"].name)
    after: dict[str, list[str]] = {}
    for e in up.edges.to_pylist():
        if e["level"] == 1:
            after.setdefault(e["parent_id"], []).append(e["child_id"])
    holding = [p for p, c in after.items() if keep in c]
    assert holding and parent not in after
    singles_before = {p for p, c in kids.items() if len(c) == 1}
    assert all(len(after[p]) > 1 or p in singles_before for p in holding)
    assert sum((s.dissolved or 0) + (s.emptied or 0) for s in up.stats) >= 1


def test_update_tree_embeds_the_new_summaries_of_every_level_in_one_call(built: dict) -> None:
    """One round trip to the embedder for all new summaries (not one per level), and each
    node's vector is still its own."""
    spec = [s for s in built["spec"] if s[0] != "d03"] + [("new1", 2, 3)]
    leaves, vecs = _leaves(spec, built["centers"], 1)
    calls: list[list[str]] = []
    up = _update(built, leaves, vecs, embed=_recording(calls))
    _check(up.nodes, up.edges, built["summ"].name)
    new = [r for r in up.nodes.to_pylist() if r["level"] > 0 and r["created_by_run"] == "r1"]
    assert len({r["level"] for r in new}) >= 2, "the change should reach more than one level"
    previous = [r["text"] for r in built["res"].nodes.to_pylist() if r["level"] > 0]
    assert calls[0] == previous  # the previous summaries (cache hits in a run)
    assert len(calls) == 2 and sorted(calls[1]) == sorted(r["text"] for r in new)  # each new summary once (texts may repeat)
    _check_vectors(up, leaves, vecs)


def test_update_tree_in_the_background_returns_the_same_tree_and_vectors(built: dict) -> None:
    spec = [s for s in built["spec"] if s[0] not in ("d03", "d10")] + [("new1", 2, 3), ("new2", 5, 2)]
    leaves, vecs = _leaves(spec, built["centers"], 1)
    here = _update(built, leaves, vecs)
    beside = _update(built, leaves, vecs, background=True)
    assert here.pending is None and beside.pending is not None
    assert beside.nodes.equals(here.nodes) and beside.edges.equals(here.edges)
    np.testing.assert_array_equal(beside.wait_vectors(), here.vectors)
    assert beside.pending is None
    _check_vectors(beside, leaves, vecs)


def test_update_tree_embeds_deferred_summaries_first_when_a_step_needs_their_vectors(built: dict) -> None:
    """A split at level 2 clusters new level-1 summaries by their vectors: those are embedded
    then (an extra call), and every vector is still its node's."""
    spec = list(built["spec"]) + [(f"grow{i}", 4, 4) for i in range(8)]
    leaves, vecs = _leaves(spec, built["centers"], 1)
    cfg = built["cfg"].model_copy(update={"max_cluster_tokens": 160})
    calls: list[list[str]] = []
    up = _update(built, leaves, vecs, cfg, embed=_recording(calls), background=True)
    _check(up.nodes, up.edges, built["summ"].name)
    _check_vectors(up, leaves, vecs)
    assert len(calls) >= 3, "the level-2 split should have embedded the deferred level-1 summaries first"
    embedded = sorted(t for c in calls[1:] for t in c)
    new = sorted(r["text"] for r in up.nodes.to_pylist() if r["level"] > 0 and r["created_by_run"] == "r1")
    assert embedded == new  # every new summary embedded once


def _ancestors(edges: pa.Table) -> dict[str, set[str]]:
    parents: dict[str, set[str]] = {}
    for e in edges.to_pylist():
        parents.setdefault(e["child_id"], set()).add(e["parent_id"])

    def up(node: str) -> set[str]:
        return set().union(*({p} | up(p) for p in parents.get(node, ()))) if node in parents else set()

    return {c: up(c) for c in parents}


def _fake_topic_embed(centers: np.ndarray):
    """A fake embedder whose vectors follow the topics, as a real one's would: a text's vector is the
    sum of the centres of the topic words it holds (:data:`WORDS`), plus a little hash-seeded noise.
    (The summaries' vectors of :func:`_embed` are random: no cluster of theirs has a spread to measure.)"""
    def embed(texts: list[str]) -> np.ndarray:
        out = 0.3 * _embed(texts)
        for i, t in enumerate(texts):
            out[i] += sum(t.count(w) * centers[k] / np.linalg.norm(centers[k]) for k, w in enumerate(WORDS[: len(centers)]))
        return out / np.linalg.norm(out, axis=1, keepdims=True)
    return embed


@pytest.fixture(scope="module")
def built_topics(built: dict) -> dict:
    """``built``'s leaves and a seventh topic's centre, the tree built with :func:`_fake_topic_embed`."""
    centers = np.vstack([built["centers"], np.random.default_rng(11).standard_normal((1, DIM))])
    embed = _fake_topic_embed(centers)
    res = build_tree(built["leaves"], built["vecs"], embed=embed, summarizer=built["summ"], cfg=built["cfg"], tree_cfg=TreeConfig(), run_id="r0")
    return {**built, "centers": centers, "res": res, "embed": embed}


def _far_topic(built: dict, docs: list[tuple[str, int]]) -> tuple[pa.Table, np.ndarray, set[str]]:
    """The built leaves plus ``docs`` (doc_id, n chunks) of the seventh topic, which none of the clusters holds."""
    leaves, vecs = _leaves(list(built["spec"]) + [(d, 6, n) for d, n in docs], built["centers"], 1)
    return leaves, vecs, {f"{d}-{j}" for d, n in docs for j in range(n)}


@pytest.mark.parametrize("docs", [[("far1", 4), ("far2", 4), ("far3", 4)], [("far1", 2)]], ids=["clustered", "grouped"])
def test_update_tree_opens_clusters_for_leaves_far_from_every_cluster(built_topics: dict, docs: list[tuple[str, int]]) -> None:
    """Leaves of a topic the tree does not hold join no existing cluster: they open clusters of their
    own (clustered as the build clusters a level when there are more than dims + 1 of them, else
    grouped nearest first), whose summaries go up as new nodes; below the top level no summary holds
    both an old and a new leaf, and the tree keeps the build's invariants."""
    built = built_topics
    leaves, vecs, far = _far_topic(built, docs)
    up = _update(built, leaves, vecs, embed=built["embed"])
    _check(up.nodes, up.edges, built["summ"].name)
    level = dict(zip(up.nodes.column("node_id").to_pylist(), up.nodes.column("level").to_pylist()))
    top = max(level.values())
    above = _ancestors(up.edges)
    old = {c for c, lv in level.items() if lv == 0} - far
    assert all(above.get(c) for c in far)
    shared = set().union(*(above[c] for c in far)) & set().union(*(above[c] for c in old))
    assert not {p for p in shared if level[p] < top}
    first = up.stats[0]
    assert first.rejected == len(far) and first.opened and first.assigned == 0
    assert first.clusters == sum(1 for r in built["res"].nodes.to_pylist() if r["level"] == 1) + first.opened


def test_update_tree_admits_leaves_of_the_trees_topics(built_topics: dict) -> None:
    """New leaves of topics the clusters hold are admitted (none turned away, none opened)."""
    built = built_topics
    spec = list(built["spec"]) + [("new1", 2, 3), ("new2", 5, 2)]
    leaves, vecs = _leaves(spec, built["centers"], 1)
    up = _update(built, leaves, vecs, embed=built["embed"])
    assert up.stats[0].assigned == 5 and up.stats[0].rejected == 0 and up.stats[0].opened == 0


def test_gates_admit_a_node_as_close_to_the_centroid_as_the_levels_members() -> None:
    """The threshold is the ADMIT_QUANTILE quantile of every member's cosine to the centroid of the
    other members of its cluster, over the level: a node just inside it joins, one just outside does
    not; a one-member cluster (no spread of its own, none counted) takes the same threshold."""
    from arborag.tasks.tree.update import ADMIT_QUANTILE, _Gates, _Vectors

    angles = {"a": 0.0, "b": 0.4, "c": -0.2, "s": 2.0}
    vecs = _Vectors(2)
    vecs.add(list(angles), np.array([[np.cos(t), np.sin(t)] for t in angles.values()]))
    gates = _Gates.of(vecs, {"p": {"a": 1.0, "b": 1.0, "c": 1.0}, "q": {"s": 1.0}})
    # each member's view of the others' centroid: a sees angle 0.1, b -0.1, c 0.2 (0.1, 0.5, 0.4 rad away)
    want = float(np.quantile(np.cos([0.1, 0.5, 0.4]), ADMIT_QUANTILE))
    assert gates.threshold == pytest.approx(want, abs=1e-6)
    centre = np.arctan2(*reversed(np.mean([[np.cos(t), np.sin(t)] for t in (0.0, 0.4, -0.2)], axis=0)))
    probe = [[np.cos(t), np.sin(t)] for t in (centre + np.arccos(want) - 0.01, centre + np.arccos(want) + 0.01,
                                              2.0 + np.arccos(want) - 0.01, 2.0 + np.arccos(want) + 0.01)]
    _, ok = gates.admits(np.array(probe))
    assert ok[:, 0].tolist() == [True, False, False, False] and ok[:, 1].tolist() == [False, False, True, False]
    lone = _Gates.of(vecs, {"p": {"a": 1.0}, "q": {"s": 1.0}})
    assert lone.threshold == -np.inf and lone.admits(np.array(probe))[1].all()  # nothing to measure: every join admitted


def test_gates_a_loose_cluster_refuses_a_node_farther_than_the_levels_members_usually_are() -> None:
    """Eight tight clusters and one loose one (members 0.9 rad either side of its centre): a node 1 rad
    from the loose cluster's centroid is nearer to it than the loose cluster's outer members are to
    the others' centroid (1.35 rad), but farther than the level's members usually are from theirs, so
    the loose cluster refuses it; a node at its centroid joins."""
    from arborag.tasks.tree.update import _Gates, _Vectors

    dim = 12
    eye = np.eye(dim)
    noise = np.random.default_rng(3).standard_normal((8, 5, dim))
    ids: list[str] = []
    rows: list[np.ndarray] = []
    clusters: dict[str, dict[str, float]] = {}
    for k in range(8):  # tight: 5 members around axis k
        for j in range(5):
            ids.append(f"t{k}-{j}")
            rows.append(eye[k] + 0.05 * noise[k, j])
            clusters.setdefault(f"t{k}", {})[ids[-1]] = 1.0
    for j, t in enumerate((-0.9, 0.0, 0.9)):  # loose: 3 members in the plane of axes 8 and 9
        ids.append(f"l-{j}")
        rows.append(np.cos(t) * eye[8] + np.sin(t) * eye[9])
        clusters.setdefault("loose", {})[ids[-1]] = 1.0
    vecs = _Vectors(dim)
    vecs.add(ids, np.array(rows) / np.linalg.norm(rows, axis=1, keepdims=True))
    gates = _Gates.of(vecs, clusters)
    far, centre = np.cos(1.0) * eye[8] + np.sin(1.0) * eye[10], eye[8]
    sims, ok = gates.admits(np.array([far, centre]))
    col = gates.ids.index("loose")
    assert sims[0, col] == pytest.approx(np.cos(1.0), abs=1e-6) and sims[0, col] > np.cos(1.35)
    assert ok[:, col].tolist() == [False, True]
    assert not ok[0].any()  # and no other cluster takes it: it is turned away
