"""Coarse-to-fine vs exhaustive BIC search for the GMM k (tasks/clustering.select_k).

Usage: python benchmarks/bic_search.py [--seeds 224,7,42] [--max-clusters 50] [--cache DIR]

Problems are the ones cluster_level really solves on real data: real chunks from ../shared/data
(HotpotQA corpus paragraphs, NarrativeQA passages, Cinderella; <= 100 tokens each) embedded with
the default embedder (cached under --cache), reduced by the same seeded UMAP as cluster_level:
- global passes: all chunks, HotpotQA only, NarrativeQA only, random samples of 300 and 1,000;
- local passes: inside every global cluster of those (UMAP n_neighbors 10), as in SPEC §5.4.
Each problem is solved by both methods (same seeds). Because both use identical fits per k,
"same k" means the very same model. Writes benchmarks/results/bic_search.md and the raw BIC
curves to --cache/bic_curves.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def real_vectors(cache_dir: Path) -> tuple[list[str], np.ndarray]:
    from embed_dtype import load_real_chunks

    from arborag.config import EmbedConfig
    from arborag.tasks.embeddings import Embedder, EmbeddingCache, embed_cached

    chunks = load_real_chunks()
    vecs, _ = embed_cached([t for _, t in chunks], Embedder(EmbedConfig()), EmbeddingCache(cache_dir / "embeddings"))
    return [k for k, _ in chunks], vecs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="224,7,42")
    ap.add_argument("--max-clusters", type=int, default=50)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/arborag_bench"))
    ap.add_argument("--subsets", default="all,hotpotqa,narrativeqa,sample300,sample1000")
    ap.add_argument("--curves", action="store_true", help="also record full loose-fit BIC curves (tuning)")
    ap.add_argument("--report-only", action="store_true", help="re-render the report from --cache/bic_curves.json")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "bic_search.md")
    args = ap.parse_args()

    from threadpoolctl import threadpool_limits

    if args.report_only:
        from arborag.tasks.clustering import coarse_grid as _grid

        report(json.loads((args.cache / "bic_curves.json").read_text()), args, _grid)
        return

    from arborag.config import ClusterConfig
    from arborag.tasks.clustering import ClusterStats, _distinct, _reduce, coarse_grid, select_k, soft_membership, warm_up

    keys, vecs = real_vectors(args.cache)
    print(f"{len(keys)} chunks embedded", flush=True)
    rng = np.random.default_rng(0)
    subsets = {
        "all": np.arange(len(keys)),
        "hotpotqa": np.array([i for i, k in enumerate(keys) if k.startswith("hotpot:")]),
        "narrativeqa": np.array([i for i, k in enumerate(keys) if k.startswith("narrativeqa:")]),
        "sample300": np.sort(rng.choice(len(keys), 300, replace=False)),
        "sample1000": np.sort(rng.choice(len(keys), 1000, replace=False)),
    }
    subsets = {k: v for k, v in subsets.items() if k in args.subsets.split(",")}
    warm_up()
    records = []
    import arborag.tasks.mixture as mixture  # the GMM/BIC search lives here; select_k calls mixture._fit_gmm

    original_fit = mixture._fit_gmm
    fit_times: dict[int, float] = {}

    def timed_fit(x, k, seed, stats, **kw):  # records the time of every fit by k
        t0 = time.perf_counter()
        out = original_fit(x, k, seed, stats, **kw)
        fit_times[k] = time.perf_counter() - t0
        return out

    mixture._fit_gmm = timed_fit
    solve.fit_times = fit_times  # type: ignore[attr-defined]
    with threadpool_limits(1):
        for seed in [int(s) for s in args.seeds.split(",")]:
            cfg = ClusterConfig(seed=seed, max_clusters=args.max_clusters)
            for name, idx in subsets.items():
                x, _ = _distinct(vecs[idx])
                n = len(x)
                t0 = time.perf_counter()
                red = _reduce(x, cfg.dims, int(math.sqrt(n - 1)), seed, None)
                umap_s = time.perf_counter() - t0
                rec_global = solve(("global", name, seed, n), red, cfg, select_k, ClusterStats, args.curves)
                rec_global["umap_s"] = umap_s
                records.append(rec_global)
                print(summary_line(rec_global), flush=True)
                # local passes inside the global clusters of the exhaustive choice
                gmm = rec_global.pop("_gmm")
                if gmm is None:
                    continue
                for gi, gc in enumerate(soft_membership(gmm.predict_proba(red), cfg.threshold)):
                    rows = np.array([r for r, _ in gc])
                    if len(rows) <= cfg.dims + 1:
                        continue
                    t0 = time.perf_counter()
                    red_l = _reduce(x[rows], cfg.dims, cfg.local_neighbors, seed, None)
                    rec = solve(("local", f"{name}/g{gi}", seed, len(rows)), red_l, cfg, select_k, ClusterStats, args.curves)
                    rec["umap_s"] = time.perf_counter() - t0
                    rec.pop("_gmm")
                    records.append(rec)
                    print(summary_line(rec), flush=True)
    args.cache.mkdir(parents=True, exist_ok=True)
    (args.cache / "bic_curves.json").write_text(json.dumps(records, indent=1))
    report(records, args, coarse_grid)


def solve(key, red, cfg, select_k, ClusterStats, curves: bool = False) -> dict:
    kind, name, seed, n = key
    max_k = min(cfg.max_clusters, n - 1)
    st_ex = ClusterStats()
    solve.fit_times.clear()  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    k_ex, gmm_ex, bics_ex = select_k(red, max_k, seed, "exhaustive", stats=st_ex)
    ex_s = time.perf_counter() - t0
    fit_s = dict(solve.fit_times)  # type: ignore[attr-defined]
    loose_bics: dict[int, float] = {}
    loose_s: dict[int, float] = {}
    if curves:  # the loose-fit curve over every k, for tuning the search offline
        from arborag.tasks import mixture

        for k in range(1, max_k + 1):
            t0 = time.perf_counter()
            g = mixture._fit_gmm(red, k, seed, None, tol=mixture.LOOSE_TOL)
            loose_s[k] = time.perf_counter() - t0
            loose_bics[k] = float(g.bic(red)) if g is not None else math.inf
    st_cf = ClusterStats()
    t0 = time.perf_counter()
    k_cf, _, bics_cf = select_k(red, max_k, seed, "coarse_to_fine", stats=st_cf)
    cf_s = time.perf_counter() - t0
    finite = [b for b in bics_ex.values() if math.isfinite(b)]
    spread = (max(finite) - min(finite)) if finite else 0.0
    return {
        "kind": kind,
        "name": name,
        "seed": seed,
        "n": n,
        "max_k": max_k,
        "k_exhaustive": k_ex,
        "k_coarse": k_cf,
        "exhaustive_s": ex_s,
        "coarse_s": cf_s,
        "fits_exhaustive": st_ex.gmm_fits,
        "fits_coarse": st_cf.gmm_fits,
        # how much worse (in BIC) the coarse choice is, relative to the BIC range of the curve
        "bic_regret": (bics_ex[k_cf] - bics_ex[k_ex]) / spread if spread else 0.0,
        "bics": {str(k): v for k, v in sorted(bics_ex.items())},
        "fit_s": {str(k): v for k, v in sorted(fit_s.items())},
        "loose_bics": {str(k): v for k, v in sorted(loose_bics.items())},
        "loose_s": {str(k): v for k, v in sorted(loose_s.items())},
        "_gmm": gmm_ex,
    }


def summary_line(r: dict) -> str:
    return (
        f"{r['kind']:6s} {r['name']:22s} seed={r['seed']:<4d} n={r['n']:<5d} K={r['max_k']:<3d} "
        f"k_ex={r['k_exhaustive']:<3d} k_cf={r['k_coarse']:<3d} ex={r['exhaustive_s']:.2f}s "
        f"cf={r['coarse_s']:.2f}s fits {r['fits_exhaustive']}/{r['fits_coarse']}"
    )


def report(records: list[dict], args, coarse_grid) -> None:
    from arborag.tasks import mixture

    lines = [
        "# BIC search: coarse-to-fine vs exhaustive",
        "",
        f"Command: `python benchmarks/bic_search.py --seeds {args.seeds} --max-clusters {args.max_clusters}`",
        "",
        "Real chunks from `../shared/data` (HotpotQA corpus paragraphs, NarrativeQA passages, Cinderella; "
        "<= 100 tokens), embedded with all-MiniLM-L6-v2 (bf16), reduced by the seeded UMAP of "
        "`cluster_level` (global: 10 dims, n_neighbors = int(sqrt(n-1)); local: inside each global cluster, "
        "n_neighbors 10). Each problem is solved by both methods with the same seed; GMM fits are identical "
        "per k, so the same k means the same model. Timings under `threadpool_limits(1)` (BLAS and OpenMP) on a shared "
        f"2-core machine (load average at the end {os.getloadavg()[0]:.1f}), so absolute seconds are noisy; "
        "the fit counts are not.",
        "",
        f"coarse_to_fine: GMM fits (loose, tol {mixture.LOOSE_TOL}, from {mixture.LOOSE_MIN_N} points on; "
        f"exact below) over the coarse grid (K=50: {coarse_grid(50)}) climbing k until two grid "
        f"points are {mixture.STOP_MARGIN:g} one-component BIC penalties above the best, then over every k "
        "between the grid neighbours of the two best grid points; then exact fits (sklearn default tol 1e-3, "
        f"as in exhaustive) of the {mixture.N_EXACT} best candidates; the exact argmin wins.",
        "",
        "| pass | problems | same k | mean BIC regret when different | exhaustive s (sum) | coarse s (sum) | speedup | fits ex/cf |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in ("global", "local", "all"):
        rs = [r for r in records if r["kind"] == kind or kind == "all"]
        if not rs:
            continue
        same = sum(r["k_exhaustive"] == r["k_coarse"] for r in rs)
        diff = [r["bic_regret"] for r in rs if r["k_exhaustive"] != r["k_coarse"]]
        ex = sum(r["exhaustive_s"] for r in rs)
        cf = sum(r["coarse_s"] for r in rs)
        fe = sum(r["fits_exhaustive"] for r in rs)
        fc = sum(r["fits_coarse"] for r in rs)
        lines.append(
            f"| {kind} | {len(rs)} | {same}/{len(rs)} ({100 * same / len(rs):.0f}%) | "
            f"{(np.mean(diff) if diff else 0):.4f} | {ex:.1f} | {cf:.1f} | {ex / cf:.1f}x | {fe}/{fc} |"
        )
    lines += [
        "",
        "BIC regret = (BIC(k_coarse) - BIC(k_exhaustive)) / (max - min BIC over k); 0 when the same k.",
        "",
        "## Global passes",
        "",
        "| subset | seed | n | UMAP s | k exhaustive | k coarse | exhaustive s | coarse s | speedup |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        if r["kind"] == "global":
            lines.append(
                f"| {r['name']} | {r['seed']} | {r['n']} | {r['umap_s']:.1f} | {r['k_exhaustive']} | {r['k_coarse']} | "
                f"{r['exhaustive_s']:.1f} | {r['coarse_s']:.1f} | {r['exhaustive_s'] / r['coarse_s']:.1f}x |"
            )
    lines += ["", "## Local passes that picked a different k", ""]
    diffs = [r for r in records if r["kind"] == "local" and r["k_exhaustive"] != r["k_coarse"]]
    if not diffs:
        lines.append("None.")
    else:
        lines += ["| problem | seed | n | k exhaustive | k coarse | BIC regret |", "| --- | --- | --- | --- | --- | --- |"]
        for r in diffs:
            lines.append(
                f"| {r['name']} | {r['seed']} | {r['n']} | {r['k_exhaustive']} | {r['k_coarse']} | {r['bic_regret']:.4f} |"
            )
    lines += ["", TUNING]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


TUNING = """## How the coarse-to-fine parameters were chosen

