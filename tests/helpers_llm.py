"""Shared settings of the LLM tests (client and summarizer) against tests/fake_llm_server.py."""

from __future__ import annotations

KEY_ENV = "ARBORAG_TEST_LLM_KEY"
SECRET = "sk-test-TOPSECRET-0123456789abcdef"
FAST = {"backoff_s": 0.001, "backoff_max_s": 0.01}  # backoff delays made tiny
