"""The eval flow (arborag.flows.evaluate) end to end on a fake build + FakeIndex (no models, no Prefect unless marked slow).

The stage functions it orchestrates are tested in tests/tasks/test_eval_*.py; the test doubles
live in tests/helpers/eval.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers.eval import FakeBuilds, FakeOpener, write_hotpot_data

from arborag.config import ArboragConfig
from arborag.flows.evaluate import EvalOptions, evaluate
from arborag.storage.schemas import RESULTS
from arborag.tasks.evaluation.plan import SYSTEM_NAMES


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    return write_hotpot_data(tmp_path)


def test_options_reject_unknown_names(tmp_path: Path) -> None:
    from arborag.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown system"):
        EvalOptions(dataset="hotpotqa", out_dir=tmp_path, systems=("dense",))
    with pytest.raises(ConfigError, match="budgets"):
        EvalOptions(dataset="hotpotqa", out_dir=tmp_path, budgets=(0,))



def test_evaluate_end_to_end_on_fakes(data_dir: Path, tmp_path: Path) -> None:
    builds, opener = FakeBuilds(), FakeOpener()
    out = tmp_path / "ev"
    opts = EvalOptions(dataset="hotpotqa", out_dir=out, data_dir=data_dir, budgets=(12, 40), strategies=("sentence", "dds"), progress=False)
    result = evaluate(opts, ArboragConfig(), use_prefect=False, builder=builds, opener=opener)

    assert len(builds.calls) == 2 and {s for _, s in builds.calls} == {"sentence", "dds"}
    results = pq.read_table(out / "results.parquet")
    assert results.schema == RESULTS
    # every system on the first strategy (plug-in modes' options such as preset= go to the fake too), flat + collapsed on dds
    assert results.num_rows == 3 * len(SYSTEM_NAMES) * 2 + 3 * 2 * 2 == result["rows"]
    assert not result.get("failures")
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
        # the answering step (arborag.llm.answering) asks for a cited answer as JSON
        server.script("Lilu is what kind", reply(json.dumps({"supported": True, "answer": "A spirit [1].", "short": "spirit", "citations": [1]})))
        server.script("Which river", reply(json.dumps({"supported": True, "answer": "The Seine [1].", "short": "The Seine.", "citations": [1]})))
        server.script("Mount Fuji", reply(json.dumps({"supported": False, "answer": "The passages do not say.", "short": "", "citations": []})))
        cfg = ArboragConfig().with_overrides(
            summarize={"base_url": server.base_url, "llm_model": "fake-model", "api_key_env": "ARBORAG_TEST_EVAL_KEY", "retries": 0}
        )
        opts = EvalOptions(dataset="hotpotqa", out_dir=tmp_path / "ev", data_dir=data_dir, budgets=(40,), strategies=("sentence",),
                           systems=("flat",), answer=True, progress=False)
        evaluate(opts, cfg, use_prefect=False, builder=FakeBuilds(), opener=FakeOpener())
        prompts = [r.body["messages"][-1]["content"] for r in server.requests]
    assert len(prompts) == 3 and all("Context passages:" in p and "Question:" in p for p in prompts)
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
