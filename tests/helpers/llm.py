"""Shared settings and fixtures of the LLM tests (client and summarizer) against tests/fake_llm_server.py.

Import the fixtures by name into a test module: ``from helpers.llm import api_key, server``.
"""

from __future__ import annotations

import pytest
from fake_llm_server import FakeLLMServer

KEY_ENV = "ARBORAG_TEST_LLM_KEY"
SECRET = "sk-test-TOPSECRET-0123456789abcdef"
FAST = {"backoff_s": 0.001, "backoff_max_s": 0.01}  # backoff delays made tiny


@pytest.fixture
def server():
    """A fake OpenAI-compatible server on 127.0.0.1 for one test."""
    with FakeLLMServer(model="fake-model") as srv:
        yield srv


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    """Every LLM test runs with SECRET in KEY_ENV (so leaks of the key can be checked)."""
    monkeypatch.setenv(KEY_ENV, SECRET)


class ScriptedFakeLLM:
    """Fake LLM completion function: answers from a script in call order (an Exception in the
    script is raised); records the prompts it was given."""

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, prompt: str, /, *, max_tokens: int) -> str:
        self.prompts.append(prompt)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class ScriptedFakeChat:
    """Fake chat LLM (the :class:`arborag.llm.types.ChatLLM` protocol, like ``LLMClient``):
    answers from a script in call order (an Exception in the script is raised; the last answer
    repeats when ``repeat_last``); records the messages and prompt tags it was given."""

    def __init__(self, *answers: str | Exception, model: str = "fake-chat", repeat_last: bool = False) -> None:
        self.answers = list(answers)
        self.model = model
        self.repeat_last = repeat_last
        self.calls: list[tuple[str | None, list[dict[str, str]]]] = []

    def complete(self, messages, *, max_tokens: int, temperature: float = 0.0, prompt_tag: str | None = None, **params):
        from arborag.llm.types import Completion

        self.calls.append((prompt_tag, [dict(m) for m in messages]))
        if not self.answers:
            raise AssertionError(f"ScriptedFakeChat: no scripted answer left for call {len(self.calls)} ({prompt_tag})")
        answer = self.answers[0] if self.repeat_last and len(self.answers) == 1 else self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        n_in = sum(len(str(m.get("content", "")).split()) for m in messages)
        return Completion(answer, n_in, len(answer.split()), False, True, f"fake-{len(self.calls)}")

    @property
    def tags(self) -> list[str | None]:
        return [t for t, _ in self.calls]
