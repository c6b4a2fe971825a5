"""Whether a Prefect server is configured, read without importing Prefect (arborag.env.prefect_api_url)."""

from __future__ import annotations

import pytest

from arborag.env import prefect_api_url


@pytest.fixture()
def clean(tmp_path, monkeypatch):
    for name in ("PREFECT_API_URL", "PREFECT_PROFILES_PATH", "PREFECT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_nothing_configured_is_none(clean):
    assert prefect_api_url() is None


def test_environment_variable_wins(clean, monkeypatch):
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert prefect_api_url() == "http://127.0.0.1:4200/api"


def test_active_profile_in_prefect_home(clean, monkeypatch):
    home = clean / "home"
    home.mkdir()
    (home / "profiles.toml").write_text(
        'active = "local"\n[profiles.local]\nPREFECT_API_URL = "http://10.0.0.5:4200/api"\n[profiles.ephemeral]\n', encoding="utf-8")
    assert prefect_api_url() == "http://10.0.0.5:4200/api"
    monkeypatch.setenv("PREFECT_PROFILE", "ephemeral")  # a profile without a server
    assert prefect_api_url() is None


def test_prefect_toml_in_the_working_folder(clean):
    (clean / "prefect.toml").write_text('[api]\nurl = "http://127.0.0.1:4300/api"\n', encoding="utf-8")
    assert prefect_api_url() == "http://127.0.0.1:4300/api"


def test_unreadable_profiles_file_is_ignored(clean, monkeypatch):
    bad = clean / "bad.toml"
    bad.write_text("this is [not toml", encoding="utf-8")
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(bad))
    assert prefect_api_url() is None


def test_cli_runs_directly_unless_a_server_is_configured(clean, monkeypatch):
    from arborag.cli.common import use_prefect

    assert use_prefect(None) is False
    assert use_prefect(True) is True
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert use_prefect(None) is True
    assert use_prefect(False) is False
