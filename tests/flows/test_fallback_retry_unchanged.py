"""An LLM that keeps failing for the same clusters: every build asks it again for them, and none
publishes a copy of the snapshot (the retry's tree is the published one's content).

The FAKE LLM server fails every prompt holding the needle, in every build. One summary level.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer, error
from helpers.llm import KEY_ENV

pytestmark = pytest.mark.slow

NEEDLE = "Cinderella"


def test_a_retry_that_fails_again_asks_again_and_publishes_no_copy(tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.config import load_config
    from arborag.flows.build import run_build

    corpus = tmp_path / "corpus"
    monkeypatch.setenv(KEY_ENV, "sk-fake")
    with FakeLLMServer(model="fake-model") as srv:
        srv.script(NEEDLE, error(500, message="scripted outage"))
        cfg = load_config(overrides={"summarize": {"backend": "openai", "base_url": srv.base_url, "llm_model": "fake-model",
                                                   "api_key_env": KEY_ENV, "retries": 0}, "cluster": {"max_levels": 1}})
        first = run_build([str(examples_dir / "corpus")], corpus, cfg, use_prefect=False, progress=False)
        assert first["tree"]["fallbacks"] > 0
        snap = first["snapshot"]
        for _ in range(2):
            asked = len(srv.completions())
            out = run_build([], corpus, cfg, use_prefect=False, progress=False)
            retried = [r for r in srv.completions()[asked:] if NEEDLE in r.last_message]
            assert retried  # the failed clusters are asked again, every build
            assert out["retry_of"]["snapshot"] == snap and out["snapshot"] == snap
            assert out["publish"] == {"snapshot": snap, "unchanged": True}  # the same fallbacks: nothing published
        snapshots = [p.name for p in (corpus / "snapshots").iterdir() if p.is_dir()]
        assert snapshots == [snap]
        assert json.loads((corpus / "manifest.json").read_text())["snapshot"] == snap
