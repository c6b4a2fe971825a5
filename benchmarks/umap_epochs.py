"""UMAP's SGD epochs (``cluster.umap_epochs``): what fewer epochs save, and what they change (issue 26).

``--knob umap_layout_blocks`` compares the layout in vertex blocks (``cluster.umap_layout_blocks``,
:mod:`arborag.tasks.umap_layout`) the same way: values are block counts against 1 (UMAP's own
layout), results in ``umap_layout.md`` / ``umap_layout_eval.md``. ``--knob both`` compares
retrieval runs made with both opt-ins at once (``--no-level --no-builds --eval``; a label such as
``200+2``), results in ``umap_both_eval.md``.

UMAP runs 500 SGD epochs below 10,000 points and 200 above (its own rule, arborag's default:
``cluster.umap_epochs: null``). The SGD layout is most of a UMAP fit's time on one core, so this
script measures, for a few settings of the knob side by side:

1. **level 1 in fresh processes** — ``cluster_level`` over the leaves of a built corpus (default
   the 1x cold-path corpus, ~2,445 leaves), as a build runs it (UMAP's cached code, the local fits
   on two threads): seconds of the level, of the global UMAP fit, of every UMAP fit, of the
   GMM/BIC; k; and the agreement of the clusterings (adjusted Rand index of the global clusters'
   argmax and of the final clusters' argmax) between two epoch settings at one seed **beside**
   between two seeds at one setting (the method's own run-to-run noise);
2. **the whole tree** (``--builds``) — a fresh ``arborag build SRC`` into an empty corpus per
   setting (default settings otherwise), its tree stage and level-1 cluster seconds from the
   runs table;
3. **retrieval** (``--eval``) — reads ``arborag eval`` runs made with each setting (this script
   does not run them: ``arborag eval DATASET --out DIR --config YAML`` with
   ``cluster: {umap_epochs: 200}`` or ``cluster: {seed: 225}``), and writes per dataset, system and
   budget the change from the default epochs to each setting beside the change from seed 224 to
   seed 225 at the default. *Noise* = the largest seed-to-seed |Δ| over the systems that can move
   with the tree (all but flat and bm25) and budgets of that dataset and metric (one question is 1/n
   of a rate); a setting is *within noise* when its largest drop is no larger.

    python benchmarks/umap_epochs.py                                  # 1 + 2 on the 1x cold-path corpus
    python benchmarks/umap_epochs.py --no-builds --epochs 200,100     # level 1 only
    python benchmarks/umap_epochs.py --no-level --no-builds \\
        --eval financebench=/tmp/ev/fb-e0-s224,/tmp/ev/fb-e0-s225,200:/tmp/ev/fb-e200-s224

``--eval LABEL=DEFAULT,DEFAULT_OTHER_SEED,EPOCHS:DIR[,EPOCHS:DIR...]`` (the epoch runs with the first
run's seed; give a second ``--eval`` with the seeds swapped to compare at the other seed). Writes
``benchmarks/results/umap_epochs.md`` and ``.json`` (the retrieval part into
``umap_epochs_eval.md`` when only ``--eval`` runs), with the command, date, load and commit.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, busy_processes, fmt_s, git_commit, machine_line, md_table, report_header, setup_env  # noqa: E402

CHILD = r"""
import json, sys, time
import numpy as np
epochs, seed, vec_path, tok_path, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
knob = sys.argv[6] if len(sys.argv) > 6 else "umap_epochs"
t0 = time.perf_counter()
from arborag.config import ClusterConfig
from arborag.tasks import clustering
from arborag.tasks.clustering import ClusterStats, cluster_level
from arborag.tasks.umap_runtime import import_umap
import_umap()
t_import = time.perf_counter() - t0
x, tok = np.load(vec_path), np.load(tok_path)
cfg = ClusterConfig(seed=seed, **({} if epochs == "default" else {knob: int(epochs)}))
calls = []
inner = clustering._reduce
def timed(x, *a, **k):  # every UMAP fit's size, seconds and CPU seconds of its thread (the first one of the level is the global fit)
    t, c = time.perf_counter(), time.thread_time()
    out = inner(x, *a, **k)
    calls.append((len(x), time.perf_counter() - t, time.thread_time() - c))
    return out
