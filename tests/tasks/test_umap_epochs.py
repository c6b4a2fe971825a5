"""``cluster.umap_epochs``: UMAP's SGD epochs reach every fit of a level, stay deterministic, and
the default (None = UMAP's own rule) leaves configs, build keys and trees as before the knob."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from arborag.config import ArboragConfig, ClusterConfig
from arborag.tasks import clustering
from arborag.tasks.clustering import ClusterStats, cluster_level, split_cluster
from arborag.tasks.umap_runtime import import_umap

CFG = ClusterConfig(max_clusters=12)


def _blobs(sizes: list[int], dim: int = 48, spread: float = 0.3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((len(sizes), dim))
    x = np.concatenate([centers[c] + spread * rng.standard_normal((s, dim)) for c, s in enumerate(sizes)])
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def epochs_seen(monkeypatch):
    """The ``n_epochs`` every UMAP built by arborag was given (the real UMAP still runs)."""
    umap = import_umap()
    real = umap.UMAP
    seen: list[int | None] = []

    def recording(*args, **kw):
        seen.append(kw.get("n_epochs"))
        return real(*args, **kw)

    monkeypatch.setattr(umap, "UMAP", recording)
    return seen


def test_every_fit_of_a_level_gets_the_knob(epochs_seen):
    x = _blobs([40, 35, 30, 25])
    stats = ClusterStats()
    cluster_level(x, np.full(len(x), 10), CFG.model_copy(update={"umap_epochs": 37}), stats=stats)
    assert stats.umap_fits > 1  # the global fit and local fits ran
    assert len(epochs_seen) == stats.umap_fits and set(epochs_seen) == {37}


def test_the_token_guards_reclustering_gets_the_knob(epochs_seen):
    """A cluster over max_cluster_tokens is re-clustered (the build's guard, and the update's
    split_cluster on a cluster that grew): those fits use the knob too."""
    x = _blobs([30, 30], spread=0.2, seed=3)
    out = split_cluster(x, np.full(len(x), 200), np.ones(len(x)), CFG.model_copy(update={"umap_epochs": 41}))
    assert len(out) >= 2 and epochs_seen and set(epochs_seen) == {41}


def test_default_leaves_the_number_of_epochs_to_umap(epochs_seen):
    x = _blobs([30, 30, 30])
    cluster_level(x, np.full(len(x), 10), CFG)
    assert epochs_seen and set(epochs_seen) == {None}  # UMAP's own rule: 500 below 10,000 points, 200 above


def test_fewer_epochs_are_deterministic_and_are_umaps_own_fit():
    x = _blobs([40, 30, 30], seed=2)
    a = clustering._reduce(x, 5, 15, 224, None, n_epochs=50)
    assert np.array_equal(a, clustering._reduce(x.copy(), 5, 15, 224, None, n_epochs=50))
    assert not np.array_equal(a, clustering._reduce(x, 5, 15, 224, None))  # the knob changes the layout
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = import_umap().UMAP(n_neighbors=15, n_components=5, metric="cosine", random_state=224, n_jobs=1, n_epochs=50).fit_transform(x)
    assert np.array_equal(a, want)


def test_level_with_fewer_epochs_is_deterministic():
    x = _blobs([25, 25, 25, 25], seed=5)
    cfg = CFG.model_copy(update={"umap_epochs": 100})
    a = cluster_level(x, np.full(len(x), 40), cfg)
    assert a == cluster_level(x.copy(), np.full(len(x), 40), cfg)


def test_default_keeps_config_hashes_and_tree_config_a_setting_changes_them():
    """None is not written into the public config: build keys, config hashes and the tree config an
    update compares (plan: a changed tree config re-fits the whole tree) stay those of before the
    knob; a set value is part of all three, so an update under a new setting re-fits."""
    from arborag.tasks.leaves import tree_config

    default = ArboragConfig()
    assert "umap_epochs" not in default.public_dict()["cluster"]
    set200 = default.with_overrides(cluster={"umap_epochs": 200})
    assert set200.cluster.umap_epochs == 200 and set200.public_dict()["cluster"]["umap_epochs"] == 200
    assert tree_config(set200) != tree_config(default) and set200.config_hash() != default.config_hash()


def test_rejects_too_few_epochs():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="umap_epochs"):
        ClusterConfig(umap_epochs=3)
