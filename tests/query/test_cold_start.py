"""A cold `arborag query` imports only what it needs: no lancedb to read the vectors,
no sentence-transformers / transformers / scikit-learn / scipy / Prefect for a dense query, and
no torch at all for a sparse one; results are those of the Python API. Old snapshots without
``nodes.arrow`` still open (through lancedb)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.cold_start import QUESTION, publish_real_snapshot

from arborag.query import open_index
from arborag.storage.vectors import ARROW_FILE, VectorStore

HEAVY = ("lancedb", "sentence_transformers", "transformers", "sklearn", "scipy", "prefect", "pandas")

RUN = """
import json, sys
from arborag.cli.app import app
try:
    app(sys.argv[1:], standalone_mode=False)
finally:
    heavy = [m for m in {heavy!r} if m in sys.modules]
    print("MODULES=" + json.dumps(heavy), file=sys.stderr)
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return publish_real_snapshot(tmp_path_factory.mktemp("cold") / "corpus")


def cli(*args: str) -> tuple[list[dict], list[str]]:
    code = RUN.format(heavy=HEAVY + ("torch",))
    done = subprocess.run([sys.executable, "-c", code, "query", *args, "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stderr.split("MODULES=")[-1].strip())
    return json.loads(done.stdout), modules


def api_hits(corpus: Path, mode: str) -> list[tuple[str, float]]:
    return [(h.node_id, round(h.score, 6)) for h in open_index(corpus).search(QUESTION, mode=mode, budget=2000)]


def test_dense_query_skips_the_heavy_imports_and_matches_the_api(corpus: Path) -> None:
    hits, modules = cli(QUESTION, "--mode", "collapsed", "--corpus", str(corpus))
    assert modules == ["torch"]  # the model runs on torch; nothing else heavy
    assert hits[0]["node_id"] == "a" and hits[0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert [(h["node_id"], h["score"]) for h in hits] == api_hits(corpus, "collapsed")


def test_default_auto_query_skips_the_heavy_imports_and_matches_the_api(corpus: Path) -> None:
    hits, modules = cli(QUESTION, "--corpus", str(corpus))  # query.mode = auto: dense + BM25 leaves
    assert modules == ["torch"]
    assert hits and [(h["node_id"], h["score"]) for h in hits] == api_hits(corpus, "auto")
    assert all(h["level"] == 0 for h in hits)


def test_sparse_query_imports_no_torch(corpus: Path) -> None:
    hits, modules = cli(QUESTION, "--mode", "sparse", "--corpus", str(corpus))
    assert modules == []
    assert hits and [(h["node_id"], h["score"]) for h in hits] == api_hits(corpus, "sparse")


def test_traversal_reads_the_edges_lazily(corpus: Path) -> None:
    index = open_index(corpus, light=True)
    assert index._edge_rows is None
    hits = index.search(QUESTION, mode="traversal", k=1, budget=None)
    assert sorted(h.node_id for h in hits) == ["a", "r", "s1"]  # root -> s1 -> a, best first
    assert index._edge_rows is not None
    index.close()


def test_vectors_file_and_lancedb_fallback_agree(corpus: Path, tmp_path: Path) -> None:
    lance_dir = next((corpus / "snapshots").iterdir()) / "vectors.lance"
    assert (lance_dir / ARROW_FILE).is_file()
    new = VectorStore.open(lance_dir)
    old_dir = tmp_path / "vectors.lance"
    shutil.copytree(lance_dir, old_dir)
    (old_dir / ARROW_FILE).unlink()  # a snapshot written before nodes.arrow existed
    old = VectorStore.open(old_dir)
    assert new.node_ids == old.node_ids and new.texts == old.texts and new.doc_ids == old.doc_ids
    assert np.array_equal(new.levels, old.levels) and np.array_equal(new.n_tokens, old.n_tokens)
    assert np.array_equal(new.matrix, old.matrix) and new.matrix.flags.c_contiguous and new.matrix.flags.writeable
