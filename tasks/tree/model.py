"""The fitted clustering of each tree level, kept in the snapshot as data (``clusters/``).

A tree level L (L >= 1) was made by clustering the nodes of level L-1: one global UMAP + GMM
over all of them, then one local UMAP + GMM inside each global cluster
(:class:`arborag.tasks.cluster.fitted.LevelFit`). :class:`LevelModel` holds those fits with their
training rows named by node id, and each cluster's (global, local) origin keyed by its
``summary_of`` id. On disk, per level::

    clusters/level-<L>.json   fits (kind, global cluster, k, n_neighbors, training node ids) + origins
    clusters/level-<L>.npz    per fit: reduced training coordinates, GMM weights/means/covariances/precision Cholesky

No pickles: the UMAP object is not saved. What the update needs of it is its ``transform``,
which starts a new point at the strength-weighted mean of its nearest training points' reduced
coordinates (:func:`arborag.tasks.cluster.fitted.knn_transform`); that needs only the training points'
reduced coordinates (saved) and their vectors (the tree's own node vectors, looked up by id),
so a data form exists and is used. (UMAP's transform then refines with SGD epochs; we skip
them — see docs/ARCHITECTURE.md.)

A training row whose node leaves the tree (a deleted document's leaf, a rewritten summary) is
dropped from its fit, so nothing the model keeps points at text that is gone.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from arborag.storage.tables import atomic_write_bytes
from arborag.tasks.cluster.fitted import FitRecord, LevelFit
from arborag.tasks.tree.stats import UpdateLevelStats

__all__ = ["LevelModel", "ModelFit", "UpdateResult", "load_models", "model_of", "predict_proba", "save_models"]


@dataclass
class UpdateResult:
    """What a tree update returns (the corpus-wide local update and the per-document one alike)."""

    nodes: pa.Table  # NODES
    edges: pa.Table  # EDGES
    vectors: np.ndarray  # rows aligned with nodes (empty while ``pending``)
    models: list[LevelModel]
    stats: list[UpdateLevelStats] = field(default_factory=list)  # one per summary level
    #: the vectors, still being embedded on a background thread (``update_tree(..., background=True)``)
    pending: Future[np.ndarray] | None = None

    @property
    def summaries(self) -> int:
        return sum(s.rewritten for s in self.stats)

    def wait_vectors(self) -> np.ndarray:
        """The vectors (rows aligned with ``nodes``), once the pending embedding has ended (it raises what that raised)."""
        if self.pending is not None:
            self.vectors, self.pending = self.pending.result(), None
        return self.vectors


@dataclass
class ModelFit:
    kind: str  # "global" | "local"
    group: int  # the global cluster of a local fit (-1 for the global one)
    train_ids: list[str]
    fit: FitRecord
    columns: list[int] = field(default_factory=list)  # GMM components that formed clusters when fitted, in cluster order

    def memberships(self, reduced: np.ndarray, threshold: float) -> list[list[tuple[int, float]]]:
        """Per cluster of this fit (index into ``columns``): the rows of ``reduced`` that join it,
        as the build decides (P > threshold, else the argmax) over the components that formed clusters."""
        if self.fit.k == 1 or not self.columns:
            return [[(i, 1.0) for i in range(len(reduced))]]
        probs = predict_proba(self.fit, reduced)[:, self.columns]
        member = probs > threshold
        orphans = np.flatnonzero(~member.any(axis=1))
        member[orphans, np.argmax(probs[orphans], axis=1)] = True
        return [[(int(r), float(probs[r, c])) for r in np.flatnonzero(member[:, c])] for c in range(len(self.columns))]


@dataclass
class LevelModel:
    level: int  # the level these clusters make (their children are at level - 1)
    fits: list[ModelFit] = field(default_factory=list)
    origins: dict[str, tuple[int, int]] = field(default_factory=dict)  # summary_of -> (global, local)

    def global_fit(self) -> ModelFit | None:
        return next((f for f in self.fits if f.kind == "global"), None)

    def local_fit(self, group: int) -> ModelFit | None:
        return next((f for f in self.fits if f.kind == "local" and f.group == group), None)

    def without_training(self, gone: set[str]) -> tuple[LevelModel, int]:
        """This model without the training rows whose node left the tree (``gone``), and how many
        went; ``self`` is left as it is (a fit with nothing to drop is shared, not copied)."""
        dropped = 0
        fits: list[ModelFit] = []
        for f in self.fits:
            keep = np.array([i not in gone for i in f.train_ids], dtype=bool)
            if keep.all():
                fits.append(f)
                continue
            dropped += int((~keep).sum())
            fit = FitRecord(f.fit.rows[keep], f.fit.reduced[keep], f.fit.n_neighbors, f.fit.weights, f.fit.means,
                            f.fit.covariances, f.fit.precisions_cholesky)
            fits.append(replace(f, train_ids=[i for i, k in zip(f.train_ids, keep) if k], fit=fit))
        return replace(self, fits=fits), dropped


def _log_gaussian_densities(x: np.ndarray, means: np.ndarray, precisions_chol: np.ndarray) -> np.ndarray:
    """log N(x_i | mean_j, precision_j) of every point and component, (n, k), from a fitted
    full-covariance mixture's public ``means_`` and ``precisions_cholesky_``:
    -(d log 2pi + ||(x - mean_j) L_j||^2) / 2 + log det L_j."""
    n, d = x.shape
    k = means.shape[0]
    log_det = np.sum(np.log(precisions_chol.reshape(k, -1)[:, :: d + 1]), axis=1)
    sq = np.empty((n, k), dtype=x.dtype)
    for j in range(k):
        prec = precisions_chol[j, :, :]
        y = (x @ prec) - (means[j, :] @ prec)
        sq[:, j] = np.sum(np.square(y), axis=1)
    return -0.5 * (d * math.log(2 * math.pi) + sq) + log_det


def _logsumexp_rows(a: np.ndarray) -> np.ndarray:
    """log(sum(exp(a), axis=1)) of a float matrix, stable: each row's maxima taken out first."""
    a_max = np.max(a, axis=1, keepdims=True)
    at_max = a == a_max
    rest = np.array(a, copy=True)
    rest[at_max] = -np.inf
    m = np.sum(at_max.astype(rest.dtype), axis=1, keepdims=True, dtype=rest.dtype)
    shift = np.where(np.isfinite(a_max), a_max, 0)
    s = np.sum(np.exp(rest - shift), axis=1, keepdims=True, dtype=rest.dtype)
    s = np.where(s == 0, s, s / m)
    return np.squeeze(np.log1p(s) + np.log(m) + a_max, axis=1)


