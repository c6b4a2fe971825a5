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
