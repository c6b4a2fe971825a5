"""Do the leaf vectors, and so the trees, depend on the CPU's instruction set?

Usage: python benchmarks/embed_isa.py [--n 994] [--out benchmarks/results/embed_isa]

Why: the same code built different trees on two VMs (session 13: an Intel Xeon and an AMD EPYC,
node ids hash 2fbe... vs c696... at 1x). One machine cannot be the other, but oneDNN, which
torch's CPU kernels dispatch to, picks its kernels by the instruction set it finds and can be
capped to an older one with ``ONEDNN_MAX_CPU_ISA`` — so this machine can play a CPU without,
say, native bf16 dot products (``avx512_bf16``) or without AVX-512 at all.

What it does, in fresh processes (the embedding worker's class,
:class:`arborag.embedder_light.LightEmbedder`, default settings but the dtype): the HotpotQA
corpus paragraphs (title + sentences) embedded under each ISA cap (none = what this CPU has) and
each dtype; the uncapped run twice (the same machine must give the same vectors). Then one RAPTOR
clustering level (:func:`arborag.tasks.clustering.cluster_level`, default config) over each run's
vectors, compared with the uncapped run's clusters of the same dtype. Writes ``--out``.md/.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, RESULTS, git_commit, hotpot_paragraphs, machine_line, md_table, run_header, script_command, setup_env  # noqa: E402

setup_env()

CHILD = r'''
import json, sys, time
import numpy as np
from arborag.env import offline_env
offline_env()
from arborag.config import load_config
from arborag.embedder_light import LightEmbedder
texts = json.load(open(sys.argv[1], encoding="utf-8"))
cfg = load_config(None)
cfg = cfg.model_copy(update={"embed": cfg.embed.model_copy(update={"dtype": sys.argv[3]})})
emb = LightEmbedder(cfg.embed)
emb.embed(texts[:32])  # model load, kernels warmed
t = time.perf_counter()
v = emb.embed(texts)
sec = time.perf_counter() - t
np.save(sys.argv[2], v)
print(json.dumps({"encode_s": sec}))
'''

#: (label, ONEDNN_MAX_CPU_ISA or None): the uncapped run, then CPUs with less. The AVX2 row also
#: caps torch's own vectorised kernels (``ATEN_CPU_CAPABILITY``); torch still *chooses* its bf16
#: matmul path by the real CPU (cpuinfo), so a real CPU without AVX-512 may be slower still.
CAPS = [("this CPU (uncapped)", None), ("this CPU again", None),
        ("no native bf16 (AVX512_CORE_VNNI)", "AVX512_CORE_VNNI"), ("no AVX-512 (AVX2)", "AVX2")]
_ATEN = {"AVX2": "avx2"}


def _embed(texts_path: Path, out: Path, dtype: str, cap: str | None) -> float:
    env = dict(os.environ)
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    env.pop("ATEN_CPU_CAPABILITY", None)
    if cap:
        env["ONEDNN_MAX_CPU_ISA"] = cap
    if cap in _ATEN:
        env["ATEN_CPU_CAPABILITY"] = _ATEN[cap]
    res = subprocess.run([sys.executable, "-c", CHILD, str(texts_path), str(out), dtype], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True)
    return float(json.loads(res.stdout.strip().splitlines()[-1])["encode_s"])


def _clusters(v: np.ndarray, tokens: np.ndarray) -> list[list[int]]:
    from arborag.config import load_config
    from arborag.tasks.clustering import cluster_level

    return [[r for r, _ in c] for c in cluster_level(v, tokens, load_config(None).cluster)]


def _argmax_labels(clusters: list[list[int]], n: int) -> np.ndarray:
    """Each row's first cluster (clusters are canonical: sorted by first row)."""
    lab = np.full(n, -1)
    for i, c in enumerate(clusters):
        for r in c:
            if lab[r] < 0:
                lab[r] = i
    return lab


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=994, help="paragraphs of the HotpotQA corpus to embed (994: all)")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--out", default=str(RESULTS / "embed_isa"))
    args = ap.parse_args()
    from sklearn.metrics import adjusted_rand_score

    t_start = time.perf_counter()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    m_start = machine_line()
    texts = [f"{title}. {' '.join(s)}" for title, s in hotpot_paragraphs()][: args.n]
    tokens = np.array([max(1, len(t.split())) for t in texts])
    rows, records = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tp = Path(tmp) / "texts.json"
        tp.write_text(json.dumps(texts), encoding="utf-8")
        for dtype in args.dtypes.split(","):
            base_v, base_c = None, None
            for label, cap in CAPS:
                path = Path(tmp) / f"{dtype}-{cap or 'none'}-{len(records)}.npy"
                sec = _embed(tp, path, dtype, cap)
                v = np.load(path)
                clusters = _clusters(v, tokens)
                rec = {"dtype": dtype, "cpu": label, "cap": cap, "encode_s": sec, "clusters": len(clusters)}
                if base_v is None:
                    base_v, base_c = v, clusters
                else:
                    differ = (v != base_v).any(axis=1)
                    cos = (v * base_v).sum(axis=1)
                    rec.update(rows_differ=int(differ.sum()), max_abs=float(np.abs(v - base_v).max()), min_cos=float(cos.min()),
                               same_clusters=clusters == base_c,
                               ari=float(adjusted_rand_score(_argmax_labels(base_c, len(v)), _argmax_labels(clusters, len(v)))))
                records.append(rec)
                print(json.dumps(rec), flush=True)
    for r in records:
        first = "rows_differ" not in r
        rows.append([r["dtype"], r["cpu"], f"{r['encode_s']:.2f}", "(reference)" if first else f"{r['rows_differ']} of {len(texts)}",
                     "—" if first else f"{r['max_abs']:.3g}", "—" if first else f"{r['min_cos']:.6f}", r["clusters"],
                     "—" if first else ("yes" if r["same_clusters"] else "**no**"), "—" if first else f"{r['ari']:.3f}"])
    cmd = script_command()
    lines = run_header("Leaf vectors and trees across CPU instruction sets", date=date, machine_start=m_start, started=t_start)
    lines += [
        "",
        f"{len(texts)} HotpotQA corpus paragraphs (title + sentences), embedded in a fresh process per row by the embedding "
        "worker's class (LightEmbedder, default settings but the dtype); `ONEDNN_MAX_CPU_ISA` caps the instruction set oneDNN "
        "may use (and `ATEN_CPU_CAPABILITY=avx2` torch's own kernels in the AVX2 row), so this machine plays a CPU that lacks it "
        "— an emulation: torch still picks its bf16 matmul path by the real CPU. Each row is compared with the first row of its dtype: the "
        "vectors bit for bit, and one RAPTOR clustering level over them (cluster_level, default config) — the same clusters, "
        "and the adjusted Rand index of each row's first cluster.",
        "",
        md_table(["dtype", "CPU played", "encode s", "vectors that differ", "max abs diff", "min cosine", "clusters",
                  "same clusters", "ARI"], rows),
        "",
    ]
    out = Path(args.out)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps({"command": cmd, "date": date, "commit": git_commit(), "machine": m_start,
                                                    "records": records}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
