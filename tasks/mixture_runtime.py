"""scikit-learn's GaussianMixture as arborag runs it: the same floats, less Python around them.

A tree's clustering fits ~800 small Gaussian mixtures per 2,500 leaves (the BIC search of every
global and local pass: 10-dimensional points, 20-2,500 of them, k up to 50; a median of 3-4 EM
iterations each). At that size the arithmetic is a small part of a fit: the rest is
scikit-learn's per-call machinery — parameter and input validation of the k-means it
initialises with, the array-API namespace look-ups around every step, scipy's input checks
around each component's Cholesky factor and triangular solve (an ``isinstance`` storm of ~750k
calls per 800 fits), a float32 distance helper that re-derives its chunking per call.

:class:`GaussianMixture` is scikit-learn's class with the hot steps of a ``covariance_type="full"``
fit on float32 data written out with the very same numpy and LAPACK operations, in the same
order, on the same dtypes — so every number it produces is scikit-learn's, bit for bit:

- the k-means start (``init_params="kmeans"``): the copy, tolerance, centring and k-means++
  seeding of ``KMeans(n_clusters=k, n_init=1, random_state=rs).fit(X)`` (its float32 squared
  distances computed in float64 chunks as scikit-learn's ``_euclidean_distances_upcast`` chunks
  them), then scikit-learn's own compiled Lloyd iterations (``_kmeans_single_lloyd``, called with
  the arguments ``KMeans.fit`` passes);
- the M step (weights, means, full covariances with ``reg_covar`` on the diagonal) and the
  precision Cholesky factors (LAPACK ``potrf`` then ``trtrs``, as ``scipy.linalg.cholesky`` and
  ``solve_triangular`` call them);
- the E step (log Gaussian densities, scikit-learn's ``_logsumexp``, the log responsibilities).

Everything else — the EM loop and its convergence test, ``warm_start``, ``predict_proba``,
``bic``, the fitted attributes — is scikit-learn's, inherited. Any other configuration
(another covariance type or init, given initial parameters, float64 data for the k-means
start) runs scikit-learn's code unchanged.

**Checked, not assumed.** ``tests/tasks/test_mixture_runtime.py`` compares every fitted attribute,
``predict_proba`` and ``bic`` with scikit-learn's on real and synthetic problems, degenerate ones
included; ``benchmarks/gmm_fits.py`` compares every fit a real clustering makes, and times both
(benchmarks/results/gmm_fits.md). And because a scikit-learn upgrade could change what its
steps compute, the first fit of every process (:func:`verified`) fits a fixed problem both
ways: if anything differs, this process logs a warning and uses scikit-learn's class from then on.

The steps themselves are in :mod:`arborag.tasks.gmm_steps` (numpy only), which the update's
``predict_proba`` shares without importing scikit-learn.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np
from sklearn.mixture import GaussianMixture as _SklearnGaussianMixture

from arborag.tasks import gmm_steps
from arborag.tasks.gmm_steps import kmeans_labels, log_gaussian_prob, logsumexp_rows, precision_cholesky

__all__ = ["GaussianMixture", "gaussian_mixture_class", "verified"]

log = logging.getLogger("arborag.tasks.clustering")


class GaussianMixture(_SklearnGaussianMixture):
    """scikit-learn's GaussianMixture; a full-covariance fit runs its steps without the per-call
    machinery (module docs). Same parameters, attributes and results."""

    def _lean(self) -> bool:
        return self.covariance_type == "full"

    def _initialize_parameters(self, X: Any, random_state: Any, xp: Any = None) -> None:
        if (
            not self._lean()
            or self.init_params != "kmeans"
            or self.weights_init is not None
            or self.means_init is not None
            or self.precisions_init is not None
            or not isinstance(X, np.ndarray)
            or X.dtype != np.float32
        ):
            super()._initialize_parameters(X, random_state, xp=xp)
            return
        n = X.shape[0]
        resp = np.zeros((n, self.n_components), dtype=X.dtype)
        resp[np.arange(n), kmeans_labels(X, self.n_components, random_state)] = 1
        weights, means, covariances = gmm_steps.gaussian_parameters(X, resp, self.reg_covar)
        weights /= n
        self.weights_, self.means_, self.covariances_ = weights, means, covariances
        self.precisions_cholesky_ = precision_cholesky(covariances)

    def _m_step(self, X: Any, log_resp: Any, xp: Any = None) -> None:
        if not self._lean():
            super()._m_step(X, log_resp, xp=xp)
            return
        self.weights_, self.means_, self.covariances_ = gmm_steps.gaussian_parameters(X, np.exp(log_resp), self.reg_covar)
        self.weights_ /= np.sum(self.weights_)
        self.precisions_cholesky_ = precision_cholesky(self.covariances_)

    def _estimate_log_prob(self, X: Any, xp: Any = None) -> Any:
        if not self._lean():
            return super()._estimate_log_prob(X, xp=xp)
        return log_gaussian_prob(X, self.means_, self.precisions_cholesky_)

    def _estimate_log_weights(self, xp: Any = None) -> Any:
        return np.log(self.weights_)

    def _estimate_log_prob_resp(self, X: Any, xp: Any = None) -> tuple[Any, Any]:
        weighted = self._estimate_weighted_log_prob(X, xp=xp)
        norm = logsumexp_rows(weighted)
        with np.errstate(under="ignore"):
            log_resp = weighted - norm[:, np.newaxis]
        return norm, log_resp

    def _e_step(self, X: Any, xp: Any = None) -> tuple[Any, Any]:
        norm, log_resp = self._estimate_log_prob_resp(X, xp=xp)
        return np.mean(norm), log_resp


_VERIFIED: list[bool] = []
_VERIFY_LOCK = threading.Lock()


def _fitted(cls: type, x: np.ndarray, k: int, seed: int) -> tuple[Any, ...]:
    gmm = cls(n_components=k, random_state=seed).fit(x)
    return (gmm.weights_, gmm.means_, gmm.covariances_, gmm.precisions_cholesky_, gmm.precisions_, gmm.predict_proba(x),
            np.asarray([gmm.lower_bound_, gmm.n_iter_, gmm.bic(x)]), np.asarray(gmm.lower_bounds_))


def verified() -> bool:
    """Whether :class:`GaussianMixture` fits a fixed problem exactly as scikit-learn's class does in
    this process (checked once: four small fits): 48 float32 points in three blobs in 10
    dimensions, k 1 and 3 (the k-means++ start with its local trials, EM, the precisions,
    ``predict_proba`` and ``bic`` all compared)."""
    with _VERIFY_LOCK:
        if not _VERIFIED:
            ok = False
            try:
                import warnings

                rng = np.random.default_rng(5)
                x = (rng.standard_normal((48, 10)) + np.repeat(np.eye(10)[:3] * 6.0, 16, axis=0)).astype(np.float32)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ok = all(
                        all(np.array_equal(a, b) for a, b in zip(_fitted(GaussianMixture, x, k, 224), _fitted(_SklearnGaussianMixture, x, k, 224)))
                        for k in (1, 3)
                    )
            except Exception as exc:  # noqa: BLE001 - any failure means: use scikit-learn's class
                log.warning("arborag's GaussianMixture could not be checked against scikit-learn's (%r); using scikit-learn's", exc)
                ok = False
            else:
                if not ok:
                    log.warning("arborag's GaussianMixture differs from this scikit-learn's on its check problem; using scikit-learn's")
            _VERIFIED.append(ok)
        return _VERIFIED[0]


def gaussian_mixture_class() -> type:
    """The class the clustering fits with: :class:`GaussianMixture` when :func:`verified`, else
    scikit-learn's."""
    return GaussianMixture if verified() else _SklearnGaussianMixture
