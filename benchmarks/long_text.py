"""Long texts and the 256-token embedder: truncation (the model's own behaviour, the baseline) vs
the mean of window embeddings (``embed.long_text = mean``), with a few window overlaps and a
token-weighted mean.

Usage: python benchmarks/long_text.py [--max-windows 60]

Windows: FFS windows of w = 1,024 tokens (step 256) over the RAPTOR Cinderella text, the NarrativeQA
passages and the FinanceBench PDFs (../shared/data). For every window:

- **coverage per quarter**: the cosine of the window's vector to each of its sentences (>= 40
  characters), averaged per quarter of the window the sentence starts in;
- **sentence -> own window**: each sentence as a query against all windows of its source text;
  top-1 = its own window ranks first (windows overlap by 3/4, so a sentence can sit in up to four
  windows: a hit on any window holding the sentence counts). Reported per quarter of the window
  the sentence was drawn from (the later quarters are what truncation loses);
- **cost**: forward passes (windows) per text and the embedding time.

Writes benchmarks/results/long_text.md.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import cinderella_text, financebench_texts, git_commit, machine_line, md_table, narrativeqa_passages, setup_env  # noqa: E402

_SENT = re.compile(r"[A-Z][^.!?\n]{40,}[.!?]")


def windows_of(texts: list[tuple[str, str]], max_windows: int) -> list[tuple[str, int, int, str]]:
    """(source, start, end, window text) of FFS windows (w = 1024, s = 256) with >= 1000 tokens."""
    from arborag.config import SegmentConfig
    from arborag.tasks.stages.segment import segment_text

    out: list[tuple[str, int, int, str]] = []
    for name, text in texts:
        for sp in segment_text(text, "ffs", SegmentConfig()):
            if sp.n_tokens >= 1000:
                out.append((name, sp.start, sp.end, text[sp.start : sp.end]))
    step = max(1, len(out) // max_windows)
    return out[::step][:max_windows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-windows", type=int, default=60)
    args = ap.parse_args()
    setup_env()
    from arborag.config import EmbedConfig
    from arborag.embedder import Embedder

    texts = [("cinderella", cinderella_text())] + [(f"narrativeqa-{i}", p) for i, p in enumerate(narrativeqa_passages())]
    texts += [(name, t) for name, t in financebench_texts()]
    wins = windows_of(texts, args.max_windows)
    base = Embedder(EmbedConfig(long_text="truncate"))
    model = base._load()
    policies: dict[str, Embedder] = {"truncate (baseline)": base}
    for ov in (0, 32, 64):
        e = Embedder(EmbedConfig(long_text="mean", long_text_overlap=ov))
        e._model = model
        policies[f"mean, overlap {ov}" + (" (default)" if ov == 32 else "")] = e

    # sentences of each window, with the quarter they start in
    sents: list[tuple[int, int, str]] = []  # (window row, quarter, sentence)
    for row, (_, _start, _end, w) in enumerate(wins):
        for m in _SENT.finditer(w):
            sents.append((row, min(3, 4 * m.start() // max(1, len(w))), m.group()))
    sent_vecs = base.embed([s for _, _, s in sents])
    # windows holding each sentence (same source, character span covers it)
    holders: list[set[int]] = []
    for row, _, s in sents:
        src, start, _, w = wins[row]
        pos = start + w.index(s)
        holders.append({j for j, (src2, a, b, _) in enumerate(wins) if src2 == src and a <= pos and pos + len(s) <= b})

    rows = []
    results: dict[str, dict[str, object]] = {}
    for label, emb in policies.items():
        t0 = time.perf_counter()
        vecs = emb.embed([w for *_, w in wins])
        seconds = time.perf_counter() - t0
        n_pass = sum(len(emb.windows(w)) for *_, w in wins) if label.startswith("mean") else len(wins)
        cov = [[] for _ in range(4)]
        top1 = [[] for _ in range(4)]
        for (row, q, _), v, hold in zip(sents, sent_vecs, holders):
            cov[q].append(float(vecs[row] @ v))
            same = [j for j, x in enumerate(wins) if x[0] == wins[row][0]]
            best = max(same, key=lambda j: float(vecs[j] @ v))
            top1[q].append(best in hold)
        results[label] = {"cov": [np.mean(c) for c in cov], "top1": [np.mean(t) for t in top1]}
        rows.append([label] + [f"{np.mean(c):.3f}" for c in cov] + [f"{np.mean(t):.2f}" for t in top1]
                    + [f"{n_pass / len(wins):.1f}", f"{seconds:.1f}"])
        print(rows[-1], flush=True)
    # token-weighted mean of the default windows (a variant we measured, not offered as a setting)
    e = policies["mean, overlap 32 (default)"]
    wv = []
    for *_, w in wins:
        parts = e.windows(w)
        pv = base.embed(parts)
        weights = np.array([len(p) for p in parts], dtype=np.float64)
        m = (pv * weights[:, None]).sum(0)
        wv.append(m / np.linalg.norm(m))
    wv = np.asarray(wv, dtype=np.float32)
    cov = [[] for _ in range(4)]
    top1 = [[] for _ in range(4)]
    for (row, q, _), v, hold in zip(sents, sent_vecs, holders):
        cov[q].append(float(wv[row] @ v))
        same = [j for j, x in enumerate(wins) if x[0] == wins[row][0]]
        top1[q].append(max(same, key=lambda j: float(wv[j] @ v)) in hold)
    rows.append(["length-weighted mean, overlap 32"] + [f"{np.mean(c):.3f}" for c in cov] + [f"{np.mean(t):.2f}" for t in top1] + ["4.x", "—"])
    print(rows[-1], flush=True)
    b = results["truncate (baseline)"]["top1"]
    d = results["mean, overlap 32 (default)"]["top1"]
    late_b, late_d = float(np.mean(b[1:])), float(np.mean(d[1:]))  # type: ignore[index]
    header = ["policy", "cos Q1", "cos Q2", "cos Q3", "cos Q4", "top-1 Q1", "top-1 Q2", "top-1 Q3", "top-1 Q4", "passes/text", "embed s"]
    md = [
        "# Long texts: truncation vs mean of windows",
        "",
        f"`python benchmarks/long_text.py --max-windows {args.max_windows}` at {git_commit()}; {machine_line()}.",
        f"{len(wins)} FFS windows of 1,024 tokens (Cinderella, NarrativeQA passages, FinanceBench PDFs); {len(sents)} sentences.",
        "cos Qn: mean cosine of the window's vector to its sentences in quarter n; top-1 Qn: share of those sentences whose",
        "own window (any window holding it) ranks first among the windows of the same text.",
        "",
        md_table(header, rows),
        "",
        f"Sentences of quarters 2-4, top-1: truncate {late_b:.2f}, mean (default) {late_d:.2f} "
        f"(ratio {late_d / max(late_b, 1e-9):.2f}x vs the truncation baseline measured in the same run).",
    ]
    out = REPO / "benchmarks" / "results" / "long_text.md"
    out.write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))


if __name__ == "__main__":
    main()