clustering._reduce = timed
st, fitted = ClusterStats(), []
t, c = time.perf_counter(), time.process_time()
clusters = cluster_level(x, tok, cfg, stats=st, fitted=fitted)
t_level, c_level = time.perf_counter() - t, time.process_time() - c
best = np.zeros(len(x)); final = np.full(len(x), -1)
for c, members in enumerate(clusters):
    for r, p in members:
        if p > best[r]:
            best[r], final[r] = p, c
fit = fitted[0]
glob = fit.global_fit.predict_proba(fit.global_fit.reduced).argmax(axis=1) if fit.global_fit is not None and fit.global_fit.k > 1 else np.zeros(st.n_distinct, dtype=int)
np.save(out_path + ".final.npy", final)
np.save(out_path + ".global.npy", glob)
print(json.dumps({"epochs": epochs, "seed": seed, "n": len(x), "n_distinct": st.n_distinct, "import_s": t_import, "level_s": t_level,
                  "level_cpu_s": c_level, "global_umap_s": calls[0][1], "global_umap_cpu_s": calls[0][2], "global_n": calls[0][0], "umap_s": st.umap_s, "umap_fits": st.umap_fits,
                  "gmm_s": st.gmm_s, "global_k": st.global_k, "clusters": len(clusters)}))
"""


def leaves(corpus: Path) -> tuple[Any, Any, str]:
    """(vectors, n_tokens, snapshot) of the published snapshot's leaves, in nodes.parquet order."""
    import numpy as np
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    man = corpus / "manifest.json"
    if not man.exists():
        raise SystemExit(f"no published corpus at {corpus}: run `python benchmarks/cold_path.py --sizes 1` (or arborag build) first")
    snap = corpus / "snapshots" / json.loads(man.read_text(encoding="utf-8"))["snapshot"]
    vec = pa.ipc.open_file(snap / "vectors.lance" / "nodes.arrow").read_all().select(["node_id", "vector"])
    nodes = pl.from_arrow(pq.read_table(snap / "nodes.parquet", columns=["node_id", "level", "n_tokens"])).filter(pl.col("level") == 0)
    joined = nodes.join(pl.from_arrow(vec), on="node_id", how="left", maintain_order="left")
    return np.stack(joined["vector"].to_list()).astype(np.float32), joined["n_tokens"].to_numpy().astype(np.int64), snap.name


def run(argv: list[str], label: str) -> tuple[str, float]:
    t = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout, time.perf_counter() - t


