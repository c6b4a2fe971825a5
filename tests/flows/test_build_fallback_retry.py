"""A build whose LLM fails for some clusters says so, records it, and the next build with a working
endpoint asks the LLM again for exactly those clusters (the FAKE LLM server counts the requests).

The fallback is not sealed as final: the fallback summaries carry their own summarizer name and
node ids, the snapshot's ``info.json`` counts them, and the build key does not treat that snapshot
as the settled result of its inputs. One summary level (``cluster.max_levels = 1``) so that no
other cluster's input depends on a retried summary and the count is exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fake_llm_server import FakeLLMServer, error
from helpers.llm import KEY_ENV
from typer.testing import CliRunner

pytestmark = pytest.mark.slow

NEEDLE = "Cinderella"  # prompts (clusters) whose text holds it fail in the first build


def _env(srv: FakeLLMServer) -> dict[str, str]:
    return {"ARBORAG_SUMMARIZE__BACKEND": "openai", "ARBORAG_LLM_BASE_URL": srv.base_url, "ARBORAG_LLM_MODEL": "fake-model",
            "ARBORAG_SUMMARIZE__API_KEY_ENV": KEY_ENV, KEY_ENV: "sk-fake", "ARBORAG_SUMMARIZE__RETRIES": "0",
            "ARBORAG_CLUSTER__MAX_LEVELS": "1"}


def _summary_prompts(requests: list) -> list:
    """The summary requests (a build also asks the LLM for node titles: tasks/summarize/labels.py; a failed
    title keeps the keyword title and is no summary fallback)."""
    return [r for r in requests if not r.last_message.startswith("Write a title of at most eight words")]


def _published(corpus: Path) -> tuple[str, list[dict]]:
    snap = json.loads((corpus / "manifest.json").read_text())["snapshot"]
    return snap, pq.read_table(corpus / "snapshots" / snap / "nodes.parquet").to_pylist()


def test_fallbacks_are_said_recorded_and_retried_exactly(tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.cli.app import app
    from arborag.config import load_config
    from arborag.flows.build import run_build

    corpus = tmp_path / "corpus"
    with FakeLLMServer(model="fake-model") as srv:
        # 1. some clusters fail (HTTP 500, no retries): the build completes, says so, records it
        srv.script(NEEDLE, error(500, message="scripted outage"))
        result = CliRunner().invoke(app, ["build", str(examples_dir / "corpus"), "--corpus", str(corpus), "--no-prefect"], env=_env(srv))
        assert result.exit_code == 0, result.output
        first_all = srv.completions()
        first = _summary_prompts(first_all)
        failed = {r.last_message for r in first if NEEDLE in r.last_message}
        answered = {r.last_message for r in first if NEEDLE not in r.last_message}
        assert failed and answered, (len(failed), len(answered))
        snap1, nodes1 = _published(corpus)
        fallbacks = [n for n in nodes1 if n["level"] > 0 and n["summary_status"].startswith("fallback")]
        assert len(fallbacks) == len(failed)
        out = " ".join(result.output.split())
        said = f"{len(failed)} cluster summar{'y' if len(failed) == 1 else 'ies'} fell back to extractive text"
        assert said in out and "http 500" in out, out
        assert "asks the LLM again for exactly these clusters" in out
        # a fallback is not recorded as the LLM's output
        llm_name = next(n["summarizer"] for n in nodes1 if n["summary_status"] == "ok" and n["level"] > 0)
        assert all(n["summarizer"] != llm_name and "(fallback: extractive" in n["summarizer"] for n in fallbacks)
        assert json.loads((corpus / "snapshots" / snap1 / "info.json").read_text())["fallbacks"] == len(failed)
        runs = pq.read_table(corpus / "tables" / "runs.parquet").to_pylist()
        tree = json.loads(runs[-1]["counts"])["tree"]
        assert tree["fallbacks"] == len(failed) and "http 500" in " ".join(tree["fallback_reasons"])

        # 2. the endpoint works again: exactly the failed clusters are asked again
        srv.clear_scripts()
        monkeypatch.setenv(KEY_ENV, "sk-fake")
        cfg = load_config(overrides={"summarize": {"backend": "openai", "base_url": srv.base_url, "llm_model": "fake-model",
                                                   "api_key_env": KEY_ENV, "retries": 0}, "cluster": {"max_levels": 1}})
        out2 = run_build([], corpus, cfg, use_prefect=False)
        second = {r.last_message for r in _summary_prompts(srv.completions()[len(first_all):])}
        assert second == failed, (len(second), len(failed))
        assert not out2["noop"] and out2["retry_of"] == {"snapshot": snap1, "fallbacks": len(failed)}
        snap2, nodes2 = _published(corpus)
        assert snap2 != snap1
        assert all(n["summary_status"] in ("leaf", "ok") for n in nodes2)
        kept = {n["node_id"] for n in nodes1 if n["level"] > 0 and n["summary_status"] == "ok"}
        assert kept <= {n["node_id"] for n in nodes2 if n["level"] > 0}
        assert not {n["node_id"] for n in fallbacks} & {n["node_id"] for n in nodes2}

        # 3. settled: the next build is a no-op and asks nothing
        n_before = len(srv.completions())
        out3 = run_build([], corpus, cfg, use_prefect=False)
        assert len(srv.completions()) == n_before
    assert out3["noop"] and out3["snapshot"] == snap2
