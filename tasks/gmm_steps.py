"""The steps of a full-covariance Gaussian-mixture fit, in numpy: scikit-learn's floats, bit for bit.

Each function computes what the scikit-learn 1.9 function it names computes, with the same numpy
and LAPACK operations in the same order on the same dtypes, without the per-call validation and
array-API look-ups around them. :mod:`arborag.tasks.mixture_runtime` fits with them (and checks
them against scikit-learn in every process); :func:`arborag.tasks.tree_update_model.predict_proba`
places an update's new points with them without importing scikit-learn (which pulls scipy.stats:
~1 s of a small update). Nothing here imports scikit-learn or scipy at module level.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["gaussian_parameters", "kmeans_labels", "log_gaussian_prob", "logsumexp_rows", "precision_cholesky"]

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
