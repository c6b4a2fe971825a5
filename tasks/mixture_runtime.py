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
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any

import numpy as np
from sklearn.mixture import GaussianMixture as _SklearnGaussianMixture

__all__ = ["GaussianMixture", "gaussian_mixture_class", "verified"]

log = logging.getLogger("arborag.tasks.clustering")

_FAILED = (
    "Fitting the mixture model failed because some components have ill-defined empirical covariance "
    "(for instance caused by singleton or collapsed samples). Try to decrease the number of components, "
    "increase reg_covar, or scale the input data."
)
_LAPACK: dict[Any, tuple[Any, Any]] = {}


def _lapack(dtype: Any) -> tuple[Any, Any]:
    """LAPACK's potrf and trtrs for ``dtype`` (as scipy.linalg picks them for such arrays)."""
    funcs = _LAPACK.get(dtype)
    if funcs is None:
        from scipy.linalg.lapack import get_lapack_funcs

        probe = np.zeros((2, 2), dtype=dtype)
        funcs = _LAPACK[dtype] = tuple(get_lapack_funcs(("potrf", "trtrs"), (probe, probe)))  # type: ignore[assignment]
    return funcs


def precision_cholesky(covariances: np.ndarray) -> np.ndarray:
    """scikit-learn's ``_compute_precision_cholesky(covariances, "full")``: for each component the
    inverse of its covariance's lower Cholesky factor, transposed. Raises its ValueError when a
    covariance is not positive definite (or not finite, as scipy's input check does)."""
    k, d, _ = covariances.shape
    potrf, trtrs = _lapack(covariances.dtype)
    out = np.empty((k, d, d), dtype=covariances.dtype)
    eye = np.eye(d, dtype=covariances.dtype)
    for j in range(k):
        cov = covariances[j, :, :]
        if not np.isfinite(cov).all():
            raise ValueError("array must not contain infs or NaNs")
        chol, info = potrf(cov, lower=True, overwrite_a=False, clean=True)
        if info != 0:
            raise ValueError(_FAILED)
        # scipy's solve_triangular: trtrs on the factor as stored (Fortran order from potrf)
        if chol.flags.f_contiguous:
            inv, info = trtrs(chol, eye, overwrite_b=False, lower=True, trans=0, unitdiag=False)
        else:
            inv, info = trtrs(chol.T, eye, overwrite_b=False, lower=False, trans=1, unitdiag=False)
        if info != 0:
            raise np.linalg.LinAlgError(f"singular matrix: resolution failed at diagonal {info - 1}")
        out[j, :, :] = inv.T
    return out


def gaussian_parameters(x: np.ndarray, resp: np.ndarray, reg_covar: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's ``_estimate_gaussian_parameters(x, resp, reg_covar, "full")``: (nk, means,
    covariances)."""
    nk = np.sum(resp, axis=0) + 10 * np.finfo(resp.dtype).eps
    means = (resp.T @ x) / nk[:, np.newaxis]
    k, d = means.shape
    covariances = np.empty((k, d, d), dtype=x.dtype)
    reg = np.asarray(reg_covar, dtype=x.dtype)
    for j in range(k):
        diff = x - means[j, :]
        covariances[j, :, :] = ((resp[:, j] * diff.T) @ diff) / nk[j]
        covariances[j, :, :].flat[: d * d : d + 1] += reg
    return nk, means, covariances


def log_gaussian_prob(x: np.ndarray, means: np.ndarray, precisions_chol: np.ndarray) -> np.ndarray:
    """scikit-learn's ``_estimate_log_gaussian_prob(x, means, precisions_chol, "full")``."""
    n, d = x.shape
    k = means.shape[0]
    log_det = np.sum(np.log(precisions_chol.reshape(k, -1)[:, :: d + 1]), axis=1)
    log_prob = np.empty((n, k), dtype=x.dtype)
    for j in range(k):
        prec = precisions_chol[j, :, :]
        y = (x @ prec) - (means[j, :] @ prec)
        log_prob[:, j] = np.sum(np.square(y), axis=1)
    return -0.5 * (d * math.log(2 * math.pi) + log_prob) + log_det


def logsumexp_rows(a: np.ndarray) -> np.ndarray:
    """scikit-learn's ``_logsumexp(a, axis=1)`` (its own, after scipy's) for a float array."""
    a_max = np.max(a, axis=1, keepdims=True)
    at_max = a == a_max
    rest = np.array(a, copy=True)
    rest[at_max] = -np.inf
    m = np.sum(at_max.astype(rest.dtype), axis=1, keepdims=True, dtype=rest.dtype)
    shift = np.where(np.isfinite(a_max), a_max, 0)
    s = np.sum(np.exp(rest - shift), axis=1, keepdims=True, dtype=rest.dtype)
    s = np.where(s == 0, s, s / m)
    return np.squeeze(np.log1p(s) + np.log(m) + a_max, axis=1)