`--curves` records, for every problem above, the exact BIC curve (k = 1..K), the loose (tol 1e-2) BIC
curve and the time of every fit. Variants were then replayed offline on those curves (same problems,
same seeds; speedup = sum of recorded exact-fit times / sum of the times of the fits a variant makes):

| variant | global same k | global speedup | local same k | local speedup |
| --- | --- | --- | --- | --- |
| exact fits, grid, refine around the 2 best grid points (no early stop) | 15/15 | 1.5x | 362/365 | 3.1x |
| + early stop at 2 penalties (exact fits everywhere) | 15/15 | 1.6x | 362/365 | 5.1x |
| loose fits everywhere + exact refit of the 4 best | 15/15 | 2.0x | 362/365 | 4.0x |
| loose + exact refit of the 3 best | 14/15 | 2.1x | 362/365 | 4.3x |
| loose + exact refit of the best only | 12/15 | 2.4x | 362/365 | 4.9x |
| loose, refine around the best grid point only | 14/15 | 2.3x | 341/365 | 4.3x |
| **chosen: loose from 500 points on (exact below), refit 4, stop at 2 penalties** | **15/15** | **2.0x** | **362/365** | **5.1x** |

Early-stop margins of 1, 2 and 3 one-component penalties gave the same choices (local speedup 5.6x,
5.1x, 4.7x; 2 is the middle). The 3 local misses come from the grid itself (a minimum between two
grid points that both look worse than a third), not from the early stop; their BIC regret is tiny.
Loose fits rank the candidates almost like exact ones: on all 2,229 chunks the 5 best k by loose BIC
were the 5 best by exact BIC. Why the global speedup stays near 2x: on these corpora the global
minimum sits at k = 21-43 of K = 50, and fits cost roughly k x iterations, so the expensive top of the
range must be searched anyway; the local passes (n = 12-110, minima at k = 3-14) are where the early
stop pays. In a whole `build_tree` over the 2,229 chunks (3 levels) the GMM time went from 35-40 s
(exhaustive) to 11-13 s (coarse_to_fine) with identical trees; UMAP (~20 s under load) then dominates
clustering."""


if __name__ == "__main__":
    main()
