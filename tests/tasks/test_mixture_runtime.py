"""GaussianMixture as arborag runs it (tasks/mixture_runtime.py): scikit-learn's numbers, bit for bit."""

from __future__ import annotations

import copy
import logging
import warnings

import numpy as np
import pytest
from sklearn.mixture import GaussianMixture as SklearnGM
from threadpoolctl import threadpool_limits

from arborag.config import ClusterConfig
from arborag.tasks import gmm_steps, mixture, mixture_runtime
from arborag.tasks.mixture_runtime import GaussianMixture

FIELDS = ("weights_", "means_", "covariances_", "precisions_cholesky_", "precisions_", "lower_bound_", "n_iter_",
          "converged_", "lower_bounds_")


def _fit(cls: type, x: np.ndarray, k: int, seed: int, **kw: object) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return cls(n_components=k, random_state=seed, **kw).fit(x)
        except (ValueError, np.linalg.LinAlgError) as exc:
            return type(exc)


def _assert_same(got: object, want: object, x: np.ndarray) -> None:
    if isinstance(want, type):  # the fit failed: it must fail the same way
        assert got is want
        return
    assert not isinstance(got, type), f"arborag's fit failed where scikit-learn's did not: {got}"
    for name in FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        assert np.array_equal(np.asarray(a), np.asarray(b)), name
        assert np.asarray(a).dtype == np.asarray(b).dtype, name
    assert np.array_equal(got.predict_proba(x), want.predict_proba(x))  # type: ignore[attr-defined]
    assert got.bic(x) == want.bic(x)  # type: ignore[attr-defined]
    assert np.array_equal(got.score_samples(x), want.score_samples(x))  # type: ignore[attr-defined]


def _problems() -> list[tuple[np.ndarray, int, int, float]]:
    """Blobs of the shapes a tree's clustering fits (10-dim UMAP outputs, 12-1,500 points, k 1-30),
    plus degenerate ones: duplicated points, a collapsed dimension, as many points as components."""
    rng = np.random.default_rng(0)
    out: list[tuple[np.ndarray, int, int, float]] = []
    for n, blobs, k, seed, tol in ((12, 2, 3, 224, 1e-3), (40, 3, 5, 224, 1e-3), (60, 4, 9, 7, 1e-3), (200, 6, 12, 224, 1e-2),
                                   (200, 6, 12, 224, 1e-3), (1500, 20, 30, 42, 1e-2), (90, 1, 1, 224, 1e-3), (33, 3, 33, 224, 1e-3)):
        centres = rng.uniform(-8, 8, (blobs, 10))
        x = centres[rng.integers(0, blobs, n)] + rng.standard_normal((n, 10)) * rng.uniform(0.2, 1.5)
        out.append((x.astype(np.float32), k, seed, tol))
    dup = rng.standard_normal((50, 10)).astype(np.float32)
    dup[25:] = dup[:25]
    out.append((dup, 6, 224, 1e-3))
    flat = rng.standard_normal((80, 10)).astype(np.float32)
    flat[:, 3] = 1.0
    out.append((flat, 4, 224, 1e-3))
    return out


@pytest.mark.parametrize("case", range(10))
def test_fits_are_scikit_learns_bit_for_bit(case: int):
    x, k, seed, tol = _problems()[case]
    with threadpool_limits(1):
        _assert_same(_fit(GaussianMixture, x, k, seed, tol=tol), _fit(SklearnGM, x, k, seed, tol=tol), x)


def test_real_clustering_problems_are_scikit_learns(real_reduced_points):
    """UMAP outputs of real chunk vectors (the global pass and a local one), k across the BIC search's range."""
    with threadpool_limits(1):
        for x in real_reduced_points:
            for k in (1, 2, 4, 7, 12, 19):
                if k < len(x):
                    _assert_same(_fit(GaussianMixture, x, k, 224), _fit(SklearnGM, x, k, 224), x)


