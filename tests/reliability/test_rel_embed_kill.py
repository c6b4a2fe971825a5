"""A process killed with SIGKILL in the middle of embedding keeps what it had embedded.

A subprocess embeds 1,200 distinct leaf texts through the embedding cache with the packaged
model (:func:`arborag.tasks.embeddings.embed_cached`, what the embed stage runs). The test
watches the cache folder and kills the process once two slices' shards are there (the model is
encoding the next ones). The killed run prints how many texts the model had encoded; a second
run over the same texts encodes exactly those the cache lacks, so the work encoded twice is at
most the slice in flight, and the vectors it read from the cache are the ones the model gives.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers.reliability import PYTHON, cli_env, kill_tree, wait_for

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

N_TEXTS = 1200

EMBED = r"""
import json, sys
import numpy as np
from arborag.config import load_config
from arborag.tasks.embeddings import FLUSH_TEXTS, Embedder, EmbeddingCache, embed_cached

words = "river city bridge archive harbour council market tower garden station library museum".split()
texts = [f"Leaf {i}: " + " ".join(words[(i * k) % len(words)] for k in range(1, 8 + i % 40)) for i in range(int(sys.argv[2]))]
embedder = Embedder(load_config().embed)
cache = EmbeddingCache(sys.argv[1])
print("CACHED-BEFORE", len(cache), flush=True)
vectors, computed = embed_cached(texts, embedder, cache, progress=lambda n: print("ENCODED", n, flush=True))
fresh = embedder.embed(texts[:16])
print("RESULT " + json.dumps({"computed": computed, "flush": FLUSH_TEXTS, "cached_after": len(EmbeddingCache(sys.argv[1])),
                              "min_cos": float((vectors[:16] * fresh).sum(axis=1).min()), "rows": len(vectors)}), flush=True)
"""


def _shards(folder: Path) -> list[Path]:
    return sorted(folder.glob("emb-*.parquet"))


def test_kill_mid_embedding_loses_at_most_the_slice_in_flight(tmp_path: Path) -> None:
    cache_dir = tmp_path / "embeddings"
    cache_dir.mkdir()
    proc = subprocess.Popen([PYTHON, "-c", EMBED, str(cache_dir), str(N_TEXTS)], env=cli_env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: len(_shards(cache_dir)) >= 2, timeout=600, interval=0.01, proc=proc), \
            f"no slice reached the cache before the run ended: {proc.communicate()}"
    finally:
        kill_tree(proc)
    out, _ = proc.communicate()
    assert proc.returncode == -9  # killed, not finished
    encoded_before_kill = sum(int(line.split()[1]) for line in out.splitlines() if line.startswith("ENCODED "))
    from arborag.tasks.embeddings import EmbeddingCache

    kept = len(EmbeddingCache(cache_dir))
    assert 0 < kept < N_TEXTS

    rerun = subprocess.run([PYTHON, "-c", EMBED, str(cache_dir), str(N_TEXTS)], env=cli_env(), capture_output=True,
                           text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"CACHED-BEFORE {kept}" in rerun.stdout
    result = json.loads(rerun.stdout.split("RESULT ", 1)[1])
    # what the killed run wrote is not encoded again; what it had in flight is
    assert result["computed"] == N_TEXTS - kept
    assert encoded_before_kill - kept <= result["flush"]  # encoded twice: at most the slice in flight
    assert result["cached_after"] == N_TEXTS and result["rows"] == N_TEXTS
    # the cached vectors are the model's (up to the batch's padding: a text encoded in another batch)
    assert result["min_cos"] > 0.9999
