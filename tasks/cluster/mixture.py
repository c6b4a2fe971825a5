"""Gaussian mixtures for one clustering level: k chosen by BIC, and soft memberships.

:func:`select_k` fits ``GaussianMixture(k)`` for the k that ``cfg.bic_search`` asks for
(``"exhaustive"``: 1..K; ``"coarse_to_fine"``: a geometric grid with an early stop, then every k
around the best grid points; benchmarks/results/bic_search.md) and returns the BIC argmin.
:func:`soft_membership` turns a posterior matrix into clusters. :class:`ClusterStats` counts
the fits. Used by :mod:`arborag.tasks.cluster.fit`.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from arborag.errors import ConfigError, SchemaError

__all__ = ["Cluster", "ClusterStats", "coarse_grid", "select_k", "soft_membership"]

log = logging.getLogger(__name__)

Cluster = list[tuple[int, float]]

# coarse_to_fine stops climbing the k grid after two grid points this many one-component BIC
# penalties above the best (tuned on real curves: benchmarks/results/bic_search.md).
STOP_MARGIN = 2.0
# coarse_to_fine locates the minimum with fits at this EM tolerance, then refits the N_EXACT
# best candidates with sklearn's default tol (1e-3).
LOOSE_TOL = 1e-2
N_EXACT = 4
LOOSE_MIN_N = 500


@dataclass
class ClusterStats:
    """Counters of one :func:`cluster_level` call (filled when a stats object is passed)."""

    n: int = 0
    n_distinct: int = 0
    global_k: int = 0
    local_ks: list[int] = field(default_factory=list)
    gmm_fits: int = 0
    umap_fits: int = 0
    reclustered: int = 0
    cut: int = 0
    umap_s: float = 0.0
    gmm_s: float = 0.0
    #: wall seconds of the top pass's global fit (its UMAP, then its BIC search): the part of a
    #: level that nothing else of a build can run beside — the leaves' or the previous level's
    #: summaries' vectors go in, every local fit and summary of the level waits for it
    global_s: float = 0.0
    #: of which the global UMAP (one core: seeded UMAP runs its layout on one thread)
    global_umap_s: float = 0.0
    #: CPU seconds of that UMAP's one-thread SGD layout (:func:`arborag.tasks.cluster.umap_import.layout_thread_seconds`):
    #: the part of the level nothing else of the method can run beside — its neighbour search may
    #: use both cores
    global_layout_s: float = 0.0
    #: CPU seconds of the same fits on the thread that ran each (``time.thread_time``): ``umap_s``
    #: and ``gmm_s`` are wall seconds, which a fit sharing a core with other work overstates; a
    #: fit's work on other threads (the global fit's neighbour search) is not in these
    umap_cpu_s: float = 0.0
    gmm_cpu_s: float = 0.0

    #: the counters that add up over fits and trees (the sizes, ks and local ks are per call)
    SUMMED: ClassVar[tuple[str, ...]] = ("gmm_fits", "umap_fits", "reclustered", "cut", "umap_s", "gmm_s", "global_s", "global_umap_s",
                                        "global_layout_s", "umap_cpu_s", "gmm_cpu_s")

    def add(self, other: "ClusterStats") -> None:
        """Add ``other``'s :data:`SUMMED` counters to these (a local fit's, or another tree's level)."""
        for name in self.SUMMED:
            setattr(self, name, getattr(self, name) + getattr(other, name))


