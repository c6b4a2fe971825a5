"""``cluster.global_pca_above``: above that many distinct nodes the global UMAP's input is first
projected on its ``cluster.global_pca_dims`` principal components; at or below it nothing changes.

The tree test uses PCA in place of UMAP for every reduction (a fake reducer that records the width
of what it is given) so it stays fast; the identity test runs the real UMAP."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pytest
from pydantic import ValidationError

from arborag.config import ClusterConfig, TreeConfig
from arborag.storage.schemas import CHUNKS
from arborag.tasks.cluster import fit as clustering
from arborag.tasks.cluster.reduction import pca, pca_project
from arborag.tasks.summarize.extractive import ExtractiveSummarizer
from arborag.tasks.tree.build import build_tree

DIM = 48


def _blobs(n_per: int, k: int = 5, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((k, DIM)) * 3
    x = np.concatenate([c + rng.standard_normal((n_per, DIM)) for c in centers]).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _fake_reducer(widths: list[int]):
    def reduce(x, dims, n_neighbors, seed, stats):  # fake UMAP: PCA, records the input width
        widths.append(x.shape[1])
        return pca(x, max(1, min(dims, len(x) - 2)))

    return reduce


def test_pca_project_keeps_the_leading_components() -> None:
    x = _blobs(40)
    p = pca_project(x, 6)
    assert p.shape == (len(x), 6) and p.dtype == np.float32
    var = p.var(axis=0)
    assert (np.diff(var) <= 1e-6).all()  # ordered by explained variance
    # the same subspace as the SVD-based PCA (up to sign, which both fix the same way)
    np.testing.assert_allclose(np.abs(p), np.abs(pca(x, 6)), rtol=1e-3, atol=1e-4)
    assert pca_project(x, DIM) is x  # nothing to drop


def test_global_pca_applies_above_the_threshold_only(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _blobs(60)
    tok = np.full(len(x), 10)
    widths: list[int] = []
    monkeypatch.setattr(clustering, "umap_reduce", _fake_reducer(widths))
    clustering.cluster_level(x, tok, ClusterConfig(global_pca_above=100, global_pca_dims=8))
    assert widths[0] == 8  # 300 distinct nodes > 100: the global UMAP sees 8 principal components
    assert set(widths[1:]) == {DIM}  # local fits keep the full vectors
    widths.clear()
    clustering.cluster_level(x, tok, ClusterConfig(global_pca_above=300, global_pca_dims=8))
    assert set(widths) == {DIM}  # 300 is not above 300


def test_config_refuses_a_threshold_below_two() -> None:
    with pytest.raises(ValidationError, match="global_pca_above"):
        ClusterConfig(global_pca_above=1)


def _leaves(x: np.ndarray) -> pa.Table:
    rows = [{"chunk_id": f"c{i:04d}", "doc_id": f"d{i // 8:03d}", "section_id": None, "ordinal": i % 8, "start_char": 0,
             "end_char": 9, "n_tokens": 20, "text": f"Note {i} of topic {i // 60}. It says item {i}.", "header": "",
             "strategy": "sentence"} for i in range(len(x))]
    return pa.Table.from_pylist(rows, schema=CHUNKS)


def _fake_embed(texts: list[str]) -> np.ndarray:  # fake embedder: a hash-seeded unit vector per text
    out = np.zeros((len(texts), DIM), np.float32)
    for i, t in enumerate(texts):
        out[i] = np.random.default_rng(int(hashlib.blake2b(t.encode(), digest_size=8).hexdigest(), 16)).standard_normal(DIM)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_bounded_path_gives_a_valid_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    widths: list[int] = []
    monkeypatch.setattr(clustering, "umap_reduce", _fake_reducer(widths))
    x = _blobs(60)
    cfg = ClusterConfig(dims=4, global_pca_above=50, global_pca_dims=6, max_cluster_tokens=2000)
    res = build_tree(_leaves(x), x, embed=_fake_embed, summarizer=ExtractiveSummarizer(), cfg=cfg, tree_cfg=TreeConfig(), run_id="r0")
    assert 6 in widths  # the bounded path ran
    nodes = {r["node_id"]: r for r in res.nodes.to_pylist()}
    parents: dict[str, list[str]] = {}
    for e in res.edges.to_pylist():
        parents.setdefault(e["child_id"], []).append(e["parent_id"])
        assert nodes[e["parent_id"]]["level"] == nodes[e["child_id"]]["level"] + 1
    top = max(r["level"] for r in nodes.values())
    assert top >= 1
    for node_id, r in nodes.items():
        if r["level"] == 0:  # every leaf reaches a top-level node
            frontier = {node_id}
            for _ in range(top):
                frontier = {p for c in frontier for p in parents.get(c, [])}
                assert frontier, f"leaf {node_id} stops below the top level"
            assert all(nodes[p]["level"] == top for p in frontier)


def test_soft_membership_threshold_holds_on_the_bounded_path(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[np.ndarray] = []
    real = clustering.soft_membership

    def spy(probs, threshold):  # records each level's probabilities
        seen.append(np.asarray(probs))
        return real(probs, threshold)

    monkeypatch.setattr(clustering, "umap_reduce", _fake_reducer([]))
    monkeypatch.setattr(clustering, "soft_membership", spy)
    x = _blobs(60)
    cfg = ClusterConfig(global_pca_above=50, global_pca_dims=6, threshold=0.2)
    clusters = clustering.cluster_level(x, np.full(len(x), 10), cfg)
    assert sorted({r for c in clusters for r, _ in c}) == list(range(len(x)))
    assert seen, "no GMM split happened"
    probs = seen[0]
    for c in real(probs, cfg.threshold):
        for r, p in c:
            assert p > cfg.threshold or p == probs[r].max()


def test_below_the_threshold_the_clusters_are_identical_real_umap() -> None:
    x = _blobs(40)
    tok = np.full(len(x), 10)
    off = clustering.cluster_level(x, tok, ClusterConfig(global_pca_above=None))
    on = clustering.cluster_level(x, tok, ClusterConfig(global_pca_above=len(x), global_pca_dims=8))
    assert on == off
