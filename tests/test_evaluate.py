"""The eval loop and report on a fake build + FakeIndex (no models, no Prefect unless marked slow).

``fake_run_build`` and ``FakeIndex`` are test doubles of ``arborag.flows.build.run_build`` and
``query.open_index(...)``: same signatures and return shapes, word-overlap "retrieval".
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arborag.config import ArboragConfig
from arborag.errors import QueryError
from arborag.hashing import hash_text, short_id
from arborag.flows.evaluate import (
    HITS,
    RESULTS,
    STRATEGY_PRESETS,
    EvalOptions,
    evaluate,
    plan_runs,
    run_queries,
    score_hits,
    strategy_config,
)
from arborag.storage.corpus import Corpus
from arborag.storage.schemas import DOCUMENTS, NODES, QUERIES

# --------------------------------------------------------------------------------------------
# A tiny HotpotQA-shaped data set
# --------------------------------------------------------------------------------------------
PARAGRAPHS = {
    "Alû": ["Alû is a demon of Akkadian mythology.", " It has no mouth and no limbs."],
    "Lilu (mythology)": ["Lilu is a masculine Akkadian spirit.", " Lilu is related to the wind."],
    "Paris": ["Paris is the capital of France.", " It lies on the Seine river."],
    "Seine": ["The Seine is a river in France.", " It flows through Paris to the English Channel."],
    "Mount Fuji": ["Mount Fuji is the highest mountain in Japan.", " It is an active volcano."],
    "Tokyo": ["Tokyo is the capital of Japan.", " It is near Mount Fuji."],
}
QUESTIONS = [
    {"_id": "q1", "question": "Lilu is what kind of Akkadian being?", "answer": "spirit", "type": "bridge",
     "supporting_facts": [["Alû", 0], ["Lilu (mythology)", 0]]},
    {"_id": "q2", "question": "Which river flows through the capital of France?", "answer": "The Seine", "type": "bridge",
     "supporting_facts": [["Paris", 0], ["Seine", 1]]},
    {"_id": "q3", "question": "Is Mount Fuji in Japan and near Tokyo?", "answer": "yes", "type": "comparison",
     "supporting_facts": [["Mount Fuji", 0], ["Tokyo", 1]]},
]


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data" / "hotpotqa"
    root.mkdir(parents=True)
    qs = [{**q, "level": "easy", "context": [[t, s] for t, s in PARAGRAPHS.items()]} for q in QUESTIONS]
    (root / "hotpotqa_train.json").write_text(json.dumps(qs), encoding="utf-8")
    (root / "hotpotqa_train_corpus.json").write_text(json.dumps(PARAGRAPHS), encoding="utf-8")
    return tmp_path / "data"


# --------------------------------------------------------------------------------------------
# Test doubles
# --------------------------------------------------------------------------------------------
def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class FakeBuilds:
    """A fake ``run_build``: ingests .txt files into ``documents``, publishes a snapshot whose
    nodes are one leaf per sentence plus one level-1 'summary' per two documents."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, sources: list[str], corpus_dir: str, config: ArboragConfig, *, progress: bool = True) -> dict[str, Any]:
        self.calls.append((corpus_dir, config.segment.strategy))
        corpus = Corpus(corpus_dir).ensure()
        files = sorted(p for s in sources for p in Path(s).glob("*.txt"))
        docs = []
        for p in files:
            text = p.read_text(encoding="utf-8")
            docs.append({"doc_id": hash_text(text), "uri": str(p), "title": text.splitlines()[0], "mime": "text/plain",
                         "n_chars": len(text), "text": text, "metadata": "{}", "ingested_at": None, "status": "ok", "error": None})
        corpus.write("documents", pa.Table.from_pylist(docs, schema=DOCUMENTS))
        nodes = []
        for d in docs:
            for sent in re.split(r"(?<=\.)\s+|\n", d["text"]):
                if sent.strip():
                    nodes.append({"node_id": short_id(d["doc_id"], sent), "level": 0, "text": sent.strip(), "n_tokens": len(_words(sent)),
                                  "doc_ids": [d["doc_id"]], "summary_of": None, "summarizer": "leaf", "summary_status": "leaf", "created_by_run": "fake"})
        for a, b in zip(docs[::2], docs[1::2]):
            text = a["text"].split(".")[0] + ". " + b["text"].split(".")[0] + "."
            nodes.append({"node_id": short_id("sum", a["doc_id"], b["doc_id"]), "level": 1, "text": text, "n_tokens": len(_words(text)),
                          "doc_ids": [a["doc_id"], b["doc_id"]], "summary_of": "c", "summarizer": "fake", "summary_status": "ok", "created_by_run": "fake"})
        snap = "snap-" + short_id([d["doc_id"] for d in docs], config.segment.strategy)
        partial = corpus.partial_dir(snap)
        pq.write_table(pa.Table.from_pylist(nodes, schema=NODES), partial / "nodes.parquet")
        corpus.publish(partial, snap, {"strategy": config.segment.strategy})
        return {"snapshot": snap, "status": "ok", "noop": False}


