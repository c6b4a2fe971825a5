"""Every prompt arborag sends to an LLM, in one module, each with a name and a version.

A :class:`Prompt` is a system message and a user template (``str.format`` fields). Its
:attr:`Prompt.tag` (``"<name>@<version>"``) is part of the LLM call cache key
(:meth:`arborag.llm.LLMClient.cache_key`): bump ``version`` whenever the wording changes, and
old cached replies are no longer served for the new prompt.

Prompts register themselves in :data:`PROMPTS` (``name -> Prompt``) when defined with
:func:`register`; a name may be registered once. This module is append-only: add new prompts at
the end of the file (LevelRAG's searchers add theirs there too).

Structured replies (lists, verdicts, rewrites, cited answers) are asked for as JSON and parsed
with :mod:`arborag.llm.structured`, which repairs or falls back on malformed output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arborag.llm.types import Message

__all__ = [
    "ANSWER_WITH_CITATIONS",
    "SHORT_ANSWER",
    "PROMPTS",
    "QUERY_VARIANTS",
    "RAPTOR_SUMMARY",
    "Prompt",
    "get_prompt",
    "register",
]


@dataclass(frozen=True, slots=True)
class Prompt:
    """One versioned prompt: ``system`` (may be empty) and a ``user`` template with ``{fields}``."""

    name: str
    version: str
    user: str
    system: str = ""
    max_tokens: int = 256  # a sensible reply length for this prompt (callers may override)

    @property
    def tag(self) -> str:
        """``"<name>@<version>"`` — part of the cache key of every call made with this prompt."""
        return f"{self.name}@{self.version}"

    def render(self, **fields: Any) -> str:
        """The user message with ``fields`` filled in (a missing field is a ``KeyError``)."""
        return self.user.format(**fields)

    def messages(self, **fields: Any) -> list[Message]:
        """The chat messages of one call: the system message (when set), then the user message."""
        out: list[Message] = []
        if self.system:
            out.append({"role": "system", "content": self.system})
        out.append({"role": "user", "content": self.render(**fields)})
        return out


PROMPTS: dict[str, Prompt] = {}
"""Every registered prompt by name."""


def register(prompt: Prompt) -> Prompt:
    """Add ``prompt`` to :data:`PROMPTS` (a name registered twice is a ``ValueError``)."""
    if prompt.name in PROMPTS and PROMPTS[prompt.name] != prompt:
        raise ValueError(f"prompt {prompt.name!r} is already registered (bump its version instead)")
    PROMPTS[prompt.name] = prompt
    return prompt


def get_prompt(name: str) -> Prompt:
    """The registered prompt ``name`` (``KeyError`` listing the known names otherwise)."""
    try:
        return PROMPTS[name]
    except KeyError:
        raise KeyError(f"no prompt {name!r}; known: {', '.join(sorted(PROMPTS))}") from None


def numbered(texts: Mapping[int, str] | list[str], *, start: int = 1) -> str:
    """``[1] text`` lines (one per context), the form the citation prompts refer to."""
    items = texts.items() if isinstance(texts, Mapping) else enumerate(texts, start=start)
    return "\n\n".join(f"[{i}] {' '.join(str(t).split())}" for i, t in items)


# -- build: cluster summaries (RAPTOR, docs/METHODS.md §5.7) ----------------------------------------------

RAPTOR_SUMMARY = register(
    Prompt(
        name="raptor-summary",
        version="raptor-v1",
        system="You are a helpful assistant.",
        user="Write a summary of the following, including as many key details as possible: {context}:",
        max_tokens=150,
    )
)

# -- query: multi-query retrieval (docs/METHODS.md §6) -----------------------------------------------------

QUERY_VARIANTS = register(
    Prompt(
        name="query-variants",
        version="v1",
        system=(
            "You help a search engine. You rewrite a user's question into alternative search queries "
            "that together find the passages needed to answer it."
        ),
        user=(
            "Write {n} different search queries for the question below. Vary the wording, name the "
            "entities explicitly, and when the question needs several facts, let each query target "
            "one of them. Do not answer the question.\n\n"
            "Question: {question}\n\n"
            'Reply with JSON only: {{"variants": ["query 1", "query 2", ...]}}'
        ),
        max_tokens=200,
    )
)

# -- query: answers with citations (arborag ask) -------------------------------------------------

ANSWER_WITH_CITATIONS = register(
    Prompt(
        name="answer-with-citations",
        version="v2",
        system=(
            "You answer questions using only the numbered context passages you are given. "
            "You never use outside knowledge. If the passages do not contain what is needed to "
            "answer, you say so instead of guessing."
        ),
        user=(
            "Context passages:\n\n{context}\n\n"
            "Question: {question}\n\n"
            "Reply with JSON only, in this form:\n"
            '{{"supported": true, "answer": "the answer in a sentence or two, citing passages like [1] or [2][3]", '
            '"short": "the answer in as few words as possible", "citations": [1, 2]}}\n'
            '"supported" is false when the passages do not support an answer; then "answer" says '
            'briefly what is missing, "short" is "" and "citations" is [].'
        ),
        max_tokens=400,
    )
)

# -- (append new prompts below this line; never edit a released prompt without bumping its version) --

# -- query: LevelRAG searchers (docs/METHODS.md §7; arborag.query.level) ----------------------------------

LEVEL_DECOMPOSE = register(
    Prompt(
        name="level-decompose",
        version="v1",
        system="You plan searches. You split a question into the atomic sub-questions a search engine must answer.",
        user=(
            "Split the question into at most {max_questions} atomic sub-questions, each asking for one fact "
            "and naming its entities explicitly. A simple question needs no split: reply with an empty list.\n\n"
            "Question: {question}\n\n"
            'Reply with JSON only: {{"questions": ["sub-question 1", "sub-question 2"]}}'
        ),
        max_tokens=160,
    )
)

LEVEL_SPARSE_REWRITE = register(
    Prompt(
        name="level-sparse-rewrite",
        version="v1",
        system="You write keyword queries for a BM25 search engine in Lucene syntax.",
        user=(
            "Rewrite the question as a Lucene query: put names and multi-word entities in double quotes, "
            "keep the important keywords, drop stop words and question words. You may boost a key term "
            'with ^2 and exclude a term with -"term".\n\n'
            "Question: {question}\n\n"
            'Reply with JSON only: {{"query": "the Lucene query"}}'
        ),
        max_tokens=60,
    )
)

LEVEL_SPARSE_FEEDBACK = register(
    Prompt(
        name="level-sparse-feedback",
        version="v1",
        system="You judge keyword search results and refine the keyword query.",
        user=(
            "Question: {question}\n"
            "Query sent: {query}\n\n"
            "Top results:\n{context}\n\n"
            "Do the results contain the information that answers the question? If not, choose ONE refinement: "
            '"extend" (add missing keywords), "filter" (exclude keywords of wrong results) or '
            '"emphasize" (boost keywords that matter most), and give the keywords.\n\n'
            'Reply with JSON only: {{"sufficient": false, "action": "extend", "keywords": ["keyword"]}}'
        ),
        max_tokens=60,
    )
)

LEVEL_HYDE = register(
    Prompt(
        name="level-hyde",
        version="v1",
        system="You write short encyclopedia-style passages.",
        user=(
            "Write a short passage (2-3 sentences) that would answer the question, as it might appear in a "
            "document. If you do not know the facts, write a plausible passage on the topic.\n\n"
            "Question: {question}\n\n"
            'Reply with JSON only: {{"passage": "the passage"}}'
        ),
        max_tokens=120,
    )
)

LEVEL_DENSE_FEEDBACK = register(
    Prompt(
        name="level-dense-feedback",
        version="v1",
        system="You judge semantic search results and rewrite the search passage.",
        user=(
            "Question: {question}\n\n"
            "Top results:\n{context}\n\n"
            "Do the results contain the information that answers the question? If not, write a new short "
            "passage (2-3 sentences) that would answer it, using what the results reveal (names, dates) and "
            "aiming at what is still missing.\n\n"
            'Reply with JSON only: {{"sufficient": false, "passage": "the new passage"}}'
        ),
        max_tokens=140,
    )
)

LEVEL_SUMMARIZE = register(
    Prompt(
        name="level-summarize",
        version="v1",
        system="You extract facts from passages. You never add facts that are not in the passages.",
        user=(
            "Passages:\n{context}\n\n"
            "In one or two sentences, state what the passages say that answers: {question}\n"
            "If they say nothing about it, reply: Not found."
        ),
        max_tokens=90,
    )
)

LEVEL_VERIFY = register(
    Prompt(
        name="level-verify",
        version="v1",
        system="You check whether collected facts are enough to answer a question, and plan what to search next.",
        user=(
            "Question: {question}\n\n"
            "Facts found so far, per sub-question:\n{findings}\n\n"
            "Are these facts enough to answer the question? If not, write up to {max_questions} NEW atomic "
            "sub-questions for the missing facts (use names found above; do not repeat a sub-question).\n\n"
            'Reply with JSON only: {{"sufficient": false, "reason": "what is missing", "questions": ["new sub-question"]}}'
        ),
        max_tokens=160,
    )
)

# -- query: LLM relevance rating for reranking (docs/METHODS.md §6.7; arborag.query.rerank) -------------

RERANK_RELEVANCE = register(
    Prompt(
        name="rerank-relevance",
        version="rerank-v1",
        user=(
            "Rate how relevant the passage is to the query, from 0 (unrelated) to 10 (answers it "
            "completely). Reply with the number only.\n\nQuery: {query}\n\nPassage:\n{passage}\n\nRating:"
        ),
        max_tokens=4,
    )
)

# -- evaluation: a bare short answer (tasks/evaluation/answer.py, style "short") --------------------

SHORT_ANSWER = register(
    Prompt(
        name="short-answer",
        version="v1",
        user=(
            "Answer the question using only the context. Reply with the answer alone: a few words, "
            "no explanation.\n\nContext:\n{context}\n\nQuestion: {question}\nAnswer:"
        ),
        max_tokens=64,
    )
)
