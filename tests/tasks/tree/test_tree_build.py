"""The RAPTOR tree (tasks/tree/build.py) with a fake bag-of-words embedder and real summaries."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest

from arborag.config import ClusterConfig, SummarizeConfig, TreeConfig
from arborag.errors import SchemaError
from arborag.hashing import hash_text, short_id
from arborag.tokenizer import get_tokenizer
from arborag.storage.schemas import CHUNKS, EDGES, NODES
from arborag.tasks.summarize.extractive import EXTRACTIVE_VERSION
from arborag.tasks.summarize.extractive import ExtractiveSummarizer
from arborag.tasks.summarize.types import SummaryResult
from arborag.tasks.tree.build import build_tree, leaf_embed_texts

CFG = ClusterConfig(max_clusters=12)
CORPUS = TreeConfig(scope="corpus")
PER_DOC = TreeConfig(scope="document")

TOPICS = {
    "space": "rocket orbit moon astronaut launch planet mars gravity satellite nasa capsule crater",
    "cooking": "flour oven butter sugar recipe bake dough knead yeast bread pastry whisk",
    "football": "goal striker referee penalty league match keeper pitch coach midfield tackle score",
    "music": "guitar chord melody drum concert tempo violin orchestra singer rhythm piano album",
}


class FakeEmbedder:
    """Bag-of-words random projection: texts sharing words get similar vectors. Deterministic."""

    dim = 48

    def __init__(self) -> None:
        self.calls = 0

    def _word(self, w: str) -> np.ndarray:
        return np.random.default_rng(int(hash_text(w)[:8], 16)).standard_normal(self.dim)

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            v = sum((self._word(w) for w in re.findall(r"\w+", t.lower())), np.zeros(self.dim))
            n = np.linalg.norm(v)
            out[i] = v / n if n else np.eye(self.dim)[0]
        return out


class FakeFailingSummarizer:
    """A summarizer whose backend always raises (like an unreachable LLM)."""

    name = "fake-llm/v0"

    def summarize_many(self, clusters, *, progress=None):
        raise RuntimeError("HTTP 500: upstream exploded")


class FakeEmptySummarizer:
    """Returns an empty text for every cluster."""

    name = "fake-empty/v0"

    def summarize_many(self, clusters, *, progress=None):
        return [SummaryResult("", "ok", 10, 0) for _ in clusters]


def make_chunks(docs: list[tuple[str, list[str]]], headers: bool = False) -> pa.Table:
    tok = get_tokenizer()
    rows = []
    for doc_id, texts in docs:
        pos = 0
        for i, t in enumerate(texts):
            rows.append(
                {
                    "chunk_id": short_id(doc_id, "test", pos, pos + len(t)),
                    "doc_id": doc_id,
                    "section_id": None,
                    "ordinal": i,
                    "start_char": pos,
                    "end_char": pos + len(t),
                    "n_tokens": tok.count(t),
                    "text": t,
                    "header": f"Document {doc_id}" if headers else "",
                    "strategy": "test",
                }
            )
            pos += len(t) + 1
    return pa.Table.from_pylist(rows, schema=CHUNKS)


def topic_docs(n_docs: int = 4, per_doc: int = 18, seed: int = 0) -> list[tuple[str, list[str]]]:
    """Each document mixes two topics; each chunk is a few sentences from one topic."""
    rng = np.random.default_rng(seed)
    names = sorted(TOPICS)
    docs = []
    for d in range(n_docs):
        topics = [names[d % 4], names[(d + 1) % 4]]
        texts = []
        for i in range(per_doc):
            words = TOPICS[topics[i % 2]].split()
            sents = [
                " ".join(rng.choice(words, size=6)).capitalize() + f" number {d}{i}{s}."
                for s in range(3)
            ]
            texts.append(" ".join(sents))
        docs.append((f"doc{d}", texts))
    return docs


def build(chunks: pa.Table, *, summarizer=None, cfg=CFG, tree_cfg=CORPUS, embedder=None, bar=None):
    embedder = embedder or FakeEmbedder()
    vectors = embedder(leaf_embed_texts(chunks))
    return build_tree(
        chunks,
        vectors,
        embed=embedder,
        summarizer=summarizer or ExtractiveSummarizer(SummarizeConfig(max_tokens=60)),
        cfg=cfg,
        tree_cfg=tree_cfg,
        run_id="run-test",
        bar=bar,
    )


class RecordingBar:
    """A stand-in for arborag.progress.progress_bar that records what a person would see."""

    def __init__(self) -> None:
        self.shown: list[tuple[str, int | None, int]] = []  # (description, total, steps advanced)

    def __call__(self, description: str, total: int | None):
        import contextlib

        entry = [description, total, 0]

        @contextlib.contextmanager
        def ctx():
            def advance(n: int = 1) -> None:
                entry[2] += n

            yield advance
            self.shown.append((entry[0], entry[1], entry[2]))

        return ctx()


def test_each_level_shows_its_clustering_and_the_tree_is_the_same_with_a_bar(corpus_tree):
    chunks, plain = corpus_tree
    bar = RecordingBar()
    res = build(chunks, bar=bar)
    assert res.nodes.equals(plain.nodes) and res.edges.equals(plain.edges)
    clustered = [st for st in res.stats if st.cluster_s is not None]
    assert [d.split(" (")[0] for d, _, _ in bar.shown] == [f"cluster level {st.level}" for st in clustered]
    first = bar.shown[0]
    assert f"({chunks.num_rows:,} nodes" in first[0] and first[1] is None and first[2] == 1  # one tree: a clock, one step
    per_doc = RecordingBar()
    docs = make_chunks(topic_docs(n_docs=3, per_doc=16))
    build(docs, tree_cfg=PER_DOC, bar=per_doc)
    assert per_doc.shown[0][1] == 3 == per_doc.shown[0][2] and "in 3 trees" in per_doc.shown[0][0]  # a step per document tree


def test_layout_compiled_reads_the_numba_cache_folder(tmp_path, monkeypatch):
    from arborag.tasks.cluster.umap_import import layout_compiled

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not layout_compiled()  # an empty cache: the next fit compiles
    (tmp_path / "umap_0123").mkdir()
    (tmp_path / "umap_0123" / "layouts._optimize_layout_euclidean_single_epoch-63.py311.nbi").write_bytes(b"")
    assert layout_compiled()
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    assert layout_compiled()  # no folder known: nothing to say


@pytest.fixture(scope="module")
def corpus_tree():
    chunks = make_chunks(topic_docs())
    return chunks, build(chunks)


# -- tiny inputs ----------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_tiny_corpora_are_just_leaves(n):
    chunks = make_chunks([("d", [f"Sentence number {i} about rockets." for i in range(n)])], headers=True)
    res = build(chunks)
    assert res.nodes.schema == NODES and res.edges.schema == EDGES
    assert res.nodes.num_rows == n and res.edges.num_rows == 0
    assert res.vectors.shape == (n, FakeEmbedder.dim)
    assert set(res.nodes.column("level").to_pylist()) == {0}
    assert res.nodes.column("node_id").to_pylist() == chunks.column("chunk_id").to_pylist()
    assert res.nodes.column("summary_status").to_pylist() == ["leaf"] * n
    # node text is the chunk text, not the header
    assert res.nodes.column("text").to_pylist() == chunks.column("text").to_pylist()
    assert [s.level for s in res.stats] == [0]


def test_empty_leaves():
    res = build(make_chunks([]))
    assert res.nodes.num_rows == 0 and res.edges.num_rows == 0 and res.vectors.shape[0] == 0


# -- the corpus tree ------------------------------------------------------------------------
def test_corpus_tree_structure(corpus_tree):
    chunks, res = corpus_tree
    nodes = res.nodes.to_pylist()
    edges = res.edges.to_pylist()
    assert res.nodes.schema == NODES and res.edges.schema == EDGES
    assert res.vectors.shape == (len(nodes), FakeEmbedder.dim)
    by_id = {n["node_id"]: n for n in nodes}
    assert len(by_id) == len(nodes)
    levels = sorted({n["level"] for n in nodes})
    assert levels[0] == 0 and len(levels) >= 2
    leaves = [n for n in nodes if n["level"] == 0]
    assert len(leaves) == chunks.num_rows
    # every node below the top level has a parent one level up; every edge is parent level - 1
    top = max(levels)
    child_of = {}
    for e in edges:
        assert by_id[e["parent_id"]]["level"] == e["level"] == by_id[e["child_id"]]["level"] + 1
        assert 0.0 < e["probability"] <= 1.0 + 1e-6
        child_of.setdefault(e["parent_id"], []).append(e["child_id"])
    has_parent = {e["child_id"] for e in edges}
    for n in nodes:
        if n["level"] < top:
            assert n["node_id"] in has_parent
    # summary nodes: ids, provenance, text within the budget, recorded summarizer
    for n in nodes:
        if n["level"] == 0:
            assert n["summarizer"] == "leaf" and n["summary_of"] is None
            continue
        kids = child_of[n["node_id"]]
        assert n["node_id"] == short_id("node", n["level"], f"{EXTRACTIVE_VERSION}/60", sorted(kids))
        assert n["doc_ids"] == sorted({d for k in kids for d in by_id[k]["doc_ids"]})
        assert n["summarizer"] == f"{EXTRACTIVE_VERSION}/60" and n["summary_status"] == "ok"
        assert 0 < n["n_tokens"] <= 60 and n["n_tokens"] == get_tokenizer().count(n["text"])
        assert n["created_by_run"] == "run-test"
    # cross-document themes meet: some summary draws on more than one document
    assert any(len(n["doc_ids"]) > 1 for n in nodes if n["level"] > 0)
    # the level shrinks and stats are reported per level
    counts = [sum(1 for n in nodes if n["level"] == lv) for lv in levels]
    assert all(a > b for a, b in zip(counts, counts[1:]))
    for st in res.stats[1:]:
        assert {"cluster_s", "summarize_s", "embed_s", "n_clusters", "n_nodes"} <= set(st.counts())
        # the global fit (the serial part benchmarks/cold_path.py bounds a build with) is inside the level's clustering
        assert 0.0 <= st.global_umap_s <= st.global_s <= st.cluster_s and st.global_umap_s <= st.umap_s
        assert 0.0 <= st.global_layout_s <= st.global_umap_s


def test_vectors_are_aligned_with_nodes(corpus_tree):
    chunks, res = corpus_tree
    fake = FakeEmbedder()
    texts = res.nodes.column("text").to_pylist()
    levels = res.nodes.column("level").to_pylist()
    ids = res.nodes.column("node_id").to_pylist()
    leaf_text = dict(zip(chunks.column("chunk_id").to_pylist(), leaf_embed_texts(chunks)))
    expect = fake([leaf_text[i] if lv == 0 else t for i, t, lv in zip(ids, texts, levels)])
    np.testing.assert_allclose(res.vectors, expect, atol=1e-6)


def test_deterministic_tables(corpus_tree):
    chunks, res = corpus_tree
    again = build(chunks)
    assert again.nodes.equals(res.nodes)
    assert again.edges.equals(res.edges)
    np.testing.assert_array_equal(again.vectors, res.vectors)
    # row order of the input does not matter either
    shuffled = chunks.take(np.random.default_rng(1).permutation(chunks.num_rows))
    third = build(shuffled)
    assert third.nodes.equals(res.nodes) and third.edges.equals(res.edges)


def test_max_levels_is_respected():
    chunks = make_chunks(topic_docs())
    res = build(chunks, cfg=ClusterConfig(max_clusters=12, max_levels=1))
    assert max(res.nodes.column("level").to_pylist()) == 1


# -- per-document scope ---------------------------------------------------------------------
def test_per_document_scope():
    docs = topic_docs(n_docs=3, per_doc=16) + [("tiny", ["Just one little chunk about bread."])]
    chunks = make_chunks(docs)
    res = build(chunks, tree_cfg=PER_DOC)
    nodes = res.nodes.to_pylist()
    by_id = {n["node_id"]: n for n in nodes}
    summaries = [n for n in nodes if n["level"] > 0]
    assert summaries
    for n in summaries:
        assert len(n["doc_ids"]) == 1
    for e in res.edges.to_pylist():
        assert by_id[e["parent_id"]]["doc_ids"] == by_id[e["child_id"]]["doc_ids"]
    assert {n["doc_ids"][0] for n in summaries} == {"doc0", "doc1", "doc2"}  # "tiny" stays a leaf
    assert sum(1 for n in nodes if n["level"] == 0) == chunks.num_rows
    assert build(chunks, tree_cfg=PER_DOC).nodes.equals(res.nodes)


# -- guards -----------------------------------------------------------------------------------
@pytest.mark.parametrize("identical", [True, False])
def test_giant_cluster_of_near_identical_long_chunks_terminates_within_the_token_limit(identical):
    base = " ".join(TOPICS["space"].split() * 25)  # ~300 tokens
    # 40 * ~300 = ~12,000 tokens in one topic; identical texts give identical vectors, which
    # UMAP/GMM cannot split at all: the guard must cut them into contiguous groups
    texts = [f"{base} variant." if identical else f"{base} variant {i}." for i in range(40)]
    chunks = make_chunks([("big", texts)])
    res = build(chunks)
    n_tok = dict(zip(res.nodes.column("node_id").to_pylist(), res.nodes.column("n_tokens").to_pylist()))
    kids: dict[str, list[str]] = {}
    for e in res.edges.to_pylist():
        if e["level"] == 1:
            kids.setdefault(e["parent_id"], []).append(e["child_id"])
    assert len(kids) >= 4  # 12k tokens cannot fit fewer than 4 clusters of <= 3,500
    for children in kids.values():
        assert len(children) == 1 or sum(n_tok[c] for c in children) <= CFG.max_cluster_tokens
    assert {c for cs in kids.values() for c in cs} == set(chunks.column("chunk_id").to_pylist())
    if identical:
        assert res.stats[1].cut >= 1
        # contiguous: every level-1 node covers a run of consecutive chunks of the document
        ordinal = dict(zip(chunks.column("chunk_id").to_pylist(), chunks.column("ordinal").to_pylist()))
        for children in kids.values():
            ords = sorted(ordinal[c] for c in children)
            assert ords == list(range(ords[0], ords[0] + len(ords)))


def test_failed_summaries_fall_back_and_never_store_the_exception():
    chunks = make_chunks(topic_docs(n_docs=2, per_doc=14))
    res = build(chunks, summarizer=FakeFailingSummarizer())
    summaries = [n for n in res.nodes.to_pylist() if n["level"] > 0]
    assert summaries
    for n in summaries:
        assert n["summary_status"] == "fallback:RuntimeError"
        assert n["summarizer"].startswith("fake-llm/v0 (fallback: extractive")  # never recorded as the LLM's output
        assert n["text"] and "exploded" not in n["text"] and "Error" not in n["text"]
    res2 = build(chunks, summarizer=FakeEmptySummarizer())
    for n in res2.nodes.to_pylist():
        if n["level"] > 0:
            assert n["summary_status"] == "fallback:empty" and n["text"]


def test_bad_inputs():
    chunks = make_chunks(topic_docs(n_docs=1, per_doc=3))
    with pytest.raises(ValueError):
        build_tree(chunks, np.zeros((2, 8), np.float32), embed=FakeEmbedder(), summarizer=ExtractiveSummarizer(),
                   cfg=CFG, tree_cfg=CORPUS, run_id="r")
    dup = pa.concat_tables([chunks, chunks.slice(0, 1)])
    with pytest.raises(SchemaError):
        build_tree(dup, np.zeros((4, 8), np.float32), embed=FakeEmbedder(), summarizer=ExtractiveSummarizer(),
                   cfg=CFG, tree_cfg=CORPUS, run_id="r")


def test_leaf_embed_texts_prepends_the_header():
    chunks = make_chunks([("d", ["Body text."])], headers=True)
    assert leaf_embed_texts(chunks) == ["Document d\n\nBody text."]
    assert leaf_embed_texts(make_chunks([("d", ["Body text."])])) == ["Body text."]


class FakeUnreachableSummarizer:
    """A summarizer whose endpoint cannot be reached at all (every call would fail)."""

    name = "fake-llm/unreachable"

    def summarize_many(self, clusters, *, progress=None):
        from arborag.errors import BackendUnavailable

        raise BackendUnavailable("LLM endpoint", "http://127.0.0.1:9", "is the server running?")


def test_unreachable_llm_fails_the_build_instead_of_silently_falling_back():
    from arborag.errors import BackendUnavailable

    chunks = make_chunks(topic_docs())
    with pytest.raises(BackendUnavailable, match="127.0.0.1:9"):
        build(chunks, summarizer=FakeUnreachableSummarizer())
