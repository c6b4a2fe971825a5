"""`arborag query`: options fall back to the config (arborag.yaml, ARBORAG_QUERY__*), the command
line wins; over a small hand-made corpus (tests/helpers/query.py) with an embedded sparse index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.query import publish_snapshot
from typer.testing import CliRunner

from arborag.cli import app
from arborag.config import SparseConfig
from arborag.storage.corpus import Corpus

runner = CliRunner()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    c = Corpus(tmp_path_factory.mktemp("q") / "corpus").ensure()
    publish_snapshot(c, "snap-q", sparse=SparseConfig(), info={"sparse_backend": "embedded"})
    return c.root


def query(corpus: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = runner.invoke(app, ["query", "text", "--corpus", str(corpus), *args], env=env)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_defaults_come_from_the_config(corpus: Path) -> None:
    out = query(corpus, "--mode", "sparse")
    assert "(budget 2000)" in out and "mode sparse" in out


def test_environment_sets_budget_and_mode(corpus: Path) -> None:
    out = query(corpus, env={"ARBORAG_QUERY__BUDGET": "300", "ARBORAG_QUERY__MODE": "sparse"})
    assert "(budget 300)" in out and "mode sparse" in out


def test_config_file_sets_them_and_the_command_line_wins(corpus: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "arborag.yaml"
    cfg.write_text("query:\n  mode: sparse\n  budget: 100\n")
    out = query(corpus, "--config", str(cfg))
    assert "(budget 100)" in out and "mode sparse" in out
    hits = json.loads(runner.invoke(app, ["query", "text", "-c", str(corpus), "--config", str(cfg), "--json"]).output)
    assert 0 < sum(h["n_tokens"] for h in hits) <= 100
    out = query(corpus, "--config", str(cfg), "--budget", "250", env={"ARBORAG_QUERY__BUDGET": "300"})
    assert "(budget 250)" in out


@pytest.mark.skipif(shutil.which("arborag") is None, reason="the arborag console script is not installed")
def test_console_script_reports_the_env_budget(corpus: Path) -> None:
    env = {**os.environ, "ARBORAG_QUERY__BUDGET": "300", "COLUMNS": "200"}
    done = subprocess.run(["arborag", "query", "text of a", "--mode", "sparse", "--corpus", str(corpus)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert "(budget 300)" in " ".join(done.stdout.split())


@pytest.mark.parametrize("command", ["query", "ask"])
def test_levels_must_be_whole_numbers(corpus: Path, command: str) -> None:
    result = runner.invoke(app, [command, "text", "--corpus", str(corpus), "--levels", "0,top"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    out = " ".join(result.output.split())
    assert "--levels" in out and "comma-separated whole numbers" in out


def test_levels_restrict_the_search(corpus: Path) -> None:
    every = json.loads(runner.invoke(app, ["query", "text", "-c", str(corpus), "--mode", "sparse", "--json"]).output)
    assert {h["level"] for h in every} - {0}, "without --levels the summaries are searched too"
    hits = json.loads(runner.invoke(app, ["query", "text", "-c", str(corpus), "--mode", "sparse", "--levels", "0", "--json"]).output)
    assert hits and {h["level"] for h in hits} == {0}
