"""LLM faults: a chaotic endpoint (30% 500 / 429 + Retry-After / timeouts, 5% garbage) and a dead one.

With the chaos endpoint the build completes; failed calls are retried, and a summary whose
call still fails is written by the extractive fallback with ``summary_status =
fallback:<reason>`` — failure text never becomes a summary. A dead endpoint stops the build
with an error naming the URL and the fix, and publishes nothing.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers.reliability import HOTPOT_CORPUS, ChaosLLMServer, cli, cli_env, read_runs, write_hotpot_docs

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.shared_data]

N_DOCS = 40


@pytest.fixture(scope="module")
def chaos_build(tmp_path_factory):
    if not HOTPOT_CORPUS.is_file():
        pytest.skip(f"needs {HOTPOT_CORPUS}")
    from arborag.config import load_config
    from arborag.flows.build import run_build

    base = tmp_path_factory.mktemp("llm")
    src, corpus = base / "src", base / "corpus"
    write_hotpot_docs(src, N_DOCS, start=300)
    with ChaosLLMServer(timeout_delay_s=2.5) as server:
        cfg = load_config(overrides={"summarize": {
            "backend": "openai", "base_url": server.base_url, "llm_model": "chaos-model",
            "timeout_s": 1.0, "retries": 3, "concurrency": 4,
        }})
        out = run_build([src], corpus, cfg, use_prefect=False, progress=False)
        served = dict(server.counts)
        requests = len(server.completions())
    snap = corpus / "snapshots" / json.loads((corpus / "manifest.json").read_text())["snapshot"]
    nodes = pq.read_table(snap / "nodes.parquet").to_pylist()
    return {"out": out, "served": served, "requests": requests, "nodes": nodes, "corpus": corpus, "src": src}


def test_chaos_build_completes_with_retries(chaos_build) -> None:
    out, served = chaos_build["out"], chaos_build["served"]
    assert out["status"] == "ok", out
    failed_calls = served["500"] + served["429"] + served["timeout"]
    assert failed_calls >= 3 and served["garbage"] >= 1, served
    summaries = [n for n in chaos_build["nodes"] if n["level"] > 0]
    assert summaries, "no summary nodes"
    # every failed attempt but the garbage ones is retried: more requests than summaries asked for
    assert chaos_build["requests"] >= len(summaries) + failed_calls - served["garbage"], (chaos_build["requests"], served)
    runs = read_runs(chaos_build["corpus"])
    assert runs[-1]["status"] == "ok"
    print(f"\nRELIABILITY llm: served={served} requests={chaos_build['requests']} summaries={len(summaries)} "
          f"fallback={sum(1 for n in summaries if n['summary_status'] != 'ok')}")


def test_chaos_failures_recorded_per_summary(chaos_build) -> None:
    summaries = [n for n in chaos_build["nodes"] if n["level"] > 0]
    statuses = [n["summary_status"] for n in summaries]
    assert all(s == "ok" or (s.startswith("fallback:") and len(s) > len("fallback:")) for s in statuses), statuses
    assert any(s != "ok" for s in statuses) or chaos_build["served"]["garbage"] == 0, statuses
    for node in summaries:
        text = node["text"] or ""
        assert text.strip(), node
        for bad in ("chaos:", "scripted error", "GARBAGE", "http 500", "http 429", "Traceback", "timeout after"):
            assert bad not in text, f"failure text stored as a summary: {text[:200]!r}"
        if node["summary_status"] == "ok":
            assert text.startswith("fake summary of:"), text[:100]
        elif node["level"] == 1:  # extractive over leaves (higher levels extract from LLM summaries)
            assert not text.startswith("fake summary of:"), "a fallback summary holds an LLM reply"
    leaves = [n for n in chaos_build["nodes"] if n["level"] == 0]
    assert all(n["summary_status"] in (None, "leaf") for n in leaves)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_dead_endpoint_clear_error_nothing_published(chaos_build, tmp_path) -> None:
    corpus = chaos_build["corpus"]
    manifest = (corpus / "manifest.json").read_bytes()
    snapshots = sorted(p.name for p in (corpus / "snapshots").iterdir())
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    env = cli_env(ARBORAG_SUMMARIZE__BACKEND="openai", ARBORAG_LLM_BASE_URL=dead, ARBORAG_LLM_MODEL="dead-model",
                  ARBORAG_SUMMARIZE__RETRIES="1", ARBORAG_SUMMARIZE__TIMEOUT_S="2")
    run = cli("build", str(chaos_build["src"]), "--corpus", str(corpus), "--no-prefect", env=env, timeout=900)
    assert run.returncode == 1, run.output[-3000:]
    assert "Traceback" not in run.output, run.output[-3000:]
    err = " ".join(run.stderr.split())
    assert dead in err, err
    assert "ARBORAG_LLM_BASE_URL" in err or "summarize.base_url" in err, err
    assert (corpus / "manifest.json").read_bytes() == manifest
    assert sorted(p.name for p in (corpus / "snapshots").iterdir()) == snapshots, "something was published half-done"
    assert read_runs(corpus)[-1]["status"] == "failed"