class FakeIndex:
    """A fake ``query.Index``: scores nodes by word overlap with the question."""

    def __init__(self, corpus_dir: str, *, config: ArboragConfig | None = None, broken_modes: tuple[str, ...] = ()) -> None:
        from arborag.query import Hit

        self.Hit = Hit
        nodes = pq.read_table(Corpus(corpus_dir).snapshot_table_path("nodes")).to_pylist()
        self.nodes = nodes
        self.broken_modes = broken_modes
        self.searches = 0

    def search(self, text: str, *, mode: str = "collapsed", budget: int | None = 2000, k: int = 5,
               levels: list[int] | None = None, doc_ids: list[str] | None = None) -> list[Any]:
        self.searches += 1
        if mode in self.broken_modes:
            raise QueryError(text, f"mode {mode} is broken in this fake")
        q = set(_words(text))
        cands = [n for n in self.nodes if levels is None or n["level"] in levels]
        if mode == "sparse":
            cands = [n for n in cands if n["level"] == 0]
        scored = sorted(((len(q & set(_words(n["text"]))) / (1 + len(_words(n["text"]))) ** 0.5, n) for n in cands),
                        key=lambda sn: (-sn[0], sn[1]["node_id"]))
        out, used = [], 0
        for score, n in scored:
            if score <= 0 or (budget is not None and used + n["n_tokens"] > budget):
                continue
            out.append(self.Hit(n["node_id"], n["level"], float(score), n["text"], tuple(n["doc_ids"]), n["n_tokens"]))
            used += n["n_tokens"]
        return out


class FakeOpener:
    def __init__(self) -> None:
        self.opened: list[str] = []

    def __call__(self, corpus_dir: str, *, config: ArboragConfig | None = None) -> FakeIndex:
        self.opened.append(str(corpus_dir))
        return FakeIndex(corpus_dir, config=config)


# --------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------
def test_plan_runs() -> None:
    runs = plan_runs(["sentence", "dds"], ["flat", "bm25", "collapsed", "traversal", "hybrid"])
    assert [r for r in runs if r[0] == "sentence"] == [("sentence", s) for s in ["flat", "bm25", "collapsed", "traversal", "hybrid"]]
    assert [r for r in runs if r[0] == "dds"] == [("dds", "flat"), ("dds", "collapsed")]
    # a strategy whose systems do not intersect the strategy systems gets the chosen systems
    assert plan_runs(["ffs", "rcs"], ["bm25"]) == [("ffs", "bm25"), ("rcs", "bm25")]


def test_strategy_presets_are_valid_configs() -> None:
    base = ArboragConfig()
    for name in STRATEGY_PRESETS:
        cfg = strategy_config(base, name)
        assert cfg.segment.strategy == name
    assert strategy_config(base, "ffs").segment.ffs_window == 100
    assert len({strategy_config(base, n).config_hash() for n in STRATEGY_PRESETS}) == len(STRATEGY_PRESETS)


def test_options_reject_unknown_names(tmp_path: Path) -> None:
    from arborag.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown system"):
        EvalOptions(dataset="hotpotqa", out_dir=tmp_path, systems=("dense",))
    with pytest.raises(ConfigError, match="budgets"):
        EvalOptions(dataset="hotpotqa", out_dir=tmp_path, budgets=(0,))


def test_run_queries_records_errors_and_latency(data_dir: Path, tmp_path: Path) -> None:
    from arborag.tasks.datasets import prepare_dataset

    prepared = prepare_dataset("hotpotqa", tmp_path / "ds", data_dir=data_dir)
    FakeBuilds()([str(prepared.corpus_dir)], str(tmp_path / "c"), ArboragConfig())
    index = FakeIndex(str(tmp_path / "c"), broken_modes=("hybrid",))
    hits = run_queries(index, prepared.queries(), "sentence", ["flat", "hybrid"], [10, 40], k=5)
    assert hits.schema == HITS
    assert hits.num_rows == 3 * 2 * 2 == index.searches
    rows = hits.to_pylist()
    assert all(r["error"] and r["node_ids"] == [] for r in rows if r["system"] == "hybrid")
    flat = [r for r in rows if r["system"] == "flat"]
    assert all(r["error"] is None and r["latency_ms"] >= 0 for r in flat)
    assert all(set(r["levels"]) <= {0} and sum(r["n_tokens"]) <= r["budget"] for r in flat)


