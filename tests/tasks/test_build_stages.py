"""The build's stage runners called one by one with a StageContext (no flow, no Prefect, a fake
embedder put in ``ctx.resources``): each reads its inputs from the corpus, writes its outputs, and
adds to the run's counters; ``created_by_run`` and ``info.json`` name the run."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from helpers.embed import FakeEmbedder

from arborag.config import ArboragConfig
from arborag.storage.corpus import Corpus
from arborag.tasks.stages.chunks import run_chunks
from arborag.tasks.stage_context import StageContext
from arborag.tasks.stages.documents import run_documents
from arborag.tasks.stages.leaf_vectors import run_leaf_vectors
from arborag.tasks.embedding.vector_files import read_vectors_file
from arborag.tasks.build.cost import estimate_cost
from arborag.tasks.build.key import build_key, snapshot_id_for
from arborag.tasks.build.leaves import load_leaves
from arborag.tasks.stages.tree import level_counts, run_tree
from arborag.tasks.stages.publish import run_publish, tree_counts
from arborag.tasks.stages.links import run_links
from arborag.tasks.stages.sparse import run_sparse
from arborag.tasks.stages.vectors import run_vectors
from arborag.flows.pipelines import TREE_PIPELINE
from arborag.flows.stage import snapshot_files


def test_runners_build_and_publish_a_small_tree(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("Cinderella lost her glass slipper at the ball. The prince kept it.")
    (src / "b.txt").write_text("The pumpkin became a coach. At midnight it was a pumpkin again.")
    ctx = StageContext(Corpus(tmp_path / "c").ensure(), ArboragConfig(), "run-xyz")
    embedder = ctx.resources["embedder"] = FakeEmbedder()

    docs = run_documents(ctx, sorted(str(p) for p in src.iterdir()))
    assert docs["documents"] == 2 and docs["errors"] == 0 and docs.counts()["added"] == 2
    seg = run_chunks(ctx, "sentence")
    leaves = load_leaves(ctx)
    assert seg["chunks"] == leaves.num_rows > 0

    key = build_key(leaves, ctx.config, "code-v1")
    assert key != build_key(leaves, ctx.config, "code-v2")  # the code fingerprint is part of the key
    out = run_leaf_vectors(ctx, key)
    ids, vectors = read_vectors_file(Path(out["path"]))
    assert ids.equals(leaves.column("chunk_id")) and vectors.shape == (leaves.num_rows, FakeEmbedder.dim)
    assert ctx.counters.embedded_texts == leaves.num_rows == sum(len(c) for c in embedder.calls)

    tree = run_tree(ctx, key)  # a handful of leaves: no level above them, nothing summarized
    assert tree["nodes"] == leaves.num_rows and ctx.counters.summaries == 0
    assert tree.counts()["levels"] == {0: leaves.num_rows} and "tree" not in ctx.counters.stages  # the pipeline records it
    assert run_vectors(ctx, key)["rows"] == leaves.num_rows
    assert run_sparse(ctx, key)["count"] == leaves.num_rows
    assert run_links(ctx, key)["links"] == 0  # two documents that name nothing of each other
    assert run_publish(ctx, key, snapshot_files(TREE_PIPELINE))["snapshot"] == snapshot_id_for(key)

    published = ctx.corpus.published_dir()
    nodes = ctx.corpus.read_snapshot("nodes")
    assert set(nodes.column("created_by_run").to_pylist()) == {"run-xyz"}
    info = json.loads((published / "info.json").read_text())
    assert info["run_id"] == "run-xyz" and info["build_key"] == key and info["counts"] == {"nodes": leaves.num_rows, "levels": {"0": leaves.num_rows}}
    # what the tree's numbers came from besides inputs and config: library versions and the CPU
    import numpy

    env = info["environment"]
    assert env["packages"]["numpy"] == numpy.__version__ and env["packages"]["umap-learn"] is not None
    assert env["cpu"] and env["machine"] and isinstance(env["cpu_flags"], list)
    assert not ctx.staging_dir(key).exists()  # staging is removed once published
    assert estimate_cost(leaves, ctx.config) == []  # too few leaves for a summary level


def test_level_counts_and_tree_counts(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    levels = pa.table({"level": pa.array([0, 0, 0, 1, 1, 2, 0] + [1] * 9, pa.int32())})
    assert level_counts(levels) == {0: 4, 1: 11, 2: 1}
    pq.write_table(levels, tmp_path / "nodes.parquet")
    # keys sort as strings, as info.json always had them
    assert tree_counts(tmp_path / "nodes.parquet") == {"nodes": 16, "levels": {"0": 4, "1": 11, "2": 1}}
