"""Answers with an LLM (``arborag eval --answer``): the prompt, the batch answerer, the items.

The answerer is a plain callable ``(items) -> answers`` where an item is ``(question, contexts)``;
tests pass their own. Which hits get an answer (one budget, no failed search) is a polars filter
and join of the HITS files with the queries.

:func:`llm_answerer` answers the way ``arborag ask`` does (style ``"ask"``, the default): numbered
passages, a cited answer checked by :func:`arborag.llm.answering.answer_passages`; the
prediction scored is the answer's short form (else the answer without ``[n]`` markers), and a
refusal or a failed call scores as the empty answer — so the QA metrics (F1/EM/ROUGE-L/BLEU)
are those of ``ask``, refusals included. Style ``"short"`` is the bare few-words prompt
(``short-answer``). Both prompts live in :mod:`arborag.llm.prompts`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import polars as pl
import pyarrow as pa

from arborag.config import ArboragConfig
from arborag.errors import ConfigError
from arborag.llm.prompts import SHORT_ANSWER
from arborag.tasks.evaluation.score import PredictionKey

__all__ = [
    "ANSWER_PROMPT", "AnswerItem", "AnswerMany", "AnswerStyle", "answer_items", "answer_messages", "ask_answerer",
    "collect_answers", "llm_answerer",
]

log = logging.getLogger("arborag.eval")

ANSWER_PROMPT = SHORT_ANSWER.user  # the "short" style's prompt (kept under its old name)
AnswerStyle = Literal["ask", "short"]

AnswerItem = tuple[str, list[str]]  # (question, retrieved texts in rank order)
AnswerMany = Callable[[list[AnswerItem]], list[str]]


def answer_messages(question: str, contexts: Sequence[str]) -> list[dict[str, str]]:
    """The chat messages that ask for one answer."""
    return [dict(m) for m in SHORT_ANSWER.messages(context="\n\n".join(contexts), question=question)]


def llm_answerer(config: ArboragConfig, cache_dir: Path, *, style: AnswerStyle = "ask") -> AnswerMany:
    """A batch answerer over the summarize section's OpenAI-compatible endpoint (cached calls):
    style ``"ask"`` (cited answers, as ``arborag ask``) or ``"short"`` (few words)."""
    from arborag.llm import LLMClient
    from arborag.llm.configured import HOW_TO_CONFIGURE, llm_configured

    if not llm_configured(config) and not os.environ.get(config.summarize.api_key_env):
        raise ConfigError(
            "--answer needs an LLM: set summarize.base_url (ARBORAG_LLM_BASE_URL) or the API key variable "
            f"{config.summarize.api_key_env}.\n{HOW_TO_CONFIGURE}"
        )
    client = LLMClient.from_config(config.summarize, cache_dir=cache_dir)
    if style == "ask":
        return ask_answerer(client, concurrency=client.concurrency)

    def answer_many(items: list[AnswerItem]) -> list[str]:
        results = client.complete_many([answer_messages(q, ctx) for q, ctx in items], max_tokens=SHORT_ANSWER.max_tokens,
                                       prompt_tag=SHORT_ANSWER.tag)
        return [r.text.strip() if hasattr(r, "text") else "" for r in results]

    return answer_many


def ask_answerer(llm: Any, *, concurrency: int = 1) -> AnswerMany:
    """A batch answerer that answers like ``arborag ask`` with ``llm`` (any ChatLLM: a client or
    a test fake): one cited answer per item, checked; the prediction is
    :meth:`~arborag.llm.answering.Judged.prediction` ("" for a refusal or a failure). The
    answerer's ``stats`` dict counts answered / refused / failed and tokens spent."""
    from concurrent.futures import ThreadPoolExecutor

    from arborag.llm.answering import answer_passages
    from arborag.llm.types import Usage

    stats: dict[str, int] = {"answered": 0, "refused": 0, "failed": 0, "tokens_in": 0, "tokens_out": 0}

    def one(item: AnswerItem) -> tuple[str, str, Usage]:
        question, contexts = item
        usage = Usage()
        judged = answer_passages(llm, question, contexts, usage=usage)
        return judged.prediction(), judged.status, usage

    def answer_many(items: list[AnswerItem]) -> list[str]:
        if concurrency > 1 and len(items) > 1:
            with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ask") as pool:
                results = list(pool.map(one, items))
        else:
            results = [one(item) for item in items]
        for _, status, usage in results:
            stats[status] += 1
            stats["tokens_in"] += usage.tokens_in
            stats["tokens_out"] += usage.tokens_out
        log.info("answers (ask): %d answered, %d refused, %d failed; %d tokens in, %d out",
                 stats["answered"], stats["refused"], stats["failed"], stats["tokens_in"], stats["tokens_out"])
        return [pred for pred, _, _ in results]

    answer_many.stats = stats  # type: ignore[attr-defined]
    return answer_many


def answer_items(hits: Iterable[pa.Table], queries: pa.Table, budget: int) -> tuple[list[PredictionKey], list[AnswerItem]]:
    """The hits to answer: every search at ``budget`` that did not fail, in file and row order,
    as prediction keys (qid, strategy, system, budget) and (question, texts) items."""
    frames = [pl.DataFrame(t.select(["qid", "strategy", "system", "budget", "error", "texts"])) for t in hits]
    if not frames:
        return [], []
    q = pl.DataFrame(queries.select(["qid", "question"])).unique("qid", keep="last", maintain_order=True)
    df = (
        pl.concat(frames, how="vertical_relaxed")
        .with_row_index("_row")
        .filter((pl.col("budget") == budget) & (pl.col("error").is_null() | (pl.col("error") == "")))
        .join(q, on="qid", how="left")
        .sort("_row")
    )
    keys = [(qid, st, sy, int(b)) for qid, st, sy, b in df.select("qid", "strategy", "system", "budget").iter_rows()]
    items = [(question, list(texts or [])) for question, texts in df.select("question", "texts").iter_rows()]
    return keys, items


def collect_answers(hits: Iterable[pa.Table], queries: pa.Table, budget: int, answer_many: AnswerMany) -> dict[PredictionKey, str]:
    """Ask ``answer_many`` for every answerable hit at ``budget``; (qid, strategy, system, budget) -> answer."""
    keys, items = answer_items(hits, queries, budget)
    preds = answer_many(items) if items else []
    return dict(zip(keys, preds))