# -- membership ---------------------------------------------------------------------------------
def soft_membership(probs: np.ndarray, threshold: float) -> list[Cluster]:
    """Clusters (one per column with members) from a posterior matrix ``probs`` (n, k).

    Row i joins column c when ``probs[i, c] > threshold``; a row under the threshold in every
    column joins its argmax column. Columns without members are dropped. Members are in row
    order; each is ``(row, probs[row, c])``.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2:
        raise SchemaError("cluster probabilities", f"must be 2-D (n, k), got shape {probs.shape}")
    n, k = probs.shape
    if n == 0:
        return []
    if k == 0:
        raise SchemaError("cluster probabilities", "has no columns")
    member = probs > threshold
    orphans = np.flatnonzero(~member.any(axis=1))
    if orphans.size:
        member[orphans, np.argmax(probs[orphans], axis=1)] = True
    clusters: list[Cluster] = []
    for c in range(k):
        rows = np.flatnonzero(member[:, c])
        if rows.size:
            clusters.append([(int(r), float(probs[r, c])) for r in rows])
    return clusters


# -- BIC search ---------------------------------------------------------------------------------
def coarse_grid(max_k: int) -> list[int]:
    """The coarse grid of k: 1..6, then steps of ~25% (8, 10, 12, 15, 19, 24, 30, 38, 48), then max_k."""
    if max_k <= 6:
        return list(range(1, max_k + 1))
    grid = list(range(1, 7))
    k = 6
    while True:
        k = max(k + 1, int(round(k * 1.25)))
        if k >= max_k:
            break
        grid.append(k)
    grid.append(max_k)
    return grid


def _params_per_component(dims: int) -> int:
    """Free parameters a full-covariance Gaussian component adds: mean, covariance, weight."""
    return dims + dims * (dims + 1) // 2 + 1


def _count_gmm_fit(stats: ClusterStats | None, t0: float, c0: float) -> None:
    """Count one GMM fit started at ``t0`` (``time.perf_counter``) / ``c0`` (``time.thread_time``)."""
    if stats is not None:
        stats.gmm_fits += 1
        stats.gmm_s += time.perf_counter() - t0
        stats.gmm_cpu_s += time.thread_time() - c0


def _fit_gmm(x: np.ndarray, k: int, seed: int, stats: ClusterStats | None, *, tol: float = 1e-3) -> Any:
    """scikit-learn's ``GaussianMixture(k, random_state=seed)`` fitted to ``x`` (``tol`` 1e-3 is
    sklearn's default); None when the fit fails."""
    from sklearn.mixture import GaussianMixture

    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gmm = GaussianMixture(n_components=k, random_state=seed, tol=tol).fit(x)
    except (ValueError, np.linalg.LinAlgError, FloatingPointError) as exc:
        log.debug("GMM k=%d failed on %d points: %s", k, len(x), exc)
        gmm = None
    _count_gmm_fit(stats, t0, c0)
    return gmm


def _exact_from_loose(loose: Any, x: np.ndarray, stats: ClusterStats | None) -> Any:
    """The fit ``_fit_gmm(x, k, seed)`` (tol 1e-3) would return, continued from the loose fit
    ``loose`` (tol ``LOOSE_TOL``) of the same ``x``, k and seed instead of started again.

    EM is deterministic after its seeded k-means start, and both fits share that start: the
    exact fit runs the loose fit's iterations one for one (same floats) and goes on where the
    loose one stopped, until its own tolerance or sklearn's 100 iterations in all. So: when
    the loose fit's last change is already under the exact tolerance, or it used all its
    iterations, the exact fit is that very model; otherwise sklearn's ``warm_start`` resumes
    EM from the loose parameters and lower bound for the iterations left — the parameters
    are those of the fit from scratch, bit for bit (tests/tasks compare)."""
    import copy

    bounds = list(getattr(loose, "lower_bounds_", None) or [])
    max_iter = int(loose.max_iter)
    if not bounds or len(bounds) != int(loose.n_iter_):  # an sklearn without lower_bounds_: start again
        return None
    last = bounds[-1] - bounds[-2] if len(bounds) >= 2 else math.inf
    if not loose.converged_ or loose.n_iter_ >= max_iter or abs(last) < 1e-3:
        return loose
    t0, c0 = time.perf_counter(), time.thread_time()
    gmm = copy.deepcopy(loose)
    gmm.set_params(warm_start=True, tol=1e-3, max_iter=max_iter - int(loose.n_iter_))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gmm.fit(x)
    except (ValueError, np.linalg.LinAlgError, FloatingPointError) as exc:
        log.debug("GMM k=%d failed on %d points: %s", loose.n_components, len(x), exc)
        gmm = False  # the fit from scratch fails the same way
    _count_gmm_fit(stats, t0, c0)
    return gmm


def _gmm_job(x: np.ndarray, k: int, seed: int, tol: float, loose: Any) -> tuple[Any, ClusterStats]:
    """One fit :func:`select_k` asks for, in this process or the helper's (:mod:`arborag.tasks.cluster.processes`):
    the exact fit continued from ``loose`` when given (:func:`_exact_from_loose`), else
    ``GaussianMixture(k)`` at ``tol``. Returns (model or None, the fits' counters)."""
    st = ClusterStats()
    if loose is not None:
        gmm = _exact_from_loose(loose, x, st)
        if gmm is False:  # the exact fit fails the same way: no model
            return None, st
        if gmm is not None:
            return gmm, st
    gmm = _fit_gmm(x, k, seed, st, tol=tol)
    return gmm, st


