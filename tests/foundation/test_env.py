"""arborag/env.py: the one offline-environment function."""

from __future__ import annotations

import pytest

from arborag.env import OFFLINE_ENV, offline_env


def test_offline_env_sets_defaults_and_keeps_what_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OFFLINE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_LOGGING_LEVEL", "DEBUG")
    offline_env()
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"
    assert os.environ["DO_NOT_TRACK"] == "1" and os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert os.environ["PREFECT_LOGGING_LEVEL"] == "DEBUG"  # the environment wins
    assert set(OFFLINE_ENV) >= {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"}


def test_numeric_environment_reads_the_installed_versions_and_the_cpu() -> None:
    """What a tree's numbers come from (recorded in info.json): the versions read from the folder
    names on sys.path are importlib.metadata's, a name not installed is None, the CPU is named."""
    from importlib.metadata import PackageNotFoundError, version

    from arborag.env import NUMERIC_PACKAGES, _installed_versions, numeric_environment

    def meta(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    env = numeric_environment()
    assert env["packages"] == {n: meta(n) for n in NUMERIC_PACKAGES}
    assert env["packages"]["numpy"] is not None and env["packages"]["scikit-learn"] is not None
    assert _installed_versions(("numpy", "no-such-package-arborag")) == {"numpy": meta("numpy"), "no-such-package-arborag": None}
    assert env["cpu"] and env["machine"] and env["python"].count(".") == 2
