"""UMAP's SGD layout in vertex blocks: the same objective and schedule on several cores, deterministic.

A UMAP fit is mostly its SGD layout (measured on the 1x cold-path leaves, 2,445 points: 7.4-8.7 s
of a ~9 s fit), and with a seed UMAP lays out on one thread: its parallel layout lets threads
update shared coordinates as they race, so the result would change from run to run. The level's
global fit is on the build's critical path (``benchmarks/cold_path.py``: the method's serial
chain), so that one thread is most of what stands between a build and its embedding floor.

``cluster.umap_layout_blocks: B`` (B >= 2) replaces the layout of every UMAP fit of at least
:data:`BLOCKS_MIN` points (below) by this one:

- the vertices are cut into B contiguous ranges of about equal edge counts (UMAP's edges are
  sorted by their head vertex, so each block owns a contiguous range of edges: those whose head
  it owns);
- each epoch is cut into :data:`SUBSTEPS` sub-steps; in a sub-step every block runs its share of
  its edges exactly as UMAP's epoch does (the attractive move of head and tail, the negative
  samples, the per-edge sampling schedule, the learning rate decaying per epoch, the random
  state of each head vertex — UMAP's own per-vertex generators), except that it reads the
  vertices of *other* blocks from a snapshot taken at the start of the sub-step, and its moves of
  other blocks' vertices (an edge's tail) go to its own buffer;
- after each sub-step the buffers are added in block order and the snapshot is renewed.

The per-edge update (attraction, negative samples, clipping, the sampling schedule) is the one of
``umap.layouts._optimize_layout_euclidean_single_epoch`` (umap-learn, BSD-3-Clause), written out
here with the two changes above and calling UMAP's own compiled ``rdist``, ``clip`` and
``tau_rand_int``.

No block reads anything another block writes during a sub-step, so the blocks may run on as many
threads as there are cores (the kernel runs without the GIL) and the layout is the same, bit for
bit, on one thread or B — it depends on B, not on the machine's cores. What differs from UMAP's
one-thread SGD: a vertex sees another block's vertices up to 1/SUBSTEPS epoch late — the kind of
staleness UMAP's own parallel layout has, without its races. B = 1 is UMAP's own layout,
unchanged (and the default's trees are those of before this module).

Which fits: those of at least :data:`BLOCKS_MIN` points — a level's global fit on a corpus of a
few thousand leaves, the one on the critical path — run their blocks on min(B, the cores this
process may use) threads (:func:`block_layout`'s caller says how many). Smaller fits (the local
fits, which already run side by side, and the upper levels) keep UMAP's own layout: blocks would
give them nothing to run in parallel.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["BLOCKS_MIN", "SUBSTEPS", "block_layout", "current_blocks", "layout_thread_seconds", "optimize_layout_blocks"]

#: Sub-steps per epoch: how often the blocks exchange coordinates (1/SUBSTEPS epoch of staleness).
SUBSTEPS = 8
#: Fits of fewer points keep UMAP's own layout (module docs).
BLOCKS_MIN = 1024

_STATE = threading.local()
_KERNELS: Any = None
_KERNEL_LOCK = threading.Lock()
# set by _kernels(): the compiled functions the kernels call, as module globals (its docs say why)
rdist: Any = None
clip: Any = None
tau_rand_int: Any = None
substep: Any = None
merge: Any = None


@contextlib.contextmanager
def block_layout(blocks: int, threads: int = 1) -> Iterator[None]:
    """UMAP fits on this thread inside the block lay out in ``blocks`` vertex blocks (1: UMAP's
    own) on up to ``threads`` threads (the coordinates do not depend on it)."""
    before = (getattr(_STATE, "blocks", 1), getattr(_STATE, "threads", 1))
    _STATE.blocks, _STATE.threads = int(blocks), max(1, int(threads))
    try:
        yield
    finally:
        _STATE.blocks, _STATE.threads = before


def current_blocks() -> int:
    """The block count :func:`block_layout` set on this thread (1 outside it)."""
    return int(getattr(_STATE, "blocks", 1))


def layout_thread_seconds() -> float:
    """CPU seconds this thread has spent in UMAP's own one-thread layout (the block-less path of
    :func:`optimize_layout_blocks`) so far: a caller takes the difference around a fit. The
    global fit's is the part of a level nothing of the method can run beside
    (``benchmarks/cold_path.py``: the method's critical path); a block layout on several threads
    is not counted."""
    return float(getattr(_STATE, "layout_cpu", 0.0))


def _kernels() -> Any:
    """The compiled sub-step of one block and the merge (built on first use, cached on disk).

    Every compiled function a kernel calls (UMAP's ``rdist``, ``clip``, ``tau_rand_int``, and the
    sub-step and merge that ``_all_epochs`` calls) is a module global here, not a closure cell:
    numba's on-disk cache keys a closure by its cells' pickles, and a dispatcher's pickle carries a
    per-process id, so a kernel that held one in a cell was compiled again in every process (~0.75 s;
    tests/tasks/test_umap_layout.py counts the cache's hits in a second process)."""
    global _KERNELS, rdist, clip, tau_rand_int, substep, merge
    if _KERNELS is not None:
        return _KERNELS
    with _KERNEL_LOCK:
        if _KERNELS is None:
            import warnings

            import numba
            from umap.layouts import clip, rdist
            from umap.utils import tau_rand_int

            def _substep(emb, snap, delta, head, tail, n_vertices, eps, a, b, rng, gamma, move_other, alpha,
                         epns, eonns, eons, n, lo, hi, vs, ve):  # pragma: no cover - compiled
                dim = emb.shape[1]
                for i in range(lo, hi):
                    if eons[i] <= n:
                        j = head[i]
                        k = tail[i]
                        current = emb[j]
                        own = vs <= k and k < ve
                        other = emb[k] if own else snap[k]
                        dist_squared = rdist(current, other)
                        if dist_squared > 0.0:
                            grad_coeff = -2.0 * a * b * pow(dist_squared, b - 1.0)
                            grad_coeff /= a * pow(dist_squared, b) + 1.0
                        else:
                            grad_coeff = 0.0
                        for d in range(dim):
                            grad_d = clip(grad_coeff * (current[d] - other[d]))
                            current[d] += grad_d * alpha
                            if move_other:
                                if own:
                                    other[d] += -grad_d * alpha
                                else:
                                    delta[k, d] += -grad_d * alpha
                        eons[i] += eps[i]
                        n_neg = int((n - eonns[i]) / epns[i])
                        for _p in range(n_neg):
                            k2 = tau_rand_int(rng[j]) % n_vertices
                            other2 = emb[k2] if (vs <= k2 and k2 < ve) else snap[k2]
                            dist_squared = rdist(current, other2)
                            if dist_squared > 0.0:
                                grad_coeff = 2.0 * gamma * b
                                grad_coeff /= (0.001 + dist_squared) * (a * pow(dist_squared, b) + 1)
                            elif j == k2:
                                continue
                            else:
                                grad_coeff = 0.0
                            for d in range(dim):
                                if grad_coeff > 0.0:
                                    grad_d = clip(grad_coeff * (current[d] - other2[d]))
                                else:
                                    grad_d = 0
                                current[d] += grad_d * alpha
                        eonns[i] += n_neg * epns[i]

            def _merge(emb, snap, delta):  # pragma: no cover - compiled
                nb, nv, dim = delta.shape
                for blk in range(nb):
                    for v in range(nv):
                        for d in range(dim):
                            emb[v, d] += delta[blk, v, d]
                            delta[blk, v, d] = 0.0
                for v in range(nv):
                    for d in range(dim):
                        snap[v, d] = emb[v, d]

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # fastmath as UMAP's own layout kernel; nogil so the blocks run on threads
                substep = numba.njit(fastmath=True, nogil=True, cache=True)(_substep)
                merge = numba.njit(fastmath=True, nogil=True, cache=True)(_merge)

                def _all_epochs(emb, snap, delta, head, tail, n_vertices, eps, a, b, rng, gamma, move_other, alphas,
                                epns, eonns, eons, bounds, v_lo, v_hi):  # pragma: no cover - compiled
                    # one thread: every epoch's sub-steps, block after block, in one call (the threads'
                    # order of work, without a Python call per block and sub-step)
                    for n in range(alphas.shape[0]):
                        for s in range(bounds.shape[1] - 1):
                            for blk in range(bounds.shape[0]):
                                substep(emb, snap, delta[blk], head, tail, n_vertices, eps, a, b, rng, gamma, move_other,
                                        alphas[n], epns, eonns, eons, n, bounds[blk, s], bounds[blk, s + 1], v_lo[blk], v_hi[blk])
                            merge(emb, snap, delta)

                _KERNELS = (substep, merge, numba.njit(fastmath=True, nogil=True, cache=True)(_all_epochs))
    return _KERNELS


def _blocks_of(head: np.ndarray, n_vertices: int, blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first vertex, end vertex, sub-step edge bounds) of each block: contiguous vertex ranges
    holding about equal numbers of edges (``head`` sorted); block ``b``'s sub-step ``s`` runs the
    edges ``bounds[b, s]:bounds[b, s + 1]``."""
    cum = np.cumsum(np.bincount(head, minlength=n_vertices))
    cuts = [0]
    for q in range(1, blocks):
        cut = int(np.searchsorted(cum, len(head) * q / blocks, side="left")) + 1
        cuts.append(min(max(cut, cuts[-1]), n_vertices))
    cuts.append(n_vertices)
    v_lo = np.asarray(cuts[:-1], dtype=np.int64)
    v_hi = np.asarray(cuts[1:], dtype=np.int64)
    e_lo = np.searchsorted(head, v_lo, side="left").astype(np.int64)
    e_hi = np.searchsorted(head, v_hi, side="left").astype(np.int64)
    steps = np.arange(SUBSTEPS + 1, dtype=np.int64)
    bounds = e_lo[:, None] + (e_hi - e_lo)[:, None] * steps[None, :] // SUBSTEPS
    return v_lo, v_hi, np.ascontiguousarray(bounds)


def optimize_layout_blocks(
    head_embedding: np.ndarray, tail_embedding: np.ndarray, head: np.ndarray, tail: np.ndarray, n_epochs: Any,
    n_vertices: int, epochs_per_sample: np.ndarray, a: float, b: float, rng_state: np.ndarray, gamma: float = 1.0,
    initial_alpha: float = 1.0, negative_sample_rate: float = 5.0, parallel: bool = False, verbose: bool = False,
    densmap: bool = False, densmap_kwds: Any = None, tqdm_kwds: Any = None, move_other: bool = False,
    *, threads: int | None = None,
) -> Any:
    """``umap.layouts.optimize_layout_euclidean`` (same arguments, same result type) laid out in
    :func:`current_blocks` vertex blocks (module docs). UMAP's own layout for
    one block, fewer than :data:`BLOCKS_MIN` points, densMAP, a list of epochs or a transform
    (head and tail embeddings differ). ``threads``: default the :func:`block_layout` block's,
    at most ``blocks``."""
    from umap.layouts import optimize_layout_euclidean

    blocks = current_blocks()
    n_vertices = int(n_vertices)
    if (blocks <= 1 or n_vertices < max(BLOCKS_MIN, 2 * blocks) or densmap or isinstance(n_epochs, list)
            or head_embedding is not tail_embedding or len(head) == 0):
        t0 = time.thread_time()
        try:
            return optimize_layout_euclidean(
                head_embedding, tail_embedding, head, tail, n_epochs, n_vertices, epochs_per_sample, a, b, rng_state,
                gamma, initial_alpha, negative_sample_rate, parallel=parallel, verbose=verbose, densmap=densmap,
                densmap_kwds=densmap_kwds, tqdm_kwds=tqdm_kwds, move_other=move_other)
        finally:
            if not parallel:
                _STATE.layout_cpu = layout_thread_seconds() + (time.thread_time() - t0)
    substep, merge, all_epochs = _kernels()
    emb = head_embedding
    if np.any(np.diff(head) < 0):  # UMAP's COO graph is sorted by row; kept stable if one is not
        order = np.argsort(head, kind="stable")
        head, tail, epochs_per_sample = head[order], tail[order], epochs_per_sample[order]
    head = np.ascontiguousarray(head)
    tail = np.ascontiguousarray(tail)
    eps = np.ascontiguousarray(epochs_per_sample, dtype=np.float64)
    epns = eps / negative_sample_rate
    eonns = epns.copy()
    eons = eps.copy()
    # UMAP's per-vertex random states (umap.layouts.optimize_layout_euclidean)
    rng = np.full((emb.shape[0], len(rng_state)), rng_state, dtype=np.int64) + emb[:, 0].astype(np.float64).view(np.int64).reshape(-1, 1)
    v_lo, v_hi, bounds = _blocks_of(head, n_vertices, blocks)
    snap = emb.copy()
    delta = np.zeros((blocks, n_vertices, emb.shape[1]), dtype=emb.dtype)
    n_epochs = int(n_epochs)
    workers = max(1, min(blocks, threads if threads is not None else int(getattr(_STATE, "threads", 1))))
    # UMAP's learning rate: initial_alpha in epoch 0, then initial_alpha * (1 - (n - 1) / n_epochs)
    alphas = np.asarray([initial_alpha * (1.0 - float(n - 1) / float(n_epochs)) if n else initial_alpha for n in range(n_epochs)])

    if workers == 1:
        all_epochs(emb, snap, delta, head, tail, n_vertices, eps, a, b, rng, gamma, move_other, alphas,
                   epns, eonns, eons, bounds, v_lo, v_hi)
        return emb
    # one thread per group of blocks; a barrier after every sub-step, whose action merges
    groups = [list(range(w, blocks, workers)) for w in range(workers)]
    barrier = threading.Barrier(workers, action=lambda: merge(emb, snap, delta))
    errors: list[BaseException] = []

    def worker(mine: list[int]) -> None:
        try:
            for n in range(n_epochs):
                for s in range(SUBSTEPS):
                    for blk in mine:
                        substep(emb, snap, delta[blk], head, tail, n_vertices, eps, a, b, rng, gamma, move_other, float(alphas[n]),
                                epns, eonns, eons, n, int(bounds[blk, s]), int(bounds[blk, s + 1]), int(v_lo[blk]), int(v_hi[blk]))
                    barrier.wait()
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            errors.append(exc)
            barrier.abort()

    pool = [threading.Thread(target=worker, args=(g,), name="arborag-layout") for g in groups]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return emb