class FakeVectorIndex(FakeIndex):
    """A FakeIndex that, like query.Index, embeds queries and accepts a precomputed vector."""

    def __init__(self, corpus_dir: str, **kw: Any) -> None:
        super().__init__(corpus_dir, **kw)
        self.embedded: list[int] = []
        self.vectors_seen = 0

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.embedded.append(len(texts))
        return [[float(len(t))] for t in texts]

    def search(self, text: str, *, vector: Any = None, **kw: Any) -> list[Any]:  # type: ignore[override]
        if vector is not None:
            assert vector == [float(len(text))]
            self.vectors_seen += 1
        return super().search(text, **kw)


def test_run_queries_embeds_each_question_once(data_dir: Path, tmp_path: Path) -> None:
    from arborag.tasks.datasets import prepare_dataset

    prepared = prepare_dataset("hotpotqa", tmp_path / "ds", data_dir=data_dir)
    FakeBuilds()([str(prepared.corpus_dir)], str(tmp_path / "c"), ArboragConfig())
    index = FakeVectorIndex(str(tmp_path / "c"))
    embed_ms: dict[str, float] = {}
    hits = run_queries(index, prepared.queries(), "sentence", ["flat", "bm25", "collapsed"], [10, 40], embed_ms=embed_ms)
    # warm-up + one timed call per question + one batch for the vectors
    assert index.embedded == [1, 1, 1, 1, 3]
    assert set(embed_ms) == {"q1", "q2", "q3"}
    assert index.vectors_seen == 3 * 2 * 2  # dense systems only; bm25 gets text alone
    assert hits.num_rows == 18
    # a second strategy reuses the timings and only batch-embeds
    index2 = FakeVectorIndex(str(tmp_path / "c"))
    run_queries(index2, prepared.queries(), "dds", ["flat"], [40], embed_ms=embed_ms)
    assert index2.embedded == [3]


def test_score_hits_by_hand() -> None:
    queries = pa.Table.from_pylist(
        [{"qid": "q", "question": "?", "answers": ["Seine"], "gold_ids": ["A", "B"], "gold_texts": ["a", "b: the Seine"], "type": "bridge"}],
        schema=QUERIES,
    )
    hits = pa.Table.from_pylist(
        [{"qid": "q", "strategy": "sentence", "system": "collapsed", "mode": "collapsed", "budget": 100, "latency_ms": 3.0,
          "node_ids": ["n1", "n2", "n3"], "levels": [1, 0, 0], "scores": [0.9, 0.8, 0.7], "n_tokens": [10, 5, 5],
          "doc_ids": [["dA", "dB"], ["dX"], ["dB"]], "texts": ["summary", "the Seine flows", "b text"], "error": None}],
        schema=HITS,
    )
    gold = {"sentence": {"A": frozenset({"dA"}), "B": frozenset({"dB"})}}
    res = score_hits(hits, queries, gold, dataset="t", match="doc").to_pylist()[0]
    assert res["answer_hit"] == 1.0
    # the summary descends from dA and dB but does not quote them: only the leaf at rank 3 counts
    assert res["recall_at_budget"] == 0.5 and res["full_support"] == 0.0
    assert res["mrr"] == pytest.approx(1 / 3)
    assert res["level_mix"] == pytest.approx(1 / 3)
    assert res["context_tokens"] == 20 and res["n_gold_resolved"] == 2
    assert res["f1"] is None