@pytest.fixture(scope="module")
def real_reduced_points() -> list[np.ndarray]:
    from arborag.tasks.clustering import _reduce

    rng = np.random.default_rng(1)
    # real-shaped points without the embedder: unit vectors around a few random topics, reduced by the
    # clustering's own seeded UMAP to its 10 dimensions (a global pass and one of ~60 points)
    topics = rng.standard_normal((8, 64))
    v = topics[rng.integers(0, 8, 400)] + 0.6 * rng.standard_normal((400, 64))
    v = (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)
    cfg = ClusterConfig()
    with threadpool_limits(1):
        return [_reduce(v, cfg.dims, 19, cfg.seed, None), _reduce(v[:60], cfg.dims, cfg.local_neighbors, cfg.seed, None)]


def test_warm_start_continuation_is_scikit_learns():
    """mixture._exact_from_loose continues a loose fit with warm_start: the same floats either class."""
    x, k, seed, _ = _problems()[4]
    with threadpool_limits(1):
        runs = []
        for cls in (GaussianMixture, SklearnGM):
            loose = _fit(cls, x, k, seed, tol=1e-2)
            cont = copy.deepcopy(loose)
            cont.set_params(warm_start=True, tol=1e-6, max_iter=50)  # type: ignore[attr-defined]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cont.fit(x)  # type: ignore[attr-defined]
            runs.append(cont)
        _assert_same(runs[0], runs[1], x)
        assert runs[0].n_iter_ > 1  # type: ignore[attr-defined]


def test_other_configurations_run_scikit_learns_code():
    x, k, seed, _ = _problems()[2]
    with threadpool_limits(1):
        for kw in ({"covariance_type": "diag"}, {"init_params": "random"}, {"covariance_type": "tied"}):
            _assert_same(_fit(GaussianMixture, x, k, seed, **kw), _fit(SklearnGM, x, k, seed, **kw), x)
        x64 = x.astype(np.float64)
        _assert_same(_fit(GaussianMixture, x64, k, seed), _fit(SklearnGM, x64, k, seed), x64)


def test_the_clustering_fits_with_it_and_select_k_is_unchanged():
    x, _, _, _ = _problems()[4]
    assert mixture_runtime.gaussian_mixture_class() is GaussianMixture
    gmm = mixture._fit_gmm(x, 6, 224, None)
    assert type(gmm) is GaussianMixture
    with threadpool_limits(1):
        k, model, bics = mixture.select_k(x, 15, 224, "coarse_to_fine")
    ref = {kk: _fit(SklearnGM, x, kk, 224).bic(x) for kk in bics}  # type: ignore[attr-defined]
    assert {kk: float(b) for kk, b in bics.items()} == {kk: float(b) for kk, b in ref.items()}
    assert k == min(bics, key=lambda kk: (bics[kk], kk))


def test_a_scikit_learn_that_computes_otherwise_falls_back_to_its_class(monkeypatch, caplog):
    """The per-process check: when arborag's steps no longer match (e.g. after an upgrade), fit with scikit-learn's."""
    monkeypatch.setattr(mixture_runtime, "_VERIFIED", [])
    real = gmm_steps.gaussian_parameters

    def drifted(x: np.ndarray, resp: np.ndarray, reg_covar: float):  # a scikit-learn whose M step moved by 1 ulp
        nk, means, cov = real(x, resp, reg_covar)
        return nk, np.nextafter(means, np.inf), cov

    monkeypatch.setattr(gmm_steps, "gaussian_parameters", drifted)
    with caplog.at_level(logging.WARNING, logger="arborag.tasks.clustering"):
        assert mixture_runtime.gaussian_mixture_class() is SklearnGM
    assert "using scikit-learn's" in caplog.text
    x, k, seed, _ = _problems()[1]
    assert type(mixture._fit_gmm(x, k, seed, None)) is SklearnGM
