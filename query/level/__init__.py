"""``--mode level``: LevelRAG's high- and low-level searchers over an arborag index (docs/METHODS.md §7).

    >>> hits = index.search("Which film by the director of Jaws won an Oscar?", mode="level", budget=2000)
    >>> hits.trace.sub_questions[0].text, hits.trace.tokens_in     # the full search trace

The high-level searcher (:mod:`.high`) decomposes the question into atomic sub-questions, runs
each through the low-level searchers (:mod:`.searchers`: sparse — Lucene rewrites really
executed by the sparse engine, with extend / filter / emphasize feedback; dense — HyDE; web —
a provider, off by default, :mod:`.web`), summarizes what was found per sub-question, verifies
whether it is enough and supplements with new sub-questions (at most 3 rounds, never repeating
one). The hits of all sub-questions are fused by reciprocal rank fusion and filled best-first
to the token budget.

**The trace.** :func:`search` returns a :class:`~arborag.query.level.trace.LevelHits` — a
``list[Hit]`` like every mode — whose ``.trace`` is a
:class:`~arborag.query.level.trace.LevelTrace`: the sub-questions with the round they came
from, each low-level query exactly as sent, its hits, errors (an invalid Lucene rewrite: reason
and position, then the plain retry) and verdicts, the per-round verify verdicts and supplements,
and every LLM call with its tokens and time. ``trace.to_dict()`` is JSON-ready
(``arborag query --mode level --json``); ``arborag query --mode level --trace`` prints it as a tree.

**The LLM** is the endpoint of ``summarize.*`` (``ARBORAG_LLM_BASE_URL``, ``ARBORAG_LLM_MODEL``),
or the ``llm=`` option (any :class:`~arborag.llm.types.ChatLLM`; ``llm=False`` forces the
offline plan). Each failed or malformed LLM step falls back (see :mod:`.high` and
:mod:`.searchers`) and is recorded in the trace; an unreachable endpoint switches the rest of
the query to the offline plan.

**Offline plan** (no LLM configured or reachable — said once per process in the log and every
time in ``trace.notice``): the question is the only sub-question; the sparse searcher sends an
offline Lucene rewrite (quoted capitalised entities, stop words dropped); the dense searcher
the question itself; the two are fused by RRF. One round, no feedback.

Options (``index.search(..., mode="level", **options)``; defaults from ``level.*`` in the config):
``llm``, ``scope`` (``"tree"`` | ``"leaves"``), ``searchers``, ``max_rounds``, ``sparse_rounds``,
``dense_rounds``, ``max_sub_questions``, ``candidates``, ``show``, ``web`` (a
:class:`~arborag.query.level.web.WebProvider`), ``trace`` (accepted; the trace is always attached).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from arborag.errors import QueryError
from arborag.query.level.high import HighLevelSearcher, fill_budget
from arborag.llm.configured import llm_from_config
from arborag.query.level.llm import StepLLM
from arborag.query.level.searchers import DenseSearcher, SearchContext, SparseSearcher, WebSearcher
from arborag.query.level.trace import LevelHits, LevelTrace
from arborag.query.options import LevelOptions

__all__ = ["LevelHits", "LevelTrace", "OFFLINE_NOTICE", "search"]

log = logging.getLogger("arborag.query.level")

OFFLINE_NOTICE = (
    "mode level: no LLM configured, so the offline plan runs (the question as the only sub-question, "
    "an offline Lucene rewrite + the dense question, fused). Set ARBORAG_LLM_BASE_URL and ARBORAG_LLM_MODEL "
    "for the LevelRAG searchers (docs/LLM.md)."
)
_said_offline = False
#: index -> (LLM config it was made for, client): one client per index, dropped with the index
_LLMS: weakref.WeakKeyDictionary[Any, tuple[str, Any]] = weakref.WeakKeyDictionary()

_OPTIONS = frozenset(LevelOptions.model_fields)


def _say_offline_once(text: str) -> None:
    global _said_offline
    if not _said_offline:
        _said_offline = True
        log.warning(text)


def _configured_llm(index):
    """The configured endpoint's client, one per index (calls cached in ``<corpus>/cache/llm``,
    like ``multi`` and ``ask``), or None."""
    key = index.config.summarize.model_dump_json()
    memo = _LLMS.get(index)
    if memo is None or memo[0] != key:
        memo = (key, llm_from_config(index.config, cache_dir=index.corpus.cache_dir / "llm"))
        _LLMS[index] = memo
    return memo[1]


def search(index, text: str, *, budget: int | None, k: int, levels: Sequence[int] | None,
           doc_ids: Sequence[str] | None, vector: np.ndarray | None, lucene: bool, **options: Any) -> LevelHits:
    """LevelRAG search of ``text``: hits best first (filled to ``budget`` tokens) with ``.trace``."""
    unknown = set(options) - _OPTIONS
    if unknown:
        raise QueryError(text, f"mode 'level' takes no option {', '.join(sorted(unknown))}; known: {', '.join(sorted(_OPTIONS))}")
    cfg = index.config.level
    opt = {**cfg.model_dump(), **{k_: v for k_, v in options.items() if v is not None}}
    scope = opt["scope"]
    if scope not in ("tree", "leaves"):
        raise QueryError(text, f"level: scope must be 'tree' or 'leaves', got {scope!r}")
    t0 = time.perf_counter()
    trace = LevelTrace(question=text, scope=scope)

    llm = options.get("llm")
    if llm is None:
        llm = _configured_llm(index)
    elif llm is False:
        llm = None
    if llm is None:
        trace.plan = "offline"
        trace.notice = OFFLINE_NOTICE
        _say_offline_once(OFFLINE_NOTICE)
    step = StepLLM(llm, trace)

    if scope == "leaves":
        levels = [0] if levels is None else [lv for lv in levels if lv == 0]
    ctx = SearchContext(index, step, levels, doc_ids, candidates=int(opt["candidates"]), show=int(opt["show"]),
                        rrf_k=int(index.config.query.rrf_k), question=text, question_vector=vector)
    names = opt["searchers"].split(",") if isinstance(opt["searchers"], str) else list(opt["searchers"])
    names = [n.strip() for n in names if n.strip()]
    searchers: list[Any] = []
    for name in names:
        if name == "sparse":
            searchers.append(SparseSearcher(ctx, rounds=int(opt["sparse_rounds"])))
        elif name == "dense":
            searchers.append(DenseSearcher(ctx, rounds=int(opt["dense_rounds"])))
        elif name != "web":
            raise QueryError(text, f"level: unknown searcher {name!r}; use sparse, dense (web: set level.web_provider)")
    web = options.get("web")
    if web is None and cfg.web_provider != "none":
        from arborag.query.level.web import web_from_config

        web = web_from_config(cfg)
    if web is not None:
        searchers.append(WebSearcher(ctx, web, k=int(cfg.web_k)))
    if not searchers:
        raise QueryError(text, "level: no searcher enabled (level.searchers is empty)")
    trace.searchers = [s.name for s in searchers]

    high = HighLevelSearcher(ctx, searchers, trace, max_rounds=int(opt["max_rounds"]) if llm is not None else 1,
                             max_sub_questions=int(opt["max_sub_questions"]))
    fused = high.search(text)
    if llm is not None and step.down:
        trace.plan = "offline"
        trace.notice = step.down_reason
        _say_offline_once(f"mode level: {trace.notice}")
    trace.seconds = time.perf_counter() - t0
    return LevelHits(fill_budget(fused, budget, k), trace)
