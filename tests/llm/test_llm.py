"""arborag/llm: the LLM client and its call cache against a local fake OpenAI server (tests/fake_llm_server.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_llm_server import slow
from helpers.llm import FAST, KEY_ENV, api_key, server  # noqa: F401 (fixtures)

from arborag.errors import ConfigError, LLMError
from arborag.llm import LLMCache, LLMClient



def test_retries_exhausted_raise_llm_error_with_reason(server):
    server.script("hello", slow(2.0))
    client = LLMClient(model="fake-model", base_url=server.base_url, api_key_env=KEY_ENV, timeout_s=0.2, retries=1, **FAST)
    with pytest.raises(LLMError) as info:
        client.complete([{"role": "user", "content": "hello"}], max_tokens=5)
    assert info.value.model == "fake-model"
    assert info.value.reason == "timeout after 0.2s (2 attempts)"


def test_openai_itself_without_a_key_is_a_config_error(monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    client = LLMClient(model="gpt-4o-mini", base_url=None, api_key_env=KEY_ENV, **FAST)
    with pytest.raises(ConfigError, match=KEY_ENV):
        client.complete([{"role": "user", "content": "hi"}], max_tokens=5)
    assert client.counters()["llm_requests"] == 0


def test_cache_reads_all_shards_and_skips_a_torn_line(tmp_path):
    good = {"key": "k1", "text": "one", "prompt_tokens": 3, "completion_tokens": 1}
    (tmp_path / "calls-old.jsonl").write_text(json.dumps(good) + "\n" + '{"key": "k2", "te', encoding="utf-8")
    cache = LLMCache(tmp_path, shard_id="new", flush_every=1)
    assert cache.get("k1")["text"] == "one" and cache.get("k2") is None
    cache.put("k3", {"text": "three"})
    assert json.loads((tmp_path / "calls-new.jsonl").read_text(encoding="utf-8"))["text"] == "three"
    assert len(LLMCache(tmp_path)) == 2


def test_import_does_no_work():
    code = "import sys, arborag.llm, arborag.tasks.summarize.llm; print('openai' in sys.modules, 'tokenizers' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2]
    )
    assert out.stdout.split() == ["False", "False"]


def test_cache_appends_and_a_torn_line_stays_alone(tmp_path):
    cache = LLMCache(tmp_path, shard_id="mine", flush_every=1)
    cache.put("k1", {"text": "one"})
    shard = tmp_path / "calls-mine.jsonl"
    with open(shard, "a", encoding="utf-8") as fh:
        fh.write('{"key": "k2", "te')  # a writer that died mid-line
    again = LLMCache(tmp_path, shard_id="mine", flush_every=1)
    again.put("k3", {"text": "three"})
    lines = shard.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {"key": "k1", "text": "one"} and json.loads(lines[-1]) == {"key": "k3", "text": "three"}
    reread = LLMCache(tmp_path)
    assert len(reread) == 2 and reread.get("k2") is None and reread.get("k3")["text"] == "three"
