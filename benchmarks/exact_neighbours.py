"""The exact neighbours of a global UMAP fit below 4,096 points: before and after, the same numbers.

Below 4,096 points UMAP computes every pairwise cosine distance and then sorts every row of that
matrix to find the neighbours (``umap.utils.fast_knn_indices``: a stable argsort per row). In a
cold 1x build that is ~1 s of the level-1 global fit, the one part of a build that nothing else
runs beside. arborag now computes the matrix eight pairs at a time (eight independent float64
sums, each in the order UMAP sums one pair) and selects each row's k nearest by a partition
instead of a full sort (``arborag.tasks.umap_runtime``: ``cosine_matrix``, ``knn_indices``).

This script times, on the leaves of a built corpus, in one process and interleaved (the VM's
speed drifts; ``--repeats`` rounds, medians reported):

* the distance matrix: the one-pair-at-a-time compiled loop arborag used before (its code is kept
  here as the baseline) vs ``cosine_matrix``, both on the cores' threads;
* the neighbour sort: UMAP's ``fast_knn_indices`` vs ``knn_indices``;
* the whole global UMAP fit (``arborag.tasks.clustering._reduce``, seeded, one-thread BLAS as a
  build runs it) with both old parts vs both new ones,

and checks that the matrices, the neighbour lists and the fitted coordinates are equal bit for bit.

    python benchmarks/cold_path.py --sizes 1            # builds /tmp/arborag-bench-cold/corpus-1x
    python benchmarks/exact_neighbours.py               # that corpus's leaves (2,449 at 1x)
    python benchmarks/exact_neighbours.py --corpus DIR  # any built corpus (< 4,096 leaves to matter)

Writes ``benchmarks/results/exact_neighbours.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, busy_processes, git_commit, machine_line, md_table, report_header, script_command, setup_env  # noqa: E402
from global_fit import leaf_vectors  # noqa: E402

_OLD_ROWS: Any = None


def old_cosine_matrix(x: Any, threads: int) -> Any:
    """The baseline: arborag's kernel before this change — one pair at a time, each a float64 sum
    over the dimensions in order (UMAP's ``cosine``), both halves of the matrix written per pair."""
    global _OLD_ROWS
    import numba
    import numpy as np

    if _OLD_ROWS is None:

        def rows(x: Any, norms: Any, out: Any, first: int, step: int) -> None:  # pragma: no cover - compiled
            n = x.shape[0]
            for i in range(first, n, step):
                for j in range(i, n):
                    result = 0.0
                    for k in range(x.shape[1]):
                        result += x[i, k] * x[j, k]
                    norm_x = norms[i]
                    norm_y = norms[j]
                    if norm_x == 0.0 and norm_y == 0.0:
                        d = 0.0
                    elif norm_x == 0.0 or norm_y == 0.0:
                        d = 1.0
                    else:
                        d = 1.0 - (result / np.sqrt(norm_x * norm_y))
                    v = np.float32(d)
                    if j == i:
                        out[i, i] = v
                    else:
                        out[i, j] = v + np.float32(0.0)
                        out[j, i] = np.float32(0.0) + v

        _OLD_ROWS = numba.njit(nogil=True)(rows)
    from arborag.tasks.umap_runtime import _cosine_matrix_fn

    norms = _cosine_matrix_fn()[0](x)
    out = np.zeros((len(x), len(x)), dtype=np.float32)
    pool = [threading.Thread(target=_OLD_ROWS, args=(x, norms, out, t, threads)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return out


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=Path("/tmp/arborag-bench-cold/corpus-1x"), help="a built corpus (its newest snapshot's leaves)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds (medians reported)")
    ap.add_argument("--out", type=Path, default=RESULTS / "exact_neighbours.md")
    args = ap.parse_args()
    setup_env()
    import numpy as np
    from threadpoolctl import threadpool_limits

    from arborag.config import ClusterConfig
    from arborag.tasks import clustering, umap_runtime
    from arborag.tasks.umap_runtime import cosine_matrix, import_umap, knn_indices, usable_cores

    started = time.perf_counter()
    machine_start = machine_line()
    x, snap = leaf_vectors(args.corpus)
    if len(x) >= umap_runtime.UMAP_EXACT_BELOW:
        raise SystemExit(f"{len(x)} leaves: from {umap_runtime.UMAP_EXACT_BELOW} on UMAP gets arborag's exact kNN graph (benchmarks/global_fit.py)")
    umap = import_umap()
    umaps_knn = umap_runtime._UMAP_KNN
    cfg = ClusterConfig()
    n = len(x)
    k = max(2, min(int((n - 1) ** 0.5), cfg.max_global_neighbors, n - 1))
    threads = usable_cores()
    print(f"{n} leaves of {args.corpus} ({snap}), k {k}, {threads} threads", flush=True)

    old_cosine_matrix(x[:64], threads)  # compile the baseline (not timed)
    knn_indices(cosine_matrix(x[:64]), 5)

    def fit(new: bool) -> Any:
        umap.umap_.fast_knn_indices = knn_indices if new else umaps_knn
        before = umap_runtime.cosine_matrix
        if not new:
            umap_runtime.cosine_matrix = lambda m, threads=None: old_cosine_matrix(m, threads or usable_cores())
        try:
            with threadpool_limits(1):
                return clustering._reduce(x, cfg.dims, k, cfg.seed, None)
        finally:
            umap.umap_.fast_knn_indices = knn_indices
            umap_runtime.cosine_matrix = before

    times: dict[str, list[float]] = {key: [] for key in ("matrix_old", "matrix_new", "knn_old", "knn_new", "fit_old", "fit_new")}
    same = {"matrix": True, "knn": True, "fit": True}
    for r in range(args.repeats):
        old_m, t = timed(old_cosine_matrix, x, threads)
        times["matrix_old"].append(t)
        new_m, t = timed(cosine_matrix, x)
        times["matrix_new"].append(t)
        same["matrix"] &= bool(np.array_equal(old_m.view(np.uint32), new_m.view(np.uint32)))
        old_k, t = timed(umaps_knn, new_m, k)
        times["knn_old"].append(t)
        new_k, t = timed(knn_indices, new_m, k)
        times["knn_new"].append(t)
        same["knn"] &= bool(np.array_equal(old_k, new_k))
        old_f, t = timed(fit, False)
        times["fit_old"].append(t)
        new_f, t = timed(fit, True)
        times["fit_new"].append(t)
        same["fit"] &= bool(np.array_equal(old_f, new_f))
        print(f"round {r + 1}: " + ", ".join(f"{key} {v[-1]:.3f}" for key, v in times.items()), flush=True)
    med = {key: statistics.median(v) for key, v in times.items()}
    result = {
        "command": script_command(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "machine_start": machine_start,
        "machine_end": machine_line(),
        "busy_at_end": busy_processes(),
        "corpus": str(args.corpus), "snapshot": snap, "leaves": n, "k": k, "threads": threads,
        "seconds": times, "medians": med, "identical": same,
        "wall_s": time.perf_counter() - started,
    }

    def row(label: str, key: str) -> list[str]:
        return [label, f"{med[key + '_old']:.3f}", f"{med[key + '_new']:.3f}", f"{med[key + '_old'] / med[key + '_new']:.2f}×",
                "yes" if same[key] else "**NO**"]

    md = [
        *report_header("The exact neighbours of a global UMAP fit: before and after (bit for bit)", command=result["command"],
                       date=result["date"], commit=result["commit"], machine_start=machine_start,
                       machine_end=result["machine_end"], busy_end=result["busy_at_end"], wall_s=result["wall_s"]),
        "",
        f"The leaves of `{args.corpus}` ({snap}): **{n:,}** vectors of {x.shape[1]} dims, k = {k} neighbours (the sqrt rule), "
        f"{threads} threads for the matrix and the neighbour selection. One process, {args.repeats} interleaved rounds; medians in seconds.",
        "",
        md_table(["part", "before", "after", "ratio", "identical"], [
            row("cosine distance matrix (before: one pair at a time)", "matrix"),
            row("each row's k nearest (before: UMAP's full stable sort of every row)", "knn"),
            row("whole global UMAP fit (distances, neighbours, graph, spectral init, layout)", "fit"),
        ]),
        "",
        "Every round: " + "; ".join(f"{key} " + " / ".join(f"{v:.3f}" for v in vals) for key, vals in times.items()) + ".",
        "",
    ]
    args.out.write_text("\n".join(md))
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    print("\n".join(md))


if __name__ == "__main__":
    main()
