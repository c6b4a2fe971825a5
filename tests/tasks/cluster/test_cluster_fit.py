"""RAPTOR clustering of one level (tasks/cluster/fit.py, tasks/cluster/mixture.py) on synthetic vectors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.vectors import blobs as _blobs
from helpers.vectors import unit as _unit
from threadpoolctl import threadpool_limits

from arborag.config import ClusterConfig
from arborag.errors import SchemaError
from arborag.tasks.cluster.fit import (
    ClusterStats,
    cluster_level,
    coarse_grid,
    cut_contiguous,
    select_k,
    soft_membership,
)

# small k range keeps the BIC sweeps fast; the algorithm is the same
CFG = ClusterConfig(max_clusters=12)


def _covered(clusters, n: int) -> bool:
    return sorted({r for c in clusters for r, _ in c}) == list(range(n))


# -- soft membership ------------------------------------------------------------------------
def test_soft_membership_thresholds_and_multi_membership():
    probs = np.array(
        [
            [0.95, 0.05, 0.00],  # only cluster 0
            [0.45, 0.55, 0.00],  # both 0 and 1
            [0.00, 0.20, 0.80],  # 1 and 2
            [0.00, 0.00, 1.00],  # only 2
        ]
    )
    clusters = soft_membership(probs, 0.1)
    assert clusters == [
        [(0, 0.95), (1, 0.45)],
        [(1, 0.55), (2, 0.2)],
        [(2, 0.8), (3, 1.0)],
    ]


def test_soft_membership_under_threshold_everywhere_joins_argmax():
    # row 1 is under 0.3 in every cluster: the reference code drops it; we put it in its argmax
    probs = np.array(
        [
            [0.9, 0.1, 0.0, 0.0],
            [0.25, 0.26, 0.24, 0.25],
            [0.0, 0.0, 0.05, 0.95],
        ]
    )
    clusters = soft_membership(probs, 0.3)
    assert _covered(clusters, 3)
    assert [(1, 0.26)] == [m for c in clusters for m in c if m[0] == 1]
    # cluster 2 (index 2) has no member and is dropped
    assert len(clusters) == 3
    assert clusters[1] == [(1, 0.26)]


def test_soft_membership_equal_probabilities_tie_goes_to_first_column():
    probs = np.full((2, 20), 0.05)
    clusters = soft_membership(probs, 0.1)
    assert clusters == [[(0, 0.05), (1, 0.05)]]


def test_cut_contiguous_groups_are_token_bounded_and_contiguous():
    tokens = np.array([100, 200, 3000, 50, 4000, 10, 10])
    members = [(r, 0.5) for r in (6, 0, 1, 2, 3, 4, 5)]  # unsorted on purpose
    groups = cut_contiguous(members, tokens, 3500)
    assert [[r for r, _ in g] for g in groups] == [[0, 1, 2, 3], [4], [5, 6]]
    for g in groups:
        assert len(g) == 1 or tokens[[r for r, _ in g]].sum() <= 3500


# -- BIC search -----------------------------------------------------------------------------
@pytest.mark.parametrize("max_k", [1, 2, 5, 6, 7, 13, 49, 50])
def test_coarse_grid_spans_the_range(max_k):
    grid = coarse_grid(max_k)
    assert grid[0] == 1 and grid[-1] == max_k
    assert grid == sorted(set(grid))


def test_select_k_coarse_to_fine_matches_exhaustive_on_clear_blobs():
    rng = np.random.default_rng(3)
    centers = rng.standard_normal((7, 5)) * 10
    x = np.concatenate([c + rng.standard_normal((40, 5)) for c in centers])
    with threadpool_limits(1):
        k_ex, gmm_ex, bics_ex = select_k(x, 20, 224, "exhaustive")
        k_cf, gmm_cf, bics_cf = select_k(x, 20, 224, "coarse_to_fine")
    assert k_ex == k_cf == 7
    assert len(bics_ex) == 20 and len(bics_cf) < 20
    assert bics_cf[k_cf] == bics_ex[k_ex]  # the very same fit
    np.testing.assert_allclose(gmm_cf.predict_proba(x), gmm_ex.predict_proba(x))


def test_exact_fit_continued_from_the_loose_fit_is_the_fit_from_scratch_bit_for_bit():
    """select_k's exact refit of a loose probe resumes its EM (mixture._exact_from_loose): the
    parameters must be those of GaussianMixture(k, tol=1e-3) fitted from scratch, exactly."""
    from arborag.tasks.cluster import mixture

    rng = np.random.default_rng(5)
    centers = rng.standard_normal((9, 6)) * 3
    x = np.concatenate([c + rng.standard_normal((70, 6)) for c in centers])
    resumed = 0
    with threadpool_limits(1):
        for k in (1, 3, 6, 9, 14, 20):
            scratch = mixture._fit_gmm(x, k, 224, None)
            loose = mixture._fit_gmm(x, k, 224, None, tol=mixture.LOOSE_TOL)
            exact = mixture._exact_from_loose(loose, x, None)
            resumed += exact is not loose
            for name in ("weights_", "means_", "covariances_", "precisions_cholesky_"):
                assert np.array_equal(getattr(scratch, name), getattr(exact, name)), (k, name)
            assert scratch.bic(x) == exact.bic(x)
    assert resumed, "at least one k must exercise the resumed EM (not only the loose model as it is)"


def test_gmm_fits_are_scikit_learns_public_gaussian_mixture_and_are_counted():
    """The BIC search fits with sklearn.mixture.GaussianMixture itself (no subclass), and each fit
    counts into the stats (fits, wall and CPU seconds)."""
    from sklearn.mixture import GaussianMixture

    from arborag.tasks.cluster import mixture

    rng = np.random.default_rng(2)
    x = np.concatenate([c + rng.standard_normal((30, 4)) for c in rng.standard_normal((3, 4)) * 8]).astype(np.float32)
    stats = ClusterStats()
    with threadpool_limits(1):
        gmm = mixture._fit_gmm(x, 3, 224, stats)
        want = GaussianMixture(n_components=3, random_state=224).fit(x)
        k, model, bics = select_k(x, 8, 224, "exhaustive", stats=stats)
    assert type(gmm) is GaussianMixture and type(model) is GaussianMixture
    for name in ("weights_", "means_", "covariances_", "precisions_cholesky_"):
        assert np.array_equal(getattr(gmm, name), getattr(want, name))
    assert k == 3 and bics[3] == float(want.bic(x))
    assert stats.gmm_fits == 1 + 8 and stats.gmm_s > 0.0 and stats.gmm_cpu_s > 0.0


def test_removed_umap_settings_are_refused_by_name(tmp_path):
    """cluster.umap_epochs and cluster.umap_layout_blocks no longer exist: a config that sets one
    gets an error naming it and saying to delete it; the default config's hash is unchanged."""
    from arborag.config import ArboragConfig, load_config
    from arborag.errors import ConfigError

    for key, value in (("umap_epochs", 200), ("umap_layout_blocks", 2)):
        with pytest.raises(ValueError, match=f"cluster.{key} was removed.*delete cluster.{key}"):
            ClusterConfig(**{key: value})
        with pytest.raises(ConfigError, match=f"cluster.{key} was removed"):
            ArboragConfig().with_overrides(cluster={key: value})
    (tmp_path / "arborag.yaml").write_text("cluster:\n  umap_epochs: 200\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="cluster.umap_epochs was removed"):
        load_config(tmp_path / "arborag.yaml")
    assert not {"umap_epochs", "umap_layout_blocks"} & set(ArboragConfig().public_dict()["cluster"])


# -- cluster_level --------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 5, 11])
def test_tiny_inputs_form_one_cluster(n):
    x, _ = _blobs([n])
    clusters = cluster_level(x, [10] * n, CFG)
    assert clusters == [[(i, 1.0) for i in range(n)]]


def test_empty_input():
    assert cluster_level(np.zeros((0, 8), np.float32), [], CFG) == []


def test_all_identical_vectors_one_cluster():
    x = _unit(np.ones((40, 16)))
    clusters = cluster_level(x, [20] * 40, CFG)
    assert clusters == [[(i, 1.0) for i in range(40)]]


def test_duplicate_vectors_share_membership():
    base, _ = _blobs([15, 15, 15], seed=1)
    x = np.concatenate([base, base[:20]])  # rows 45..64 duplicate rows 0..19
    clusters = cluster_level(x, [20] * len(x), CFG)
    assert _covered(clusters, len(x))
    for c in clusters:
        rows = {r for r, _ in c}
        for dup in range(45, 65):
            assert (dup in rows) == (dup - 45 in rows)


def test_few_distinct_vectors_among_many_rows_does_not_crash():
    a, _ = _blobs([3], seed=2)
    x = np.repeat(a, 20, axis=0)  # 60 rows, 3 distinct
    clusters = cluster_level(x, [10] * 60, CFG)
    assert _covered(clusters, 60)


def test_separated_blobs_give_pure_clusters_and_cover_every_row():
    x, labels = _blobs([30, 30, 30, 30], seed=4)
    stats = ClusterStats()
    clusters = cluster_level(x, [50] * len(x), CFG, stats=stats)
    assert _covered(clusters, len(x))
    assert stats.n == 120 and stats.global_k >= 2 and stats.umap_fits >= 1
    # the global fit is timed on its own (UMAP, then the BIC search); the local fits come after it
    assert 0.0 < stats.global_umap_s <= stats.global_s and stats.global_umap_s < stats.umap_s
    # of which the one-thread SGD layout's CPU seconds (the critical path's serial part)
    assert 0.0 < stats.global_layout_s <= stats.global_umap_s
    # every fit's CPU on its own thread, within its wall
    assert 0.0 < stats.umap_cpu_s <= stats.umap_s and 0.0 < stats.gmm_cpu_s <= stats.gmm_s
    for c in clusters:
        assert len({labels[r] for r, _ in c}) == 1, "a cluster mixes two blobs"
        for _, p in c:
            assert 0.0 < p <= 1.0 + 1e-9
    # no two clusters with the same member set
    keys = [tuple(r for r, _ in c) for c in clusters]
    assert len(keys) == len(set(keys))


def test_deterministic_for_same_seed_and_input():
    x, _ = _blobs([25, 25, 25], seed=5, spread=0.3)
    a = cluster_level(x, [40] * len(x), CFG)
    b = cluster_level(x.copy(), [40] * len(x), CFG)
    assert a == b


def test_giant_cluster_is_split_by_the_token_guard_and_terminates():
    # 80 near-identical long chunks: 80 * 400 = 32,000 tokens in what is one topic
    rng = np.random.default_rng(6)
    center = rng.standard_normal(64)
    x = _unit(center + 1e-3 * rng.standard_normal((80, 64)))
    tokens = np.full(80, 400)
    stats = ClusterStats()
    clusters = cluster_level(x, tokens, CFG, stats=stats)
    assert _covered(clusters, 80)
    for c in clusters:
        rows = [r for r, _ in c]
        assert len(rows) == 1 or tokens[rows].sum() <= CFG.max_cluster_tokens
    assert stats.reclustered + stats.cut >= 1


def test_single_member_over_the_token_limit_stays_alone():
    x, _ = _blobs([4], seed=7)
    tokens = [5000, 10, 10, 10]
    clusters = cluster_level(x, tokens, CFG)
    assert _covered(clusters, 4)
    assert [(0, 1.0)] in clusters


def test_rejects_bad_input():
    with pytest.raises(SchemaError):
        cluster_level(np.zeros((3, 4), np.float32), [1, 2], CFG)
    bad = np.ones((5, 4), np.float32)
    bad[0, 0] = np.nan
    with pytest.raises(SchemaError):
        cluster_level(bad, [1] * 5, CFG)


def test_local_fits_on_threads_give_the_same_clusters_and_fits(monkeypatch):
    """The local clusterings run on several threads (UMAP's code without the GIL); each is seeded
    and independent, so clusters, stats and the recorded fits equal those of one thread."""
    from arborag.tasks.cluster.fitted import LevelFit

    x, _ = _blobs([40, 35, 30, 25, 20], dim=48, spread=0.3, seed=4)
    tokens = np.full(len(x), 10)
    runs = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("ARBORAG_CLUSTER_THREADS", threads)
        fitted: list[LevelFit] = []
        stats = ClusterStats()
        clusters = cluster_level(x, tokens, CFG, stats=stats, fitted=fitted)
        runs[threads] = (clusters, stats, fitted[0])
    (c1, s1, f1), (c2, s2, f2) = runs["1"], runs["2"]
    assert s1.global_k > 1 and s1.umap_fits > 1  # local fits really ran
    assert c1 == c2
    assert (s1.global_k, s1.local_ks, s1.umap_fits, s1.gmm_fits) == (s2.global_k, s2.local_ks, s2.umap_fits, s2.gmm_fits)
    assert f1.origins == f2.origins
    assert len(f1.local_fits) == len(f2.local_fits)
    for a, b in zip(f1.local_fits, f2.local_fits):
        assert (a is None) == (b is None)
        if a is not None:
            assert np.array_equal(a.rows, b.rows) and np.array_equal(a.reduced, b.reduced)
            assert (a.weights is None and b.weights is None) or np.array_equal(a.means, b.means)
