"""Answers with an LLM (``arborag eval --answer``): the prompt, the batch answerer, the items.

The answerer is a plain callable ``(items) -> answers`` where an item is ``(question, contexts)``;
tests pass their own. Which hits get an answer (one budget, no failed search) is a polars filter
and join of the HITS files with the queries.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import polars as pl
import pyarrow as pa

from arborag.config import ArboragConfig
from arborag.errors import ConfigError
from arborag.tasks.evaluation.score import PredictionKey

__all__ = ["ANSWER_PROMPT", "AnswerItem", "AnswerMany", "answer_items", "answer_messages", "collect_answers", "llm_answerer"]

ANSWER_PROMPT = (
    "Answer the question using only the context. Reply with the answer alone: a few words, "
    "no explanation.\n\nContext:\n{context}\n\nQuestion: {question}\nAnswer:"
)

AnswerItem = tuple[str, list[str]]  # (question, retrieved texts in rank order)
AnswerMany = Callable[[list[AnswerItem]], list[str]]


def answer_messages(question: str, contexts: Sequence[str]) -> list[dict[str, str]]:
    """The chat messages that ask for one answer."""
    return [{"role": "user", "content": ANSWER_PROMPT.format(context="\n\n".join(contexts), question=question)}]


def llm_answerer(config: ArboragConfig, cache_dir: Path) -> AnswerMany:
    """A batch answerer over the summarize section's OpenAI-compatible endpoint (cached calls)."""
    from arborag.tasks.llm import LLMClient

    if not config.summarize.base_url and not os.environ.get(config.summarize.api_key_env):
        raise ConfigError(
            "--answer needs an LLM: set summarize.base_url (ARBORAG_LLM_BASE_URL) or the API key variable "
            f"{config.summarize.api_key_env}"
        )
    client = LLMClient.from_config(config.summarize, cache_dir=cache_dir)

    def answer_many(items: list[AnswerItem]) -> list[str]:
        results = client.complete_many([answer_messages(q, ctx) for q, ctx in items], max_tokens=64)
        return [r.text.strip() if hasattr(r, "text") else "" for r in results]

    return answer_many


def answer_items(hits: Iterable[pa.Table], queries: pa.Table, budget: int) -> tuple[list[PredictionKey], list[AnswerItem]]:
    """The hits to answer: every search at ``budget`` that did not fail, in file and row order,
    as prediction keys (qid, strategy, system, budget) and (question, texts) items."""
    frames = [pl.from_arrow(t.select(["qid", "strategy", "system", "budget", "error", "texts"])) for t in hits]
    if not frames:
        return [], []
    q = pl.from_arrow(queries.select(["qid", "question"])).unique("qid", keep="last", maintain_order=True)
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
