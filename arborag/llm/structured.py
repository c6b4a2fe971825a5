"""Structured LLM replies, parsed strictly (pydantic), repaired when malformed, else a fallback.

Small models wrap JSON in code fences, talk before it, leave trailing commas, or stop
mid-object. A query must never crash on that. :func:`parse_reply` tries, in order:

1. the reply as strict JSON for the schema                              → status ``"ok"``
2. *repair*: strip code fences, take the first JSON object/array, drop trailing commas, close
   brackets a truncated reply left open, accept Python literals (``'x'``, ``True``); a bare list
   fills a schema's one list field                                        → ``"repaired"``
3. the schema's own reading of plain text (:meth:`StructuredReply.from_text`, e.g. numbered
   lines ``[1] ...`` for a list of sub-questions, yes/no for a verdict)   → ``"repaired:text"``
4. nothing parses                                                         → ``"invalid: ..."``

:func:`ask_structured` makes the call with a versioned :class:`~arborag.llm.prompts.Prompt`,
records tokens in a :class:`~arborag.llm.types.Usage`, and returns the ``fallback`` (status
``"fallback: <why>"``) when the call fails (timeouts and 5xx after the client's retries, an
unreachable endpoint) or the reply cannot be parsed. It never raises for those.

The schemas: :class:`QueryVariants`, :class:`SubQuestions`, :class:`Verdict`, :class:`Rewrite`,
:class:`CitedAnswer`.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from arborag.errors import BackendUnavailable, ConfigError, LLMError
from arborag.llm.types import Completion, Usage

if TYPE_CHECKING:
    from arborag.llm.prompts import Prompt
    from arborag.llm.types import ChatLLM

__all__ = [
    "CitedAnswer",
    "QueryVariants",
    "Rewrite",
    "Structured",
    "StructuredReply",
    "SubQuestions",
    "Verdict",
    "ask_structured",
    "clean_items",
    "extract_json",
    "numbered_lines",
    "parse_reply",
    "repair_json",
]

T = TypeVar("T", bound="StructuredReply")

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)(?:```|$)", re.DOTALL)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_LIST_LINE = re.compile(r"^\s*(?:\[\d+\]|\(\d+\)|\d+[.)]|[-*•])\s*(.+?)\s*$")


class StructuredReply(BaseModel):
    """Base of the reply schemas: unknown keys are ignored, values are validated strictly."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    @classmethod
    def from_text(cls, text: str) -> StructuredReply | None:
        """A reading of a plain-text (non-JSON) reply, or None. Subclasses override."""
        return None


def clean_items(items: list[Any]) -> list[str]:
    """``items`` as one-line strings (whitespace collapsed, surrounding quotes dropped), without
    empty ones and repeats, in their order."""
    out: list[str] = []
    for item in items:
        item = " ".join(str(item).split()).strip().strip('"').strip()
        if item and item not in out:
            out.append(item)
    return out


class QueryVariants(StructuredReply):
    """``{"variants": ["...", ...]}`` — alternative search queries for one question."""

    variants: list[str] = Field(validation_alias=AliasChoices("variants", "queries", "rewrites"))

    @field_validator("variants")
    @classmethod
    def _nonempty(cls, v: list[str]) -> list[str]:
        v = clean_items(v)
        if not v:
            raise ValueError("no variants")
        return v

    @classmethod
    def from_text(cls, text: str) -> QueryVariants | None:
        items = numbered_lines(text)
        return cls(variants=items) if items else None


class SubQuestions(StructuredReply):
    """``{"questions": ["...", ...]}`` — atomic sub-questions; an empty list is allowed (the
    question needs no decomposition)."""

    questions: list[str] = Field(validation_alias=AliasChoices("questions", "sub_questions", "subquestions"))

    @field_validator("questions")
    @classmethod
    def _clean(cls, v: list[str]) -> list[str]:
        return clean_items(v)

    @classmethod
    def from_text(cls, text: str) -> SubQuestions | None:
        items = numbered_lines(text)
        return cls(questions=items) if items else None


