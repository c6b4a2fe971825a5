"""The LLM as the ``level`` searchers see it: one call per step, recorded in the trace, never raising.

:class:`StepLLM` wraps any :class:`~arborag.llm.types.ChatLLM` (an :class:`~arborag.llm.LLMClient`
or a test fake). Each :meth:`StepLLM.ask` fills a versioned prompt from
:mod:`arborag.llm.prompts`, parses the reply strictly with :func:`arborag.llm.structured.parse_reply`
(repair, then a plain-text reading) and records an :class:`~arborag.query.level.trace.LLMCall`
(tokens, seconds, the raw reply, what went wrong). It returns ``None`` when the call fails after
the client's retries (timeouts, 5xx), when the reply cannot be parsed, or when the endpoint is
unreachable — then :attr:`StepLLM.down` is set and every later step is skipped (the offline plan
takes over). The caller decides the fallback of each step.

The client itself comes from :func:`arborag.llm.configured.llm_from_config` (the endpoint of
``summarize.*``, i.e. ``ARBORAG_LLM_BASE_URL`` / ``ARBORAG_LLM_MODEL``); with none configured
``level`` runs its offline plan.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from pydantic import AliasChoices, Field, field_validator

from arborag.errors import BackendUnavailable, ConfigError, LLMError
from arborag.llm.structured import StructuredReply, clean_items, numbered_lines, parse_reply
from arborag.query.level.trace import LevelTrace, LLMCall

if TYPE_CHECKING:
    from arborag.llm.prompts import Prompt
    from arborag.llm.types import ChatLLM

__all__ = ["DenseFeedback", "Passage", "SparseFeedback", "StepLLM", "Supplement", "TextReply"]

T = TypeVar("T", bound=StructuredReply)


class _Feedback(StructuredReply):
    """A searcher's verdict on its hits: ``{"sufficient": true}``, or false with what to change;
    a plain "yes"/"true" reply reads as sufficient."""

    sufficient: bool = Field(validation_alias=AliasChoices("sufficient", "enough", "answerable"))

    @classmethod
    def from_text(cls, text: str) -> Self | None:
        low = text.strip().lower()
        if low.startswith(("yes", "true")):
            return cls(sufficient=True)
        return None


class SparseFeedback(_Feedback):
    """``{"sufficient": false, "action": "extend" | "filter" | "emphasize", "keywords": [...]}``."""

    action: Literal["extend", "filter", "emphasize", "none"] = "none"
    keywords: list[str] = Field(default_factory=list, validation_alias=AliasChoices("keywords", "terms", "words"))

    @field_validator("action", mode="before")
    @classmethod
    def _action(cls, v: Any) -> Any:
        word = str(v or "none").strip().lower()
        return {"add": "extend", "expand": "extend", "exclude": "filter", "boost": "emphasize"}.get(word, word)

    @field_validator("keywords", mode="before")
    @classmethod
    def _words(cls, v: Any) -> Any:
        return clean_items([v] if isinstance(v, str) else list(v or []))


class Passage(StructuredReply):
    """``{"passage": "..."}`` (HyDE)."""

    passage: str = Field(validation_alias=AliasChoices("passage", "text", "query", "answer"))

    @field_validator("passage")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        v = " ".join(v.split())
        if not v:
            raise ValueError("empty passage")
        return v

    @classmethod
    def from_text(cls, text: str) -> Passage | None:
        text = " ".join(text.replace("`", " ").split())
        return cls(passage=text) if len(text.split()) >= 4 and "{" not in text else None


class DenseFeedback(_Feedback):
    """``{"sufficient": false, "passage": "..."}``."""

    passage: str = Field("", validation_alias=AliasChoices("passage", "text", "query"))


class Supplement(StructuredReply):
    """``{"sufficient": false, "reason": "...", "questions": [...]}`` — the high-level verdict."""

    sufficient: bool = Field(validation_alias=AliasChoices("sufficient", "enough", "answerable", "verdict"))
    reason: str = ""
    questions: list[str] = Field(default_factory=list, validation_alias=AliasChoices("questions", "sub_questions", "new_questions"))

    @field_validator("sufficient", mode="before")
    @classmethod
    def _yes_no(cls, v: Any) -> Any:
        if isinstance(v, str):
            return v.strip().lower() in ("yes", "true", "sufficient", "enough")
        return v

    @field_validator("questions", mode="before")
    @classmethod
    def _clean(cls, v: Any) -> Any:
        return clean_items([v] if isinstance(v, str) else list(v or []))

    @classmethod
    def from_text(cls, text: str) -> Supplement | None:
        low = text.strip().lower()
        if low.startswith(("yes", "true")):
            return cls(sufficient=True, reason=text.strip()[:300])
        if low.startswith(("no", "false")):
            return cls(sufficient=False, reason=text.strip()[:300], questions=numbered_lines(text))
        return None


class TextReply(StructuredReply):
    """A free-text reply (the per-sub-question summary)."""

    text: str

    @classmethod
    def from_text(cls, text: str) -> TextReply | None:
        text = " ".join(text.split())
        return cls(text=text) if text else None


class StepLLM:
    """One query's view of the LLM: every call recorded in ``trace.calls``; failures return None."""

    def __init__(self, llm: ChatLLM | None, trace: LevelTrace) -> None:
        self.llm = llm
        self.trace = trace
        self.down = llm is None  # no LLM, or the endpoint stopped answering
        self.down_reason = ""

    def ask(self, step: str, prompt: Prompt, schema: type[T], **fields: Any) -> T | None:
        """The parsed reply of ``prompt`` filled with ``fields``, or None (recorded why)."""
        if self.down or self.llm is None:
            return None
        call = LLMCall(step=step, prompt=prompt.tag)
        self.trace.calls.append(call)
        t0 = time.perf_counter()
        try:
            comp = self.llm.complete(prompt.messages(**fields), max_tokens=prompt.max_tokens, temperature=0.0,
                                     prompt_tag=prompt.tag)
        except (BackendUnavailable, ConfigError) as exc:
            call.seconds = time.perf_counter() - t0
            call.error = f"LLM unreachable ({exc}); the rest of this query runs the offline plan"
            self.down = True
            self.down_reason = call.error
            return None
        except LLMError as exc:
            call.seconds = time.perf_counter() - t0
            call.error = f"call failed: {exc.reason}; fell back"
            return None
        call.seconds = time.perf_counter() - t0
        call.cached = comp.cached
        if not comp.cached:
            call.tokens_in, call.tokens_out = comp.prompt_tokens, comp.completion_tokens
        call.reply = comp.text if len(comp.text) <= 500 else comp.text[:499] + "…"
        if schema is TextReply:
            parsed = TextReply.from_text(comp.text)
            if parsed is None:
                call.error = "empty reply; fell back"
            return parsed  # type: ignore[return-value]
        try:
            result = parse_reply(comp.text, schema)
        except Exception as exc:  # noqa: BLE001 - a reply the repair path chokes on is malformed, never a crash
            call.error = f"malformed reply (unparseable: {type(exc).__name__}); fell back"
            return None
        if result.value is None:
            call.error = f"malformed reply ({result.status}); fell back"
        elif result.status != "ok":
            call.error = None if result.status.startswith("repaired") else result.status
        return result.value
