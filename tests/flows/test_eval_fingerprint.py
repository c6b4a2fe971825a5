"""Cached eval retrieval is keyed by the code of every mode, including modes loaded by name."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from arborag.config import ArboragConfig
from arborag.errors import ConfigError
from arborag.flows import eval_stages
from arborag.flows.eval_stages import EVAL_RETRIEVE, EvalOptions, stage_code
from arborag.flows.fingerprints import module_closure
from arborag.query import modes
from arborag.tasks.evaluation.plan import SYSTEMS


def test_retrieval_code_holds_every_mode_the_registry_loads_by_name():
    closure = module_closure(eval_stages.retrieve_code())
    for module in modes.mode_modules():
        assert module in closure, module
    # the plug-in modes' own imports follow (rerank's helpers, level's searchers)
    assert {"arborag.query.rse", "arborag.query.level.searchers", "arborag.query.fusion"} <= set(closure)


def test_editing_a_mode_loaded_by_name_changes_the_retrieval_fingerprint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # a mode module no static import reaches: only the registry names it
    src = tmp_path / "arborag_test_fake_mode_fp.py"  # a test double, named so
    src.write_text("def search(index, text, **kw):\n    return []\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    before = stage_code(EVAL_RETRIEVE)
    monkeypatch.setitem(modes.MODES, "fake", modes.ModeSpec("fake", "arborag_test_fake_mode_fp:search", "a test double"))
    registered = stage_code(EVAL_RETRIEVE)
    assert registered != before  # registering a mode changes the retrieval code
    src.write_text("def search(index, text, **kw):\n    return ['edited']\n", encoding="utf-8")
    assert stage_code(EVAL_RETRIEVE) != registered  # and so does editing its source
    sys.modules.pop("arborag_test_fake_mode_fp", None)


def test_editing_a_real_plugin_mode_changes_the_retrieval_fingerprint(monkeypatch: pytest.MonkeyPatch):
    """rerank is reached only through the registry: a changed source is a changed key."""
    import arborag.flows.stage as stage

    rerank = Path(importlib.util.find_spec("arborag.query.rerank").origin)  # type: ignore[union-attr,arg-type]
    before = stage_code(EVAL_RETRIEVE)
    real = Path.read_text

    def edited(self: Path, *args, **kwargs) -> str:  # the source as if someone had edited rerank.py
        text = real(self, *args, **kwargs)
        return text + "\n# edited\n" if self == rerank else text

    monkeypatch.setattr(Path, "read_text", edited)
    stage._imports.cache_clear()
    assert stage_code(EVAL_RETRIEVE) != before


def test_every_eval_system_names_a_registered_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assert {s.mode for s in SYSTEMS.values()} <= set(modes.MODES)
    monkeypatch.delitem(modes.MODES, "rerank")
    with pytest.raises(ConfigError, match="rerank"):
        EvalOptions(dataset="x", out_dir=tmp_path, systems=("flat", "rerank"))
    assert ArboragConfig().query.mode in modes.MODE_NAMES  # the configured default is registered too