def _squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """scikit-learn's ``_euclidean_distances(a, b, squared=True)`` for float32 ``a`` and ``b``:
    float64 products and norms per chunk (its ``_euclidean_distances_upcast`` chunk size), each
    chunk rounded to float32, negatives clipped to 0."""
    na, nb, d = a.shape[0], b.shape[0], a.shape[1]
    maxmem = max(((na + nb) * d + na * nb) / 10, 10 * 2**17)
    tmp = 2 * d
    batch = max(int((-tmp + math.sqrt(tmp**2 + 4 * maxmem)) / 2), 1)
    out = np.empty((na, nb), dtype=np.float32)
    for xs in range(0, na, batch):
        xc = a[xs : xs + batch].astype(np.float64)
        xx = np.einsum("ij,ij->i", xc, xc)[:, None]
        for ys in range(0, nb, batch):
            yc = b[ys : ys + batch].astype(np.float64)
            dist = -2 * (xc @ yc.T)
            dist += xx
            dist += np.einsum("ij,ij->i", yc, yc)[None, :]
            out[xs : xs + batch, ys : ys + batch] = dist.astype(np.float32, copy=False)
    np.maximum(out, np.float32(0), out=out)
    return out


def kmeans_labels(x: np.ndarray, k: int, random_state: np.random.RandomState) -> np.ndarray:
    """The labels of ``KMeans(n_clusters=k, n_init=1, random_state=random_state).fit(x)`` for float32
    ``x`` (drawing from ``random_state`` as it does): k-means++ seeding with 2 + log(k) local
    trials on the centred copy, then scikit-learn's Lloyd iterations."""
    from sklearn.cluster._kmeans import _kmeans_single_lloyd
    from sklearn.utils._openmp_helpers import _openmp_effective_n_threads

    x = np.array(x, dtype=np.float32, order="C", copy=True)
    n = x.shape[0]
    tol = np.mean(np.var(x, axis=0)) * 1e-4  # KMeans' tol (1e-4) scaled by the data, before centring
    weights = np.ones(n, dtype=x.dtype)
    threads = _openmp_effective_n_threads()
    x -= x.mean(axis=0)
    centers = np.empty((k, x.shape[1]), dtype=x.dtype)
    trials = 2 + int(np.log(k))
    first = random_state.choice(n, p=weights / weights.sum())
    centers[0] = x[first]
    closest = _squared_distances(centers[0, np.newaxis], x)
    potential = closest @ weights
    for c in range(1, k):
        draws = random_state.uniform(size=trials) * potential
        candidates = np.searchsorted(np.cumsum(weights * closest), draws)
        np.clip(candidates, None, closest.size - 1, out=candidates)
        to_candidates = _squared_distances(x[candidates], x)
        np.minimum(closest, to_candidates, out=to_candidates)
        potentials = to_candidates @ weights.reshape(-1, 1)
        best = np.argmin(potentials)
        potential = potentials[best]
        closest = to_candidates[best]
        centers[c] = x[candidates[best]]
    labels, _, _, _ = _kmeans_single_lloyd(x, weights, centers, max_iter=300, verbose=False, tol=tol, n_threads=threads)
    return np.asarray(labels)


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
        weights, means, covariances = gaussian_parameters(X, resp, self.reg_covar)
        weights /= n
        self.weights_, self.means_, self.covariances_ = weights, means, covariances
        self.precisions_cholesky_ = precision_cholesky(covariances)

    def _m_step(self, X: Any, log_resp: Any, xp: Any = None) -> None:
        if not self._lean():
            super()._m_step(X, log_resp, xp=xp)
            return
        self.weights_, self.means_, self.covariances_ = gaussian_parameters(X, np.exp(log_resp), self.reg_covar)
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
    this process (checked once, ~10 ms): three well-separated float32 blobs in 10 dimensions, k 1-4."""
    with _VERIFY_LOCK:
        if not _VERIFIED:
            ok = False
            try:
                import warnings

                rng = np.random.default_rng(5)
                x = (rng.standard_normal((90, 10)) + np.repeat(np.eye(10)[:3] * 6.0, 30, axis=0)).astype(np.float32)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ok = all(
                        all(np.array_equal(a, b) for a, b in zip(_fitted(GaussianMixture, x, k, 224), _fitted(_SklearnGaussianMixture, x, k, 224)))
                        for k in (1, 2, 3, 4)
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
