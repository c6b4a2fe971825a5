"""A build killed with SIGKILL in the middle of embedding keeps what it had embedded.

A real build (:func:`arborag.flows.build.run_build`, in a subprocess) runs over a folder whose
documents segment into more than 1,000 leaves. The test watches the corpus's embedding cache
and kills the build once two slices' shards are there (the model is encoding the next ones).
The next build over the same folder runs to completion: by its own counters (the ``embed``
stage's ``computed`` in the runs table) it embeds only leaves the cache lacked, no text is cached
twice, and the killed build had encoded at most one slice more than it left in the cache. The
published snapshot holds every leaf.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from helpers.reliability import HOTPOT_CORPUS, PYTHON, REPO, cli_env, kill_tree, read_runs, wait_for, write_hotpot_docs

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

MIN_LEAVES = 1000
N_DOCS = 150  # HotpotQA paragraphs: ~1,300 leaves of at most 24 tokens

#: Short leaves and a one-level tree with short summaries keep the build small; the embed stage
#: is the real one.
BUILD_ENV = {
    "ARBORAG_SEGMENT__SENTENCE_MAX_TOKENS": "24",
    "ARBORAG_CLUSTER__MAX_LEVELS": "1",
    "ARBORAG_SUMMARIZE__MAX_TOKENS": "40",
}

# The build, with every group of texts the model finishes counted on stdout (the model's own
# progress callback, passed through): what the killed build had encoded when it died.
BUILD = r"""
import json, sys
from arborag.config import load_config
from arborag.embed.model import Embedder
from arborag.flows.build import run_build
from arborag.tasks.embedding.cached import FLUSH_TEXTS

encode = Embedder.embed
def counted_embed(self, texts, *, progress=None, prefix_chars=None):
    def tell(n):
        print("ENCODED", n, flush=True)
        if progress is not None:
            progress(n)
    return encode(self, texts, progress=tell, prefix_chars=prefix_chars)
Embedder.embed = counted_embed

print("FLUSH", FLUSH_TEXTS, flush=True)
out = run_build([sys.argv[1]], sys.argv[2], load_config(), use_prefect=False, progress=False)
print("BUILD-SUMMARY " + json.dumps({k: out.get(k) for k in ("snapshot", "calls", "status")}, default=str), flush=True)
"""


def _write_synthetic_docs(folder: Path, n: int) -> None:
    """``n`` documents of distinct synthetic sentences (when the HotpotQA corpus is absent)."""
    words = "river city bridge archive harbour council market tower garden station library museum".split()
    folder.mkdir(parents=True, exist_ok=True)
    for d in range(n):
        sentences = [f"Record {d}.{s} names the " + " ".join(words[(d * 7 + s * k) % len(words)] for k in range(1, 9)) + "."
                     for s in range(10)]
        (folder / f"doc{d:04d}.txt").write_text(f"Document {d}\n\n" + " ".join(sentences) + "\n", encoding="utf-8")


def _cache_shards(corpus: Path) -> list[Path]:
    return sorted((corpus / "cache" / "embeddings").glob("emb-*.parquet"))


def _cached_texts(corpus: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in _cache_shards(corpus))


def _cache_duplicates(corpus: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.concat_tables([pq.read_table(s, columns=["model_id", "text_hash"]) for s in _cache_shards(corpus)])
    keys = list(zip(t.column("model_id").to_pylist(), t.column("text_hash").to_pylist(), strict=True))
    return len(keys) - len(set(keys))


def _build(src: Path, corpus: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-c", BUILD, str(src), str(corpus)], env=env, cwd=str(REPO),
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def test_build_killed_mid_embedding_re_embeds_at_most_the_slice_in_flight(tmp_path: Path, record_property) -> None:
    src, corpus = tmp_path / "src", tmp_path / "corpus"
    if HOTPOT_CORPUS.is_file():
        write_hotpot_docs(src, N_DOCS)
    else:
        _write_synthetic_docs(src, N_DOCS)
    env = cli_env(**BUILD_ENV)

    killed_log = tmp_path / "killed.log"
    proc = _build(src, corpus, env, killed_log)
    try:
        assert wait_for(lambda: len(_cache_shards(corpus)) >= 2, timeout=900, interval=0.01, proc=proc), \
            f"no second slice reached the cache before the build ended:\n{killed_log.read_text()[-3000:]}"
    finally:
        kill_tree(proc)
    assert proc.returncode == -9, killed_log.read_text()[-3000:]  # killed, not finished
    assert not (corpus / "manifest.json").exists()  # nothing was published
    killed_out = killed_log.read_text()
    flush = int(killed_out.split("FLUSH ", 1)[1].split()[0])
    encoded_before_kill = sum(int(line.split()[1]) for line in killed_out.splitlines() if line.startswith("ENCODED "))
    kept = _cached_texts(corpus)  # every one a leaf: the tree's summaries come after the leaves
    staged_leaf_vectors = list((corpus / "staging").glob("*/leaf_vectors.parquet"))
    assert not staged_leaf_vectors and kept >= 2 * flush, \
        f"the kill did not land in the middle of embedding the leaves: {kept} texts cached, staged {staged_leaf_vectors}"

    final_log = tmp_path / "final.log"
    final = _build(src, corpus, env, final_log)
    try:
        final.wait(timeout=1200)
    finally:
        kill_tree(final)
    final_out = final_log.read_text()
    assert final.returncode == 0, final_out[-3000:]
    summary = json.loads(final_out.split("BUILD-SUMMARY ", 1)[1])
    run = read_runs(corpus)[-1]
    leaves, re_embedded = run["counts"]["embed"]["leaves"], run["counts"]["embed"]["computed"]
    record_property("embed_kill", json.dumps({"leaves": leaves, "kept": kept, "encoded_before_kill": encoded_before_kill,
                                              "re_embedded": re_embedded, "flush": flush}))
    print(f"\nRELIABILITY embed kill: leaves={leaves} kept={kept} encoded_before_kill={encoded_before_kill} "
          f"re_embedded={re_embedded} calls={summary['calls']}")

    assert leaves >= MIN_LEAVES
    assert kept < leaves  # the kill landed before the last slice
    # what the killed build wrote is not embedded again: the next one embeds only leaves the cache
    # lacked (fewer when two leaves have the same text), and no text is in the cache twice
    assert re_embedded <= leaves - kept
    assert _cache_duplicates(corpus) == 0
    assert _cached_texts(corpus) == kept + summary["calls"]["embedded_texts"]
    # encoded twice: at most the slice in flight (encoded, not yet written) when the kill landed
    assert encoded_before_kill - kept <= flush
    assert summary["calls"]["embedded_texts"] >= re_embedded  # plus the tree's summaries
    # the published tree is complete
    assert summary["status"] == "ok" and run["status"] == "ok"
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert manifest["snapshot"] == summary["snapshot"]
    snapshot = corpus / "snapshots" / manifest["snapshot"]
    info = json.loads((snapshot / "info.json").read_text())
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    nodes = pq.read_table(snapshot / "nodes.parquet", columns=["level", "text"])
    levels = nodes.column("level")
    assert pc.sum(pc.equal(levels, 0)).as_py() == leaves  # every leaf is in the tree
    assert pc.sum(pc.greater(levels, 0)).as_py() > 0  # and summaries above them
    assert info["counts"]["nodes"] == nodes.num_rows and info["counts"]["levels"]["0"] == leaves
    assert pc.min(pc.utf8_length(nodes.column("text"))).as_py() > 0
