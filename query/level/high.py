"""LevelRAG's high-level searcher (docs/METHODS.md §7): plan, search, summarize, verify, supplement.

1. **Decompose** the question into atomic sub-questions (none → the question itself).
2. Run every sub-question through the low-level searchers (sparse, dense, web if on) and fuse
   their hits (reciprocal rank fusion).
3. **Summarize** what was found per sub-question (one or two sentences) for the verifier (in the
   last allowed round no verify follows, so the summary is the top hit's opening, no LLM call).
4. **Verify** whether the findings answer the question; if not, **supplement** with new
   sub-questions — at most ``max_rounds`` rounds in all, and a sub-question is never asked twice
   (case- and space-insensitive; a repeat proposed by the LLM is recorded as dropped).
5. The result: every sub-question's hits fused by RRF, filled best-first to the token budget.

Every LLM step falls back on failure (a timeout or 500 after the client's retries, a malformed
reply): decomposition → the question itself; a summary → the top hit's first words; a verdict
→ stop. The trace records each fallback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arborag.llm import prompts as P
from arborag.llm.structured import SubQuestions
from arborag.query.hits import Hit, fill_hits
from arborag.query.level.llm import Supplement, TextReply
from arborag.query.level.searchers import SearchContext, fuse
from arborag.query.level.trace import LevelTrace, RoundVerdict, SubQuestion

__all__ = ["HighLevelSearcher", "fill_budget"]


def _norm(q: str) -> str:
    return " ".join(q.lower().strip().rstrip("?.!").split())


fill_budget = fill_hits  # the one best-first fill (arborag.query.index.fill_hits)


class HighLevelSearcher:
    def __init__(self, ctx: SearchContext, searchers: Sequence[Any], trace: LevelTrace, *,
                 max_rounds: int = 3, max_sub_questions: int = 4) -> None:
        self.ctx = ctx
        self.searchers = list(searchers)
        self.trace = trace
        self.max_rounds = max_rounds
        self.max_sub_questions = max_sub_questions

    def decompose(self, question: str) -> list[str]:
        llm = self.ctx.llm
        reply = llm.ask("decompose", P.LEVEL_DECOMPOSE, SubQuestions, question=question,
                        max_questions=self.max_sub_questions)
        if reply is None:
            return [question]
        subs: list[str] = []
        for q in reply.questions:
            if _norm(q) and _norm(q) not in {_norm(s) for s in subs}:
                subs.append(q)
        return subs[: self.max_sub_questions] or [question]

    def run_sub_question(self, sq: SubQuestion) -> list[Hit]:
        rankings = []
        for searcher in self.searchers:
            hits, run = searcher.search(sq.text)
            sq.runs.append(run)
            rankings.append(hits)
        fused = fuse(rankings, k=self.ctx.rrf_k)
        sq.hits = [h.node_id for h in fused]
        return fused

    def summarize(self, sq: SubQuestion, hits: Sequence[Hit], *, ask: bool = True) -> None:
        """What was found for ``sq``: the LLM's summary when a verify step will read it (``ask``),
        else (the last round, offline, a failed call) the top hit's opening words."""
        reply = self.ctx.llm.ask("summarize", P.LEVEL_SUMMARIZE, TextReply, question=sq.text, context=self.ctx.context(hits)) if ask else None
        if reply is not None:
            sq.summary = reply.text
        elif hits:  # offline / failed: the top hit's opening words
            words = hits[0].text.split()
            sq.summary = "(top hit) " + " ".join(words[:40]) + (" …" if len(words) > 40 else "")
        else:
            sq.summary = "Not found."

    def search(self, question: str) -> list[Hit]:
        trace = self.trace
        pending = self.decompose(question)
        asked: set[str] = set()
        per_sub: list[list[Hit]] = []
        round_ = 1
        while pending:
            for text in pending:
                asked.add(_norm(text))
                sq = SubQuestion(text=text, round=round_)
                trace.sub_questions.append(sq)
                hits = self.run_sub_question(sq)
                per_sub.append(hits)
                self.summarize(sq, hits, ask=round_ < self.max_rounds)
            if round_ >= self.max_rounds or self.ctx.llm.down:
                break
            findings = "\n".join(f"- {s.text} -> {s.summary}" for s in trace.sub_questions)
            verdict = self.ctx.llm.ask("verify", P.LEVEL_VERIFY, Supplement, question=question, findings=findings,
                                       max_questions=self.max_sub_questions)
            if verdict is None:
                trace.verdicts.append(RoundVerdict(round_, True, "no verdict (LLM step failed): stopped"))
                break
            rv = RoundVerdict(round_, verdict.sufficient, verdict.reason)
            trace.verdicts.append(rv)
            if verdict.sufficient:
                break
            new: list[str] = []
            for q in verdict.questions:
                if _norm(q) in asked or _norm(q) in {_norm(n) for n in new} or not _norm(q):
                    rv.dropped.append(q)
                else:
                    new.append(q)
            rv.supplements = new[: self.max_sub_questions]
            rv.dropped.extend(new[self.max_sub_questions:])
            if not rv.supplements:
                rv.reason = (rv.reason + "; " if rv.reason else "") + "no new sub-question: stopped"
                break
            pending = rv.supplements
            round_ += 1
        return fuse(per_sub, k=self.ctx.rrf_k)
