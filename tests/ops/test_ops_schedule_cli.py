"""`arborag schedule` and deploy/prefect.yaml without a server: durations, the deployments built,
Prefect's own prefect.yaml loader, and a clear error when there is no Prefect server.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from arborag.cli.schedule import parse_duration, schedule_deployments
from arborag.errors import ConfigError
from helpers.ops import no_server_env
from helpers.reliability import REPO, cli, cli_env

PREFECT_YAML = REPO / "deploy" / "prefect.yaml"


@pytest.mark.parametrize(("text", "seconds"), [("15m", 900), ("30s", 30), ("1h30m", 5400), ("2d", 172800), ("300", 300), ("0.5", 0.5), ("1w", 604800)])
def test_ops_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "fast", "15 minutes", "0", "-5", "5x", "0m"])
def test_ops_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_duration(text)


def test_ops_schedule_deployments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    deps = schedule_deployments("corpus", ["docs", "s3://bucket/x", "notes/*.md"], update_every=timedelta(minutes=15),
                                rebuild_cron="0 3 * * 0", config_path="arborag.yaml", suffix="-x")
    by_name = {d.name: d for d in deps}
    assert set(by_name) == {"update-x", "rebuild-x"}
    upd, reb = by_name["update-x"], by_name["rebuild-x"]
    assert (upd.flow_name, reb.flow_name) == ("arborag-update", "arborag-build")
    assert upd.entrypoint == "arborag.flows.update.update" and reb.entrypoint == "arborag.flows.build.build"
    params = {"corpus_dir": str(tmp_path / "corpus"), "sources": [str(tmp_path / "docs"), "s3://bucket/x", "notes/*.md"],
              "config_path": str(tmp_path / "arborag.yaml")}
    assert reb.parameters == params and upd.parameters == {**params, "prune": True}
    assert upd.schedules[0].schedule.interval == timedelta(minutes=15)
    assert reb.schedules[0].schedule.cron == "0 3 * * 0"
    assert upd.work_pool_name is None and reb.work_pool_name is None
    only = schedule_deployments("c", ["docs"], update_every=None, rebuild_cron="0 3 * * 0")
    assert [d.name for d in only] == ["rebuild"]
    with pytest.raises(ConfigError, match="nothing to schedule"):
        schedule_deployments("c", ["docs"], update_every=None, rebuild_cron=None)
    with pytest.raises(ConfigError, match="invalid --rebuild-cron"):
        schedule_deployments("c", ["docs"], update_every=None, rebuild_cron="every sunday")


def test_ops_prefect_yaml_loads_with_prefects_own_loader() -> None:
    from prefect.cli.deploy._config import _load_deploy_configs_and_actions
    from prefect.cli.deploy._models import PrefectYamlModel
    from prefect.flows import load_flow_from_entrypoint
    from rich.console import Console

    raw = yaml.safe_load(PREFECT_YAML.read_text())
    model = PrefectYamlModel.model_validate(raw)  # raises on an invalid file (the CLI only warns)
    console = Console(record=True, width=200)
    configs, actions = _load_deploy_configs_and_actions(PREFECT_YAML, console=console)
    assert console.export_text().strip() == ""  # no warnings, nothing skipped
    assert {c["name"] for c in configs} == {"rebuild", "update"} and actions["build"] == [] and actions["push"] == []
    by_name = {d.name: d for d in model.deployments}
    reb, upd = by_name["rebuild"], by_name["update"]
    assert reb.entrypoint == "flows/build.py:build" and upd.entrypoint == "flows/update.py:update"
    assert reb.schedules[0].cron == "0 3 * * 0" and upd.schedules[0].interval == timedelta(minutes=15)
    # the anchors: one parameter block and one work pool shared by both
    assert {k: upd.parameters[k] for k in reb.parameters} == reb.parameters and upd.parameters["prune"] is True
    assert reb.work_pool == upd.work_pool and reb.work_pool.name == "arborag-process"
    assert "definitions" in raw and set(raw["definitions"]) >= {"parameters", "schedules", "work_pool"}
    text = PREFECT_YAML.read_text().lower()
    assert not any(word in text for word in ("api_key:", "password:", "token:", "secret:"))
    # each entrypoint loads with Prefect's loader (from the checkout, as a worker would) and takes its parameters
    import os

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        for dep, flow_name in ((reb, "arborag-build"), (upd, "arborag-update")):
            flow = load_flow_from_entrypoint(dep.entrypoint)
            assert flow.name == flow_name
            flow.validate_parameters(dep.parameters)
    finally:
        os.chdir(cwd)


def test_ops_schedule_without_a_server_says_how_to_start_one(tmp_path: Path) -> None:
    env = cli_env(**no_server_env())
    proc = cli("schedule", str(tmp_path), "--corpus", str(tmp_path / "c"), "--update-every", "1m", env=env, timeout=300)
    assert proc.returncode == 1, proc.output
    assert "Prefect server is not reachable" in proc.stderr and "prefect server start" in proc.stderr, proc.output
    bad = cli("schedule", str(tmp_path), "--corpus", str(tmp_path / "c"), "--update-every", "soon", env=env, timeout=300)
    assert bad.returncode == 1 and "cannot read the duration 'soon'" in bad.stderr, bad.output