def level_part(corpus: Path, work: Path, settings: list[str], seeds: list[int], rounds: int, knob: str = "umap_epochs") -> dict[str, Any]:
    import numpy as np
    from sklearn.metrics import adjusted_rand_score

    x, tok, snap = leaves(corpus)
    np.save(work / "leaves.npy", x)
    np.save(work / "tokens.npy", tok)
    print(f"level 1: {len(x)} leaves of {corpus} ({snap})", flush=True)
    runs: dict[str, dict[str, Any]] = {}
    timing_keys = ("import_s", "level_s", "level_cpu_s", "global_umap_s", "global_umap_cpu_s", "umap_s", "gmm_s", "process_s")
    for rnd in range(rounds):  # settings interleaved, so a load swing hits them alike
        for seed in seeds:
            for ep in settings:
                key = f"{ep}/s{seed}"
                out, wall = run([sys.executable, "-c", CHILD, ep, str(seed), str(work / "leaves.npy"), str(work / "tokens.npy"), str(work / f"{ep}-s{seed}"), knob], key)
                row = {**json.loads(out.strip().splitlines()[-1]), "process_s": wall, "load1": os.getloadavg()[0]}
                print(f"  round {rnd + 1}", key, {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
                if key in runs:  # a fit is deterministic: the clusters are the same; keep every round's seconds
                    assert (row["global_k"], row["clusters"]) == (runs[key]["global_k"], runs[key]["clusters"]), "same seed + input, other clusters"
                    for k in timing_keys:
                        runs[key]["rounds"][k].append(row[k])
                else:
                    runs[key] = {**row, "rounds": {k: [row[k]] for k in timing_keys}}
    for r in runs.values():  # the least disturbed round: the minimum of each timing
        r.update({k: min(v) for k, v in r["rounds"].items()})

    def ari(a: str, b: str, which: str) -> float:
        la, lb = (np.load(work / f"{k.replace('/s', '-s')}.{which}.npy") for k in (a, b))
        return float(adjusted_rand_score(la, lb))

    pairs: list[dict[str, Any]] = []
    base = settings[0]
    for seed in seeds:  # epochs vs the default, one seed
        for ep in settings[1:]:
            pairs.append({"pair": f"{base} vs {ep}{KNOBS[knob].unit}, seed {seed}", "kind": KNOBS[knob].kind,
                          "global": ari(f"{base}/s{seed}", f"{ep}/s{seed}", "global"), "final": ari(f"{base}/s{seed}", f"{ep}/s{seed}", "final")})
    if len(seeds) > 1:  # seed vs seed, one setting: the noise
        for ep in settings:
            if f"{ep}/s{seeds[1]}" in runs:
                pairs.append({"pair": f"seed {seeds[0]} vs {seeds[1]}, {ep}{KNOBS[knob].unit}", "kind": "seed",
                              "global": ari(f"{ep}/s{seeds[0]}", f"{ep}/s{seeds[1]}", "global"), "final": ari(f"{ep}/s{seeds[0]}", f"{ep}/s{seeds[1]}", "final")})
    return {"corpus": str(corpus), "snapshot": snap, "leaves": len(x), "rounds": rounds, "runs": runs, "ari": pairs, "knob": knob}


def build_part(src: Path, work: Path, settings: list[str], knob: str = "umap_epochs") -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cold_path import last_run

    arborag = [sys.executable, "-m", "arborag.cli"] if shutil.which("arborag") is None else ["arborag"]
    out: dict[str, Any] = {}
    for ep in settings:
        corpus, cfg = work / f"build-{ep}", work / f"build-{ep}.yaml"
        shutil.rmtree(corpus, ignore_errors=True)
        cfg.write_text("cluster: {}\n" if ep == "default" else f"cluster:\n  {knob}: {int(ep)}\n", encoding="utf-8")
        print(f"build {ep}{KNOBS[knob].unit}: {src} -> {corpus}", flush=True)
        _, wall = run([*arborag, "build", str(src), "--corpus", str(corpus), "--config", str(cfg), "--no-prefect"], f"build {ep}")
        rec = last_run(corpus)
        counts = rec["counts"]
        levels = {st["level"]: st for st in (counts.get("tree") or {}).get("stats") or [] if st.get("level", 0) >= 1}
        out[ep] = {"wall_s": wall, "run_s": rec["seconds"], "tree_s": (counts.get("seconds") or {}).get("tree"),
                   "embed_s": (counts.get("seconds") or {}).get("embed"), "levels": levels,
                   "nodes": (counts.get("tree") or {}).get("nodes")}
        l1 = levels.get(1, {})
        print(f"  wall {wall:.1f} s, tree {out[ep]['tree_s']}, level 1 cluster {l1.get('cluster_s')} (UMAP {l1.get('umap_s')})", flush=True)
        shutil.rmtree(corpus, ignore_errors=True)
    return out


@dataclass(frozen=True)
class Knob:
    """What this script compares: a setting of ClusterConfig (or ``both`` opt-ins at once) and the
    words its report uses for it."""

    unit: str  # after a value ("200 epochs")
    kind: str  # of an ARI pair against the default
    short: str  # after a value in a column head
    title: str  # of the report
    setting: str  # a value of it, in a sentence
    default: str  # the default, in a sentence
    rule: str  # what the default is
    head: str  # column head of the settings
    stem: str  # results file stem
    work: str  # default scratch folder
    values: str  # default values measured against the default
    eval_only: bool = False  # no level or builds part: it is not one ClusterConfig setting


KNOBS = {
    "umap_epochs": Knob(
        " epochs", "epochs", " ep", "UMAP's SGD epochs (`cluster.umap_epochs`): cost and what it changes", "an epoch setting",
        "default epochs", "Default = UMAP's own rule (500 epochs below 10,000 points, 200 above).", "epochs", "umap_epochs",
        "/tmp/arborag-bench-epochs", "200"),
    "umap_layout_blocks": Knob(
        " blocks", "layout", " blocks", "UMAP's layout in vertex blocks (`cluster.umap_layout_blocks`): cost and what it changes",
        "a block count", "UMAP's own layout",
        "Default = UMAP's own one-thread layout (1 block); epochs by UMAP's own rule. In blocks the layout "
        "runs on threads of its own: the fitting thread's CPU seconds leave it out (compare the wall seconds).",
        "blocks", "umap_layout", "/tmp/arborag-bench-layout", "2"),
    # the two opt-ins together (a label such as ``200+2`` = 200 epochs in 2 blocks): retrieval runs only
    "both": Knob(
        " (epochs+blocks)", "both", " ep+blocks",
        "Both UMAP opt-ins together (`cluster.umap_epochs` and `cluster.umap_layout_blocks`): what they change",
        "a setting of both", "UMAP's own epochs and layout", "Default = UMAP's own rule for epochs and its own one-thread layout.",
        "epochs+blocks", "umap_both", "/tmp/arborag-bench-both", "200+2", eval_only=True),
}

#: systems that read only leaves (their Δ must be 0: the same leaves and vectors in every run); every other one can move with the tree
LEAF_ONLY = ("flat", "bm25")


@functools.cache
def _run_means(folder: str) -> dict[tuple[str, int], dict[str, Any]]:
    """An eval run's means per (system, budget) (``eval_compare._means``), read once per run: the
    per-pair sections and the pooled test read the same runs, a default run in two pairs."""
    from eval_compare import _means

    return _means(Path(folder))


def eval_part(specs: list[str]) -> list[dict[str, Any]]:
    from eval_compare import SYSTEM_ORDER

    out = []
    for spec in specs:
        dataset, _, dirs = spec.partition("=")
        parts = dirs.split(",")
        if len(parts) < 3:
            raise SystemExit(f"--eval {spec}: give LABEL=DEFAULT,DEFAULT_OTHER_SEED,EPOCHS:DIR[,...]")
        base, seed2 = Path(parts[0]), Path(parts[1])
        others = [(p.split(":", 1)[0], Path(p.split(":", 1)[1])) for p in parts[2:]]
        means = {"default": _run_means(str(base)), "other seed": _run_means(str(seed2)), **{ep: _run_means(str(d)) for ep, d in others}}
        meta = {"default": base, "other seed": seed2, **{ep: d for ep, d in others}}
        runs = {k: json.loads((Path(d) / "run.json").read_text(encoding="utf-8")) for k, d in meta.items()}
        keys = sorted(set.intersection(*(set(m) for m in means.values())),
                      key=lambda k: (SYSTEM_ORDER.index(k[0]) if k[0] in SYSTEM_ORDER else 99, k[0], k[1]))
        rows = []
        for key in keys:
            row: dict[str, Any] = {"system": key[0], "budget": key[1], "n": means["default"][key]["n"]}
            for metric in ("hit", "recall"):
                b = means["default"][key][metric]
                row[f"{metric}_default"] = b
                row[f"{metric}_seed"] = None if b is None else means["other seed"][key][metric] - b
                for ep, _ in others:
                    row[f"{metric}_{ep}"] = None if b is None else means[ep][key][metric] - b
            rows.append(row)
        noise = {}
        for metric in ("hit", "recall"):
            vals = [r[f"{metric}_seed"] for r in rows if r["system"] not in LEAF_ONLY and r[f"{metric}_seed"] is not None]
            noise[metric] = max(abs(v) for v in vals) if vals else None
            noise[f"{metric}_mean_tree"] = sum(vals) / len(vals) if vals else None
        verdicts = {}
        for ep, _ in others:
            worst = {}
            for metric in ("hit", "recall"):
                vals = [r[f"{metric}_{ep}"] for r in rows if r[f"{metric}_{ep}"] is not None]
                worst[metric] = min(vals) if vals else None  # the largest drop (negative) or smallest gain
            for metric in ("hit", "recall"):
                tree = [r[f"{metric}_{ep}"] for r in rows if r["system"] not in LEAF_ONLY and r[f"{metric}_{ep}"] is not None]
                worst[f"{metric}_mean_tree"] = sum(tree) / len(tree) if tree else None
            within = all(noise[m] is None or worst[m] is None or -worst[m] <= noise[m] + 1e-9 for m in ("hit", "recall"))
            verdicts[ep] = {"worst_delta": worst, "within_noise": within}
        out.append({"dataset": dataset, "dirs": {k: str(v) for k, v in meta.items()},
                    "questions": runs["default"].get("questions"), "build_s": {k: r.get("timings_s", {}).get("build") for k, r in runs.items()},
                    "nodes_per_level": {k: (r.get("chunk_stats") or {}).get("sentence", {}).get("nodes_per_level") for k, r in runs.items()},
                    "epochs": [ep for ep, _ in others], "rows": rows, "noise": noise, "verdicts": verdicts})
    return out


#: relabelings a pooled permutation test enumerates at most; beyond, this many are drawn (seeded)
PERM_MAX = 200_000


def permutation_test(groups: list[tuple[list[float], list[float]]], *, draws: int = PERM_MAX, seed: int = 0) -> dict[str, Any]:
    """Does a setting change a metric, or is the difference seed noise? A two-sample permutation
    test pooled over datasets. ``groups``: per dataset, (the default runs' values, the setting's
    runs' values), each run at its own seed.

    The statistic Δ is the mean over datasets of mean(setting runs) − mean(default runs). If the
    setting changes nothing, a dataset's runs are exchangeable: any of them could have carried
    either label. So the null distribution is Δ over every relabeling of each dataset's runs into
    groups of the same sizes, combined across datasets — all of them when there are at most
    ``draws``, else ``draws`` drawn with ``seed``. ``p_two``: the share at least as far from 0 as
    the observed Δ; ``p_low``: the share at most as low (a drop)."""
    import itertools

    import numpy as np

    per: list[np.ndarray] = []
    observed = []
    for default, setting in groups:
        vals = np.asarray([*default, *setting], dtype=np.float64)
        n, k = len(vals), len(setting)
        stats = []
        for chosen in itertools.combinations(range(n), k):
            mask = np.zeros(n, dtype=bool)
            mask[list(chosen)] = True
            stats.append(vals[mask].mean() - vals[~mask].mean())
        per.append(np.asarray(stats))
        observed.append(float(np.mean(setting) - np.mean(default)))
    delta = float(np.mean(observed))
    total = 1
    for p in per:
        total *= len(p)
    if total <= draws:
        null = per[0]
        for p in per[1:]:
            null = np.add.outer(null, p).ravel()
        null = null / len(per)
    else:
        rng = np.random.default_rng(seed)
        null = sum(p[rng.integers(0, len(p), draws)] for p in per) / len(per)
    eps = 1e-12  # ties count as "at least as extreme"
    return {"delta": delta, "per_dataset": observed, "labelings": int(min(total, draws)), "exhaustive": total <= draws,
            "p_two": float(np.mean(np.abs(null) >= abs(delta) - eps)), "p_low": float(np.mean(null <= delta + eps))}


def pooled_part(evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`permutation_test` per setting, tree system and metric over every ``--eval`` run: per
    dataset, the default's runs (both seeds of each pair, each run once) against the setting's runs;
    a run's value is its mean over the budgets. Empty unless some dataset has two runs a side."""
    from eval_compare import SYSTEM_ORDER

    runs: dict[str, dict[str, set[str]]] = {}  # dataset -> arm -> run folders
    for ev in evals:
        arms = runs.setdefault(ev["dataset"], {})
        for key, d in ev["dirs"].items():
            arms.setdefault("default" if key in ("default", "other seed") else key, set()).add(d)
    settings = sorted({arm for arms in runs.values() for arm in arms if arm != "default"})
    if not any(len(arms.get("default", ())) >= 2 and any(len(arms.get(s, ())) >= 2 for s in settings) for arms in runs.values()):
        return []
    means = {d: _run_means(d) for arms in runs.values() for folders in arms.values() for d in folders}
    systems = sorted({k[0] for m in means.values() for k in m if k[0] not in LEAF_ONLY},
                     key=lambda s: (SYSTEM_ORDER.index(s) if s in SYSTEM_ORDER else 99, s))

    def value(folder: str, system: str, metric: str) -> float | None:
        got = [v[metric] for (sys_, _), v in means[folder].items() if sys_ == system and v[metric] is not None]
        return sum(got) / len(got) if got else None

    out = []
    for setting in settings:
        for system in systems:
            for metric in ("hit", "recall"):
                groups, names = [], []
                for dataset, arms in runs.items():
                    a = [value(d, system, metric) for d in sorted(arms.get("default", ()))]
                    b = [value(d, system, metric) for d in sorted(arms.get(setting, ()))]
                    if a and b and None not in a and None not in b:
                        groups.append((a, b))
                        names.append(f"{dataset} ({len(a)}/{len(b)})")
                if groups:
                    out.append({"setting": setting, "system": system, "metric": metric, "datasets": names, **permutation_test(groups)})
    return out


def _f(v: Any, signed: bool = False) -> str:
    return "–" if v is None else (f"{v:+.3f}" if signed else f"{v:.3f}")


def markdown(result: dict[str, Any]) -> str:
    knob = result.get("knob", "umap_epochs")
    md = [
        *report_header(KNOBS[knob].title, command=result["command"],
                       date=result["date"], commit=result["commit"], machine_start=result["machine_start"],
                       machine_end=result["machine_end"], busy_end=result["busy_at_end"], wall_s=result["wall_s"]),
        "",
        *(f"{n}  " for n in result.get("notes") or []),
        "",
        ("**The machine was shared** (2 cores, other engineers' builds and tests running; see the load averages above): "
         "seconds are those of a loaded box and vary run to run; clusterings and retrieval metrics do not depend on load."
         if result.get("shared", True) else
         "**Idle machine** (2 cores, nothing else running; load averages above): seconds still move run to run (this VM's speed "
         "drifts): the level part interleaves the settings, the builds part runs one build per setting, default first; "
         "clusterings and retrieval metrics do not depend on load."),
        "",
    ]
    lv = result.get("level")
    if lv:
        md += [f"## Level 1 over {lv['leaves']:,} leaves (`{lv['corpus']}`, {lv['snapshot']}), fresh process per setting", "",
               f"{KNOBS[knob].rule} Local fits on two threads as in a build. "
               f"Seconds: the minimum of {lv.get('rounds', 1)} rounds (settings interleaved; every round's seconds are in the .json).", ""]
        rows = [[k, r["n_distinct"], fmt_s(r["level_s"]), fmt_s(r.get("level_cpu_s")), fmt_s(r["global_umap_s"]), fmt_s(r.get("global_umap_cpu_s")),
                 f"{fmt_s(r['umap_s'])} / {r['umap_fits']}", fmt_s(r["gmm_s"]), r["global_k"], r["clusters"]] for k, r in lv["runs"].items()]
        md += [md_table([f"{KNOBS[knob].head} / seed", "points", "level 1 s", "level 1 CPU s", "global UMAP s", "global UMAP CPU s (its thread)",
                         "all UMAP fits s / fits", "GMM/BIC s", "global k", "clusters"], rows), "",
               "CPU seconds (the process's for the level, the fitting thread's for the global UMAP, which runs on one thread) "
               "depend much less on the other processes than wall seconds do: compare settings by them.", ""]
        md += [f"Agreement of the clusterings (adjusted Rand index; 1 = identical partitions): {KNOBS[knob].setting} against the "
               "default at one seed, beside the default against itself under another seed (the method's own noise).", "",
               md_table(["pair", "kind", "ARI global clusters", "ARI final clusters (argmax membership)"],
                        [[p["pair"], p["kind"], f"{p['global']:.3f}", f"{p['final']:.3f}"] for p in lv["ari"]]), ""]
    bd = result.get("builds")
    if bd:
        md += ["## Whole tree: a fresh `arborag build` per setting (same sources, empty corpus)", ""]
        rows = []
        for ep, b in bd.items():
            l1 = b["levels"].get(1) or b["levels"].get("1") or {}
            rows.append([ep, fmt_s(b["wall_s"]), fmt_s(b["embed_s"]), fmt_s(b["tree_s"]), fmt_s(l1.get("cluster_s")),
                         f"{fmt_s(l1.get('umap_s'))} / {l1.get('umap_fits')}", b["nodes"] or "–"])
        md += [md_table([KNOBS[knob].head, "build wall s", "stage embed s", "stage tree s", "level 1 cluster s", "level 1 UMAP s / fits", "nodes"], rows), ""]
    for ev in result.get("eval") or []:
        eps = ev["epochs"]
        md += [f"## Retrieval: {ev['dataset']} ({ev['questions']} questions)", ""]
        md += [f"- {k}: `{d}` (build {ev['build_s'].get(k)} s, nodes per level {ev['nodes_per_level'].get(k)})" for k, d in ev["dirs"].items()]
        md += ["", f"Δ = the setting's mean minus the default's (first run); *seed* = the second run (the other seed, {KNOBS[knob].default}) "
               "minus the first. Hit: answer-in-context hit rate; recall: gold-evidence recall at budget; strategy `sentence`.", ""]
        head = ["system", "budget"]
        for m in ("hit", "recall"):
            head += [f"{m} default", f"Δ {m} seed"] + [f"Δ {m} {ep}{KNOBS[knob].short}" for ep in eps]
        rows = []
        for r in ev["rows"]:
            row = [r["system"], r["budget"]]
            for m in ("hit", "recall"):
                row += [_f(r[f"{m}_default"]), _f(r[f"{m}_seed"], True)] + [_f(r[f"{m}_{ep}"], True) for ep in eps]
            rows.append(row)
        md += [md_table(head, rows), ""]
        nz = ev["noise"]
        md.append(f"- noise (largest seed-to-seed |Δ| over every system but {', '.join(LEAF_ONLY)}): hit {_f(nz['hit'])}, recall {_f(nz['recall'])}; "
                  f"mean seed Δ over those cells: hit {_f(nz['hit_mean_tree'], True)}, recall {_f(nz['recall_mean_tree'], True)}")
        for ep, v in ev["verdicts"].items():
            w = v["worst_delta"]
            md.append(f"- {ep}{KNOBS[knob].unit}: largest drop hit {_f(w['hit'], True)}, recall {_f(w['recall'], True)}; mean Δ over the tree's cells "
                      f"hit {_f(w['hit_mean_tree'], True)}, recall {_f(w['recall_mean_tree'], True)} "
                      f"→ **{'within noise' if v['within_noise'] else 'OUTSIDE noise'}** (largest drop ≤ largest seed |Δ|)")
        md.append("")
    pooled = result.get("pooled") or []
    if pooled:
        md += ["## Across seeds: a permutation test per system and metric", "",
               "Every run above counts once, per dataset: the default's (both seeds of each pair) against the setting's, each "
               "run at its own seed; a run's value is its mean over the budgets. Δ = the setting's runs' mean minus the default's, "
               "averaged over the datasets that have the metric (runs default / setting in brackets). If the setting changes "
               "nothing, a dataset's runs are exchangeable, so p is the share of the relabelings of each dataset's runs (group "
               "sizes kept, all of them) whose Δ is as far from 0 (two-sided) or as low (one-sided, a drop). Unlike the per-pair "
               "rule above, which sets one Δ against one seed-to-seed Δ of about the same spread, this uses every run at once. "
               "With a few runs a side it cannot tell a small effect from seed noise: a large p is not evidence of no effect.", "",
               md_table(["setting", "system", "metric", "Δ", "Δ per dataset", "relabelings", "p two-sided", "p as low or lower"],
                        [[f"{r['setting']}{KNOBS[knob].short}", r["system"], r["metric"], _f(r["delta"], True),
                          ", ".join(f"{n} {_f(d, True)}" for n, d in zip(r["datasets"], r["per_dataset"])),
                          f"{r['labelings']:,}" + ("" if r["exhaustive"] else " (drawn)"), f"{r['p_two']:.3f}", f"{r['p_low']:.3f}"]
                         for r in pooled]), ""]
    return "\n".join(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=Path("/tmp/arborag-bench-cold/corpus-1x"), help="a built corpus (its published leaves are clustered)")
    ap.add_argument("--src", type=Path, default=Path("/tmp/arborag-bench-cold/src-1x"), help="sources the --builds part builds from")
    ap.add_argument("--knob", choices=sorted(KNOBS), default="umap_epochs",
                    help="the ClusterConfig setting compared, or both opt-ins at once (retrieval runs only) (default: umap_epochs)")
    ap.add_argument("--values", "--epochs", dest="values", default=None,
                    help="comma-separated values of the knob measured against the default (default: 200 epochs, 2 blocks)")
    ap.add_argument("--build-values", "--build-epochs", dest="build_values", default=None, help="values of the --builds part (default: those of --values)")
    ap.add_argument("--seeds", default="224,225", help="seeds of the level part (the second one gives the noise)")
    ap.add_argument("--rounds", type=int, default=2, help="level part: run every setting this many times, report each timing's minimum")
    ap.add_argument("--level", action=argparse.BooleanOptionalAction, default=True, help="level-1 part")
    ap.add_argument("--builds", action=argparse.BooleanOptionalAction, default=True, help="whole-tree part (a fresh build per setting)")
    ap.add_argument("--eval", action="append", default=[], metavar="LABEL=DEFAULT,OTHER_SEED,EPOCHS:DIR")
    ap.add_argument("--note", action="append", default=[], help="a line for the report (e.g. how the --eval runs were made)")
    ap.add_argument("--shared", action=argparse.BooleanOptionalAction, default=None,
                    help="say in the report whether other work shared the machine (default: the 1-min load at the start is over 1.5)")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default /tmp/arborag-bench-epochs, -layout for blocks)")
    ap.add_argument("--name", default=None, help="results file stem (default umap_epochs / umap_layout, with _eval when only --eval runs)")
    args = ap.parse_args()
    knob = KNOBS[args.knob]
    if knob.eval_only and (args.level or args.builds):
        raise SystemExit(f"--knob {args.knob} compares retrieval runs only: give --no-level --no-builds and --eval")
    setup_env()
    work = args.work or Path(knob.work)
    values = args.values or knob.values
    settings = ["default", *[e.strip() for e in values.split(",") if e.strip()]]
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    result: dict[str, Any] = {
        "command": "python benchmarks/umap_epochs.py " + " ".join(sys.argv[1:]),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(), "machine_start": machine_line(), "notes": args.note,
        **({"knob": args.knob} if args.knob != "umap_epochs" else {}),  # an epochs run's JSON as before the knob option
        "shared": args.shared if args.shared is not None else os.getloadavg()[0] > 1.5,
    }
    work.mkdir(parents=True, exist_ok=True)
    if args.level:
        result["level"] = level_part(args.corpus, work, settings, seeds, args.rounds, args.knob)
    if args.builds:
        result["builds"] = build_part(args.src, work, settings if args.build_values is None else ["default", *args.build_values.split(",")], args.knob)
    if args.eval:
        result["eval"] = eval_part(args.eval)
        result["pooled"] = pooled_part(result["eval"])
    result.update(machine_end=machine_line(), busy_at_end=busy_processes(), wall_s=time.perf_counter() - started)
    name = args.name or (f"{knob.stem}_eval" if args.eval and not (args.level or args.builds) else knob.stem)
    RESULTS.mkdir(parents=True, exist_ok=True)
    md = markdown(result)
    (RESULTS / f"{name}.md").write_text(md, encoding="utf-8")
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    print(md)


if __name__ == "__main__":
    main()