def predict_proba(fit: FitRecord, reduced: np.ndarray) -> np.ndarray:
    """P(component | point) of ``reduced`` points under ``fit``'s full-covariance GMM, (n, k), in
    numpy from the fitted weights, means and precision Cholesky factors: the same numbers as
    scikit-learn's ``GaussianMixture.predict_proba`` (``tests/flows/update/test_update_startup.py``
    checks equality to the bit). An update places ~1% new points with it; importing sklearn for
    that (it pulls scipy.stats) cost the update's process ~1 s. All ones for a one-component fit."""
    if fit.weights is None or fit.means is None or fit.precisions_cholesky is None:
        return np.ones((len(reduced), 1))
    weighted = _log_gaussian_densities(np.asarray(reduced, np.float64), fit.means, fit.precisions_cholesky) + np.log(fit.weights)
    norm = _logsumexp_rows(weighted)
    with np.errstate(under="ignore"):
        return np.exp(weighted - norm[:, np.newaxis])


def _columns(fit: FitRecord, threshold: float) -> list[int]:
    """The components that formed clusters on the training points (soft_membership drops the others)."""
    if fit.k == 1:
        return [0]
    probs = fit.predict_proba(fit.reduced)
    member = probs > threshold
    orphans = np.flatnonzero(~member.any(axis=1))
    member[orphans, np.argmax(probs[orphans], axis=1)] = True
    return [int(c) for c in np.flatnonzero(member.any(axis=0))]


def model_of(level: int, fitted: LevelFit, node_ids: list[str], cluster_ids: list[str], threshold: float) -> LevelModel:
    """A :class:`LevelModel` from :func:`cluster_level`'s ``LevelFit`` over nodes ``node_ids``
    (rows) whose clusters became the summaries of ``cluster_ids`` (``summary_of``, in order)."""
    fits: list[ModelFit] = []
    if fitted.global_fit is not None:
        fits.append(ModelFit("global", -1, [node_ids[r] for r in fitted.global_fit.rows.tolist()], fitted.global_fit,
                             _columns(fitted.global_fit, threshold)))
    for g, lf in enumerate(fitted.local_fits):
        if lf is not None:
            fits.append(ModelFit("local", g, [node_ids[r] for r in lf.rows.tolist()], lf, _columns(lf, threshold)))
    origins = {cid: (int(o[0]), int(o[1])) for cid, o in zip(cluster_ids, fitted.origins)}
    return LevelModel(level, fits, origins)


_ARRAYS = ("reduced", "weights", "means", "covariances", "precisions_cholesky")


def save_models(directory: Path, models: list[LevelModel]) -> None:
    """Write ``models`` under ``directory`` (created), one JSON + one npz per level, atomically per file."""
    import io

    directory.mkdir(parents=True, exist_ok=True)
    for m in models:
        arrays: dict[str, Any] = {}  # np.savez types its keyword arrays as ArrayLike | bool
        meta: list[dict[str, Any]] = []
        for i, f in enumerate(m.fits):
            for name in _ARRAYS:
                value = getattr(f.fit, name)
                if value is not None:
                    arrays[f"{i}_{name}"] = value
            meta.append({"kind": f.kind, "group": f.group, "k": f.fit.k, "n_neighbors": f.fit.n_neighbors, "train_ids": f.train_ids,
                         "columns": f.columns})
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        atomic_write_bytes(directory / f"level-{m.level}.npz", buf.getvalue())
        doc = {"level": m.level, "fits": meta, "origins": {k: list(v) for k, v in sorted(m.origins.items())}}
        atomic_write_bytes(directory / f"level-{m.level}.json", json.dumps(doc, sort_keys=True).encode("utf-8"))


def load_models(directory: Path) -> dict[int, LevelModel]:
    """The models saved by :func:`save_models` (level -> model); empty when there are none."""
    out: dict[int, LevelModel] = {}
    if not directory.is_dir():
        return out
    for meta_path in sorted(directory.glob("level-*.json")):
        doc = json.loads(meta_path.read_text(encoding="utf-8"))
        with np.load(meta_path.with_suffix(".npz")) as z:
            arrays = {k: z[k] for k in z.files}
        fits = []
        for i, f in enumerate(doc["fits"]):
            rec = FitRecord(np.arange(len(f["train_ids"]), dtype=np.int64), arrays[f"{i}_reduced"], int(f["n_neighbors"]),
                            *(arrays.get(f"{i}_{name}") for name in _ARRAYS[1:]))
            fits.append(ModelFit(f["kind"], int(f["group"]), list(f["train_ids"]), rec, [int(c) for c in f.get("columns", [])]))
        level = int(doc["level"])
        out[level] = LevelModel(level, fits, {k: (int(v[0]), int(v[1])) for k, v in doc["origins"].items()})
    return out