class Verdict(StructuredReply):
    """``{"sufficient": true, "reason": "..."}`` — whether what was found is enough."""

    sufficient: bool = Field(validation_alias=AliasChoices("sufficient", "enough", "verdict", "answerable"))
    reason: str = ""

    @field_validator("sufficient", mode="before")
    @classmethod
    def _yes_no(cls, v: Any) -> Any:
        if isinstance(v, str):
            word = v.strip().lower()
            if word in ("yes", "true", "sufficient", "enough"):
                return True
            if word in ("no", "false", "insufficient", "not enough"):
                return False
        return v

    @classmethod
    def from_text(cls, text: str) -> Verdict | None:
        m = re.match(r"\W*(yes|no|true|false)\b", text.strip(), re.IGNORECASE)
        if not m:
            return None
        return cls(sufficient=m.group(1).lower() in ("yes", "true"), reason=text.strip()[:300])


class Rewrite(StructuredReply):
    """``{"query": "..."}`` — one rewritten query (e.g. Lucene syntax, or a HyDE passage)."""

    query: str = Field(validation_alias=AliasChoices("query", "rewrite", "passage", "text"))

    @field_validator("query")
    @classmethod
    def _nonempty(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("empty query")
        return v

    @classmethod
    def from_text(cls, text: str) -> Rewrite | None:
        lines = [ln.strip().strip("`").strip() for ln in text.strip().splitlines() if ln.strip().strip("`").strip()]
        return cls(query=lines[0]) if lines else None


class CitedAnswer(StructuredReply):
    """``{"supported": true, "answer": "... [1] ...", "short": "...", "citations": [1]}`` — an
    answer citing numbered context passages (``short``: the answer in a few words, optional);
    ``supported`` false is a refusal."""

    supported: bool = True
    answer: str
    short: str = ""
    citations: list[int] = Field(default_factory=list)

    @field_validator("short", mode="before")
    @classmethod
    def _short(cls, v: Any) -> Any:
        return "" if v is None else v

    @field_validator("citations", mode="before")
    @classmethod
    def _ints(cls, v: Any) -> Any:
        if isinstance(v, list):
            out: list[int] = []
            for x in v:
                m = re.search(r"\d+", str(x))
                if m and int(m.group()) not in out:
                    out.append(int(m.group()))
            return out
        return v

    @classmethod
    def from_text(cls, text: str) -> CitedAnswer | None:
        text = text.strip()
        if not text:
            return None
        cites = [int(c) for c in dict.fromkeys(re.findall(r"\[(\d+)\]", text))]
        return cls(supported=bool(cites), answer=text, citations=cites)


# -- repair ----------------------------------------------------------------------------------


def numbered_lines(text: str) -> list[str]:
    """Items of a list written as lines ``[1] a``, ``1. a``, ``- a`` (other lines ignored)."""
    items = [m.group(1) for line in text.splitlines() if (m := _LIST_LINE.match(line))]
    return clean_items(items)


def _strip_fences(text: str) -> str:
    m = _FENCE.search(text)
    return m.group(1) if m else text


def extract_json(text: str) -> str | None:
    """The first JSON object or array in ``text`` (brackets matched outside strings); one a
    truncated reply left open is closed. None when there is no ``{`` or ``[``."""
    start = next((i for i, ch in enumerate(text) if ch in "{["), None)
    if start is None:
        return None
    stack: list[str] = []
    in_string = False
    escaped = False
    quote = ""
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                in_string = False
            continue
        if ch in "\"'":
            in_string, quote = True, ch
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack[-1] != ch:
                return text[start:i]  # unbalanced: give up at the mismatch
            stack.pop()
            if not stack:
                return text[start : i + 1]
    tail = text[start:].rstrip()
    if in_string:
        tail += quote
    tail = tail.rstrip().rstrip(",").rstrip(":")
    return tail + "".join(reversed(stack))


def repair_json(text: str) -> Any:
    """The JSON value found in ``text`` after the repairs above; raises ``ValueError`` if none."""
    body = extract_json(_strip_fences(text))
    if body is None:
        raise ValueError("no JSON object or array in the reply")
    body = _TRAILING_COMMA.sub(r"\1", body)
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        try:  # Python literals: single quotes, True/False/None
            return ast.literal_eval(body)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # e.g. {{}}: a set of dicts
            raise ValueError(f"not JSON after repair: {exc.msg} at {exc.pos}") from None


def _coerce(data: Any, schema: type[StructuredReply]) -> Any:
    """A bare list for a schema whose one required field is a list: wrap it."""
    if isinstance(data, list):
        required = [n for n, f in schema.model_fields.items() if f.is_required()]
        if len(required) == 1:
            return {required[0]: data}
    return data


@dataclass(frozen=True, slots=True)
class Structured(Generic[T]):
    """A parsed reply: ``value`` (None only from :func:`parse_reply` with nothing parseable),
    ``status`` (``ok`` / ``repaired`` / ``repaired:text`` / ``invalid: ...`` / ``fallback: ...``),
    the raw ``text`` and the call's :class:`Completion` (None when no call succeeded)."""

    value: T | None
    status: str
    text: str = ""
    completion: Completion | None = None

    @property
    def ok(self) -> bool:
        """The value came from the model (strictly or repaired), not from a fallback."""
        return self.value is not None and (self.status == "ok" or self.status.startswith("repaired"))


def parse_reply(text: str, schema: type[T]) -> Structured[T]:
    """Parse ``text`` into ``schema``: strict, then repaired, then read as text (module doc)."""
    try:
        return Structured(schema.model_validate_json(text.strip()), "ok", text)
    except (ValidationError, ValueError):
        pass
    error = ""
    try:
        data = repair_json(text)
        return Structured(schema.model_validate(_coerce(data, schema)), "repaired", text)
    except ValidationError as exc:
        error = f"schema: {exc.errors()[0].get('msg', 'invalid')}" if exc.errors() else "schema mismatch"
    except ValueError as exc:
        error = str(exc)
    try:
        value = schema.from_text(_strip_fences(text))
    except (ValidationError, ValueError):
        value = None
    if value is not None:
        return Structured(value, "repaired:text", text)  # type: ignore[arg-type]
    return Structured(None, f"invalid: {error}", text)


def ask_structured(
    llm: ChatLLM,
    prompt: Prompt,
    schema: type[T],
    *,
    fallback: T | None,
    usage: Usage | None = None,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    **fields: Any,
) -> Structured[T]:
    """Ask ``llm`` with ``prompt`` (filled with ``fields``) and parse the reply into ``schema``.

    Never raises for a failed call or a malformed reply: the result then holds ``fallback``
    with status ``"fallback: <why>"`` (and the reason is recorded in ``usage.events``).
    """
    usage = usage if usage is not None else Usage()
    try:
        comp = llm.complete(
            prompt.messages(**fields),
            max_tokens=max_tokens or prompt.max_tokens,
            temperature=temperature,
            prompt_tag=prompt.tag,
        )
    except (LLMError, BackendUnavailable, ConfigError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        usage.fail(f"call failed: {reason}", tag=prompt.tag)
        return Structured(fallback, f"fallback: call failed: {reason}")
    usage.add(comp, tag=prompt.tag)
    parsed = parse_reply(comp.text, schema)
    if parsed.value is not None:
        if parsed.status != "ok":
            usage.note(f"{prompt.tag}: {parsed.status}")
        return Structured(parsed.value, parsed.status, comp.text, comp)
    usage.fail(parsed.status, tag=prompt.tag)
    return Structured(fallback, f"fallback: {parsed.status}", comp.text, comp)
