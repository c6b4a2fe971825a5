"""The GMM fits of a real clustering level: scikit-learn's GaussianMixture against arborag's (issue 26).

``tasks/mixture_runtime.py`` runs scikit-learn's full-covariance GaussianMixture steps without
the per-call machinery around them, computing the same floats. This measures what that saves,
and checks "the same floats" on every fit, on the fits a tree's clustering really makes:

1. real chunks from ../shared/data (as ``benchmarks/bic_search.py`` takes them: HotpotQA
   paragraphs, NarrativeQA passages, Cinderella; <= 100 tokens), embedded with the default
   embedder (cached under ``--cache``);
2. one clustering level of them (``cluster_level``, default config, one thread, no helper
   process), recording every ``GaussianMixture(k).fit`` its BIC searches ask for (the global pass
   and every local pass; the warm-started continuations of loose fits are not in the list);
3. those fits run ``--rounds`` times with each class, the two interleaved and their order
   alternated, under one BLAS/OpenMP thread as the clustering runs them; the median round counts;
   every fitted attribute, ``predict_proba`` and ``bic`` compared between the classes;
4. the level itself, clustered with each class (the same interleaving): its clusters compared,
   its GMM seconds and wall seconds.

Writes ``benchmarks/results/gmm_fits.md`` (and ``.json``).

Run::

    python benchmarks/gmm_fits.py                # 5 rounds
    python benchmarks/gmm_fits.py --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, fmt_ratio, fmt_s, machine_line, md_table, run_header, setup_env  # noqa: E402

setup_env()
os.environ["ARBORAG_CLUSTER_THREADS"] = "1"  # local passes one after another: no thread takes turns with the timed fits


def _fit(cls: type, x: np.ndarray, k: int, seed: int, tol: float) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return cls(n_components=k, random_state=seed, tol=tol).fit(x)
        except (ValueError, np.linalg.LinAlgError):
            return None


def _same(a: Any, b: Any, x: np.ndarray) -> bool:
    if a is None or b is None:
        return a is None and b is None
    fields = ("weights_", "means_", "covariances_", "precisions_cholesky_", "precisions_", "lower_bound_", "n_iter_",
              "converged_", "lower_bounds_")
    return (all(np.array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f))) for f in fields)
            and np.array_equal(a.predict_proba(x), b.predict_proba(x)) and a.bic(x) == b.bic(x))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of each class (the median counts)")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/arborag_bench"), help="embedding cache of the real chunks")
    ap.add_argument("--out", type=Path, default=RESULTS / "gmm_fits.md")
    args = ap.parse_args()
    started = time.perf_counter()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine_start = machine_line()

    from bic_search import real_vectors
    from sklearn.mixture import GaussianMixture as Sklearn
    from threadpoolctl import threadpool_limits

    from arborag.config import ClusterConfig
    from arborag.tasks import clustering, mixture, mixture_runtime
    from arborag.tokenizer import get_tokenizer

    ours = mixture_runtime.GaussianMixture
    assert mixture_runtime.verified(), "arborag's GaussianMixture does not match this scikit-learn (see the log)"
    keys, vectors = real_vectors(args.cache)
    from embed_dtype import load_real_chunks

    texts = [t for _, t in load_real_chunks()]
    n_tokens = np.asarray(get_tokenizer().count_many(texts), dtype=np.int64)
    cfg = ClusterConfig()
    clustering.warm_up()

    # 1. the fits one level of these chunks asks for
    fits: list[tuple[np.ndarray, int, int, float]] = []
    plain = mixture._fit_gmm

    def record(x: np.ndarray, k: int, seed: int, stats: Any, *, tol: float = 1e-3) -> Any:
        fits.append((np.array(x), k, seed, tol))
        return plain(x, k, seed, stats, tol=tol)

    mixture._fit_gmm = record  # type: ignore[assignment]
    try:
        clustering.cluster_level(vectors, n_tokens, cfg)
    finally:
        mixture._fit_gmm = plain  # type: ignore[assignment]
    sizes = [len(x) for x, *_ in fits]

    # 2. the fits, each class, interleaved
    seconds: dict[str, list[float]] = {"scikit-learn": [], "arborag": []}
    cpu: dict[str, list[float]] = {"scikit-learn": [], "arborag": []}
    mismatches = failed = 0
    with threadpool_limits(1):
        for r in range(args.rounds):
            order = [("scikit-learn", Sklearn), ("arborag", ours)]
            if r % 2:
                order.reverse()
            models: dict[str, list[Any]] = {}
            for name, cls in order:
                c0, t0 = time.process_time(), time.perf_counter()
                models[name] = [_fit(cls, *f) for f in fits]
                seconds[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
            if r == 0:
                for f, a, b in zip(fits, models["arborag"], models["scikit-learn"]):
                    mismatches += not _same(a, b, f[0])
                    failed += b is None
            print(f"round {r + 1}: " + ", ".join(f"{n} {seconds[n][-1]:.3f} s" for n in seconds), flush=True)

    # 3. the level, each class
    level: dict[str, list[tuple[float, float]]] = {"scikit-learn": [], "arborag": []}
    clusters: dict[str, Any] = {}
    for r in range(args.rounds):
        order = [("scikit-learn", Sklearn), ("arborag", ours)]
        if r % 2:
            order.reverse()
        for name, cls in order:
            mixture_runtime._VERIFIED[:] = [cls is ours]  # the class the clustering fits with
            st = clustering.ClusterStats()
            t0 = time.perf_counter()
            got = clustering.cluster_level(vectors, n_tokens, cfg, stats=st)
            level[name].append((time.perf_counter() - t0, st.gmm_s))
            clusters.setdefault(name, got)
    mixture_runtime._VERIFIED[:] = []
    same_clusters = clusters["arborag"] == clusters["scikit-learn"]

    med = {n: statistics.median(v) for n, v in seconds.items()}
    med_cpu = {n: statistics.median(v) for n, v in cpu.items()}
    lvl = {n: (statistics.median(w for w, _ in v), statistics.median(g for _, g in v)) for n, v in level.items()}
    ratio = med["scikit-learn"] / med["arborag"]
    lines = run_header("The GMM fits of a real clustering level: scikit-learn's GaussianMixture vs arborag's",
                       date=date, machine_start=machine_start, started=started)
    lines += [
        "",
        f"{len(vectors):,} real chunks (HotpotQA, NarrativeQA, Cinderella; default embedder), one clustering level "
        f"(`cluster_level`, default config, one thread): **{len(fits)} GMM fits** on {len({x.tobytes() for x, *_ in fits})} "
        f"point sets of {min(sizes)}–{max(sizes)} points (median {int(np.median(sizes))}), k {min(f[1] for f in fits)}–"
        f"{max(f[1] for f in fits)}. Every fit run with each class, {args.rounds} interleaved rounds (order alternated), "
        "one BLAS/OpenMP thread; medians.",
        "",
        md_table(["", "scikit-learn", "arborag (tasks/mixture_runtime.py)", "ratio"], [
            ["all the fits, wall s", fmt_s(med["scikit-learn"]), fmt_s(med["arborag"]), f"**{fmt_ratio(ratio)}** faster"],
            ["all the fits, CPU s", fmt_s(med_cpu["scikit-learn"]), fmt_s(med_cpu["arborag"]),
             fmt_ratio(med_cpu["scikit-learn"] / med_cpu["arborag"])],
            ["per fit, ms", f"{1000 * med['scikit-learn'] / len(fits):.2f}", f"{1000 * med['arborag'] / len(fits):.2f}", ""],
            ["the level: cluster_level wall s", fmt_s(lvl["scikit-learn"][0]), fmt_s(lvl["arborag"][0]),
             fmt_ratio(lvl["scikit-learn"][0] / lvl["arborag"][0])],
            ["the level: its GMM seconds", fmt_s(lvl["scikit-learn"][1]), fmt_s(lvl["arborag"][1]),
             fmt_ratio(lvl["scikit-learn"][1] / lvl["arborag"][1])],
        ]),
        "",
        f"Same floats: **{len(fits) - mismatches} of {len(fits)} fits** equal in every fitted attribute, `predict_proba` "
        f"and `bic` ({failed} failed in both alike); the level's clusters with each class "
        f"**{'equal' if same_clusters else 'DIFFERENT'}**.",
        "",
        "Rounds (wall s): " + "; ".join(f"{n} " + ", ".join(f"{s:.3f}" for s in v) for n, v in seconds.items()) + ".",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps({
        "date": date, "fits": len(fits), "sizes": sizes, "rounds": args.rounds, "seconds": seconds, "cpu": cpu,
        "level": level, "mismatches": mismatches, "failed_both": failed, "same_clusters": same_clusters,
        "ratio": ratio, "keys": len(keys),
    }, indent=1), encoding="utf-8")
    print("\n".join(lines))
    if mismatches or not same_clusters:
        sys.exit(1)


if __name__ == "__main__":
    main()