def select_k(
    x: np.ndarray,
    max_k: int,
    seed: int,
    method: Literal["exhaustive", "coarse_to_fine"] = "coarse_to_fine",
    *,
    stats: ClusterStats | None = None,
    lanes: Any = None,
) -> tuple[int, Any, dict[int, float]]:
    """k with the minimum BIC among 1..max_k, its fitted GaussianMixture, and the exact BICs computed.

    ``exhaustive`` fits every k with sklearn's defaults (tol 1e-3). ``coarse_to_fine`` first
    *locates* the minimum — from ``LOOSE_MIN_N`` points on with loose fits (tol ``LOOSE_TOL``,
    ~3-5x cheaper at large k; their BIC ranks the candidates almost exactly like the full fits
    do), below it with exact fits:

    1. the :func:`coarse_grid` upwards, stopping once two consecutive grid points are worse
       than the best so far by more than ``STOP_MARGIN`` one-component BIC penalties
       (ln(n) * parameters per component) — past its minimum the BIC climbs steadily with k;
    2. every k strictly between the grid neighbours of the two best grid points;
    3. then fits the ``N_EXACT`` best of those candidates exactly (a no-op for exact probes;
       a loose probe's exact fit continues its EM instead of starting again:
       :func:`_exact_from_loose`, the same model) and returns the exact argmin.

    The exact fits are the very fits ``exhaustive`` makes, so when the candidates include the
    exhaustive argmin both methods return the same model (how often:
    benchmarks/results/bic_search.md). Ties go to the smaller k; a k whose fit fails counts as
    BIC = +inf.

    ``lanes`` (:class:`arborag.tasks.cluster.processes.Lanes`): the independent fits of each step run on two
    processes — the grid two points at a time (a point past the stop is fitted and dropped, never
    used), the in-between points and the exact fits all at once. Every fit is seeded and the
    results are taken in the order above, so the answer is the one-process answer.
    """
    n = len(x)
    max_k = max(1, min(int(max_k), n))
    bics: dict[int, float] = {}
    models: dict[int, Any] = {}
    loose_models: dict[int, Any] = {}
    loose: dict[int, float] = {}

    def fit_all(jobs: list[tuple[int, float, Any]]) -> list[Any]:
        """The models of ``jobs`` ((k, tol, loose model or None) each), on the lanes when given."""
        args = [(x, k, seed, tol, lm) for k, tol, lm in jobs]
        out = lanes.map(_gmm_job, args) if lanes is not None and len(args) > 1 else [_gmm_job(*a) for a in args]
        if stats is not None:
            for _, st in out:
                stats.add(st)
        return [gmm for gmm, _ in out]

    def exact(ks: list[int]) -> dict[int, Any]:
        ks = [k for k in dict.fromkeys(ks) if k not in bics and 1 <= k <= max_k]
        return dict(zip(ks, fit_all([(k, 1e-3, loose_models.get(k)) for k in ks])))

    def keep_exact(k: int, gmm: Any) -> None:
        models[k] = gmm
        bics[k] = float(gmm.bic(x)) if gmm is not None else math.inf

    if method == "exhaustive" or (method == "coarse_to_fine" and max_k <= N_EXACT + 2):
        for k, gmm in exact(list(range(1, max_k + 1))).items():
            keep_exact(k, gmm)
    elif method == "coarse_to_fine":
        use_loose = n >= LOOSE_MIN_N  # below it loose fits are not much cheaper than exact ones

        def probe(ks: list[int]) -> dict[int, Any]:
            """Fits of the new ks among ``ks`` (loose, or exact below LOOSE_MIN_N), not yet kept."""
            ks = [k for k in dict.fromkeys(ks) if k not in loose and 1 <= k <= max_k]
            if not use_loose:
                return exact(ks)
            return dict(zip(ks, fit_all([(k, LOOSE_TOL, None) for k in ks])))

        def keep(k: int, gmm: Any) -> None:
            if use_loose:
                loose[k] = float(gmm.bic(x)) if gmm is not None else math.inf
                loose_models[k] = gmm
            else:
                keep_exact(k, gmm)
                loose[k] = bics[k]

        margin = STOP_MARGIN * math.log(max(n, 2)) * _params_per_component(x.shape[1])
        grid: list[int] = []
        worse = 0
        points = coarse_grid(max_k)
        step = 2 if lanes is not None else 1
        stop = False
        for at in range(0, len(points), step):
            fitted = probe(points[at : at + step])
            for k in points[at : at + step]:  # in grid order; a point after the stop is dropped
                if k in fitted:
                    keep(k, fitted[k])
                grid.append(k)
                worse = worse + 1 if loose[k] > min(loose.values()) + margin else 0
                if worse >= 2:
                    stop = True
                    break
            if stop:
                break
        ranked = sorted(grid, key=lambda k: (loose[k], k))
        between: list[int] = []
        for g in ranked[:2]:
            i = grid.index(g)
            lo = grid[i - 1] if i > 0 else g
            hi = grid[i + 1] if i + 1 < len(grid) else g
            between.extend(range(lo + 1, hi))
        for k, gmm in probe(between).items():
            keep(k, gmm)
        for k, gmm in exact(sorted(loose, key=lambda k: (loose[k], k))[:N_EXACT]).items():
            keep_exact(k, gmm)
    else:  # pragma: no cover - guarded by the config Literal
        raise ConfigError(f"unknown cluster.bic_search {method!r}")
    best = min(bics, key=lambda k: (bics[k], k))
    if not math.isfinite(bics[best]):
        return 1, None, bics
    return best, models[best], bics