def test_evaluate_end_to_end_on_fakes(data_dir: Path, tmp_path: Path) -> None:
    builds, opener = FakeBuilds(), FakeOpener()
    out = tmp_path / "ev"
    opts = EvalOptions(dataset="hotpotqa", out_dir=out, data_dir=data_dir, budgets=(12, 40), strategies=("sentence", "dds"), progress=False)
    result = evaluate(opts, ArboragConfig(), use_prefect=False, builder=builds, opener=opener)

    assert len(builds.calls) == 2 and {s for _, s in builds.calls} == {"sentence", "dds"}
    results = pq.read_table(out / "results.parquet")
    assert results.schema == RESULTS
    assert results.num_rows == 3 * 5 * 2 + 3 * 2 * 2 == result["rows"]
    rows = results.to_pylist()
    by = {(r["qid"], r["strategy"], r["system"], r["budget"]): r for r in rows}
    # q2's answer "The Seine" is in the retrieved leaves; q3 is yes/no (not applicable)
    assert by[("q2", "sentence", "flat", 40)]["answer_hit"] == 1.0
    assert by[("q3", "sentence", "flat", 40)]["answer_hit"] is None
    assert by[("q2", "sentence", "flat", 40)]["recall_at_budget"] > 0
    assert by[("q1", "sentence", "flat", 40)]["n_gold_resolved"] == 2
    assert all(r["level_mix"] == 0.0 for r in rows if r["system"] in ("flat", "bm25") and r["n_hits"])
    assert any((r["level_mix"] or 0) > 0 for r in rows if r["system"] == "collapsed")

    summary = (out / "summary.md").read_text(encoding="utf-8")
    for needle in ("# arborag evaluation: hotpotqa", "Systems at budget 40", "By question type", "Strategy × system",
                   "Machine", "CPUs", "Config hash", "Seed", "flat", "Δ hit vs flat", "bridge (n=2)", "comparison (n=1)"):
        assert needle in summary, needle
    for png in ("hit_rate_vs_budget.png", "level_mix.png", "strategy_heatmap.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert run["questions"] == 3 and run["machine"]["cpu_count"]

    # rerun: builds and retrieval are reused, only scoring and the report run again
    n_opened = len(opener.opened)
    again = evaluate(opts, ArboragConfig(), use_prefect=False, builder=builds, opener=opener)
    assert len(builds.calls) == 2 and len(opener.opened) == n_opened
    assert pq.read_table(out / "results.parquet").drop(["latency_ms"]).equals(results.drop(["latency_ms"]))
    assert again["rows"] == result["rows"]

    # a changed config (another seed) rebuilds
    evaluate(opts, ArboragConfig().with_overrides(cluster={"seed": 7}), use_prefect=False, builder=builds, opener=opener)
    assert len(builds.calls) == 4


def test_answers_with_the_llm_client_against_a_fake_server(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_llm_server import FakeLLMServer, reply

    monkeypatch.setenv("ARBORAG_TEST_EVAL_KEY", "sk-test")
    with FakeLLMServer(model="fake-model") as server:
        server.script("Lilu is what kind", reply("spirit"))
        server.script("Which river", reply("The Seine."))
        server.script("Mount Fuji", reply("no"))
        cfg = ArboragConfig().with_overrides(
            summarize={"base_url": server.base_url, "llm_model": "fake-model", "api_key_env": "ARBORAG_TEST_EVAL_KEY", "retries": 0}
        )
        opts = EvalOptions(dataset="hotpotqa", out_dir=tmp_path / "ev", data_dir=data_dir, budgets=(40,), strategies=("sentence",),
                           systems=("flat",), answer=True, progress=False)
        evaluate(opts, cfg, use_prefect=False, builder=FakeBuilds(), opener=FakeOpener())
        prompts = [r.body["messages"][-1]["content"] for r in server.requests]
    assert len(prompts) == 3 and all("Context:" in p and "Question:" in p for p in prompts)
    rows = {r["qid"]: r for r in pq.read_table(tmp_path / "ev" / "results.parquet").to_pylist()}
    assert rows["q2"]["prediction"] == "The Seine." and rows["q2"]["em"] == 1.0 and rows["q2"]["f1"] == 1.0
    assert rows["q1"]["em"] == 1.0 and rows["q3"]["em"] == 0.0 and rows["q3"]["f1"] == 0.0
    assert rows["q2"]["rouge_l"] == 1.0 and 0 < rows["q2"]["bleu_1"] <= 1.0
    assert "Answer quality with the LLM" in (tmp_path / "ev" / "summary.md").read_text(encoding="utf-8")


def test_cli_help_shows_an_example() -> None:
    from typer.testing import CliRunner

    from arborag.cli import app

    res = CliRunner().invoke(app, ["eval", "--help"], terminal_width=200)
    assert res.exit_code == 0
    assert "arborag eval hotpotqa --out" in res.output
    for opt in ("--budgets", "--systems", "--strategies", "--limit"):
        assert opt in res.output


@pytest.mark.slow
def test_prefect_flow_caches_builds_and_retrieval(data_dir: Path, tmp_path: Path) -> None:
    builds, opener = FakeBuilds(), FakeOpener()
    opts = EvalOptions(dataset="hotpotqa", out_dir=tmp_path / "ev", data_dir=data_dir, budgets=(40,), strategies=("sentence",),
                       systems=("flat", "collapsed"), progress=False)
    evaluate(opts, ArboragConfig(), use_prefect=True, builder=builds, opener=opener)
    evaluate(opts, ArboragConfig(), use_prefect=True, builder=builds, opener=opener)
    assert len(builds.calls) == 1 and len(opener.opened) == 1
    run = json.loads((tmp_path / "ev" / "run.json").read_text(encoding="utf-8"))
    assert run["builds"]["sentence"]["noop"] is True and run["retrieval"]["sentence"]["cached"] is True
    assert "reused" in (tmp_path / "ev" / "summary.md").read_text(encoding="utf-8")
    # a lost corpus is rebuilt even though Prefect has a cache record for it
    import shutil

    shutil.rmtree(tmp_path / "ev" / "corpora" / "sentence" / "snapshots")
    (tmp_path / "ev" / "corpora" / "sentence" / "manifest.json").unlink()
    evaluate(opts, ArboragConfig(), use_prefect=True, builder=builds, opener=opener)
    assert len(builds.calls) == 2
