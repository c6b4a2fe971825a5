"""The one registry of retrieval modes: name -> implementation, options, description, LLM use.

Every mode, core or plug-in, is one :class:`ModeSpec` in :data:`MODES`. Its ``target``
(``"module:function"``) names a function::

    def search(index: Index, text: str, *, budget: int | None, k: int,
               levels: Sequence[int] | None, doc_ids: Sequence[str] | None,
               vector: np.ndarray | None, lucene: bool, **options) -> list[Hit]

imported by name on first use (so ``arborag --help`` and the server's request model read the
registry without importing any mode). A mode drives the index through its public API only
(``dense_scores``, ``sparse_ranked``, ``fused_scores``, ``fill``, ``hit``, ``edge_rows`` ...);
``Index.search`` checks the option names against the mode's options model, then calls it.

Who reads this table: ``Index.search`` (dispatch, unknown modes and options), ``arborag query``
and ``arborag ask`` (``--mode`` choices and help), the server's request model
(``arborag.serve.models.Mode``), the evaluation's system check (``flows/eval_stages.py``), the
code fingerprint of cached eval retrieval (:func:`mode_modules`), the floors test (modes loaded
by name are import edges) and ``docs/ARCHITECTURE.md`` (:func:`modes_markdown`, checked by a test).

A mode whose module is not installed is not offered (:func:`available_modes`), so a partly
installed tree never advertises a mode it cannot run.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = [
    "DEFAULT_MODE", "MODES", "MODE_NAMES", "ModeSpec", "available_modes", "check_options", "get_mode",
    "mode_help", "mode_modules", "modes_markdown",
]

#: The mode of ``Index.search``, the CLI and the server when none is given (``query.mode``).
DEFAULT_MODE = "auto"


class _Options(BaseModel):
    """Options of a mode: every field optional (None = the config's value or the mode's default)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class NoOptions(_Options):
    """collapsed, traversal, sparse: no options."""


class HybridOptions(_Options):
    fusion: Literal["rrf", "minmax", "zscore"] | None = Field(None, description="Score fusion (default: query.fusion).")
    dense_weight: float | Literal["adaptive"] | None = Field(
        None, description="The dense list's weight, 0..1, or 'adaptive' (default: query.dense_weight).")
    depth: int | None = Field(None, ge=1, description="Best scores anchoring each list's normalization (default: query.fusion_depth).")


class AutoOptions(_Options):
    fusion: Literal["rrf", "minmax", "zscore"] | None = Field(None, description="Score fusion (default: query.fusion).")
    dense_weight: float | Literal["adaptive"] | None = Field(
        None, description="The dense list's weight, 0..1, or 'adaptive' (per question; default: query.dense_weight).")
    depth: int | None = Field(None, ge=1, description="Normalization depth (default: query.fusion_depth).")
    sparse: bool = Field(True, description="Fuse BM25 with dense (False: dense leaves only).")
    tree: Literal["none", "boost"] = Field("none", description="boost: a leaf gains tree_weight x its best ancestor's score.")
    tree_weight: float = Field(0.1, ge=0, description="Weight of the ancestor boost.")
    summaries: Literal["none", "dedup"] = Field("none", description="dedup: summaries may enter the context (never with their children).")
    summary_share: float = Field(0.25, ge=0, le=1, description="Most of the budget summaries may take.")


class MultiOptions(_Options):
    n_variants: int = Field(3, ge=0, description="Query variants besides the question.")
    expander: Literal["auto", "llm", "prf"] = Field("auto", description="Where variants come from (auto: the LLM, else PRF).")
    mmr: bool = Field(False, description="Diversify the fused list by maximal marginal relevance.")
    mmr_lambda: float = Field(0.5, ge=0, le=1, description="MMR trade-off (1 = relevance only).")
    fb_docs: int = Field(10, ge=1, description="PRF: feedback documents.")
    fb_terms: int = Field(10, ge=1, description="PRF: expansion terms.")
    orig_weight: float = Field(0.5, ge=0, le=1, description="PRF: weight of the original terms.")
    candidates: int | None = Field(None, ge=1, description="Hits per variant before fusion.")
    question_weight: int = Field(1, ge=0, description="How many times the question's own list counts in RRF.")
    llm: Any = Field(None, description="A ChatLLM (default: the configured endpoint).")


class LevelOptions(_Options):
    llm: Any = Field(None, description="A ChatLLM; False forces the offline plan (default: the configured endpoint).")
    scope: Literal["tree", "leaves"] | None = Field(None, description="Search the whole tree or leaves only (default: level.scope).")
    searchers: Any = Field(None, description="'sparse,dense' or a list (default: level.searchers).")
    max_rounds: int | None = Field(None, ge=1, description="High-level rounds (default: level.max_rounds).")
    sparse_rounds: int | None = Field(None, ge=1, description="Sparse searcher rounds.")
    dense_rounds: int | None = Field(None, ge=1, description="Dense searcher rounds.")
    max_sub_questions: int | None = Field(None, ge=1, description="Sub-questions per decomposition.")
    candidates: int | None = Field(None, ge=1, description="Hits asked per low-level query.")
    show: int | None = Field(None, ge=1, description="Hits shown to the LLM per feedback step.")
    web: Any = Field(None, description="A WebProvider (default: level.web_provider).")
    trace: Any = Field(None, description="Accepted; the trace is always attached to the hits.")


class RerankOptions(_Options):
    rerank: Any = Field(None, description="A Reranker or cosine | cross_encoder | llm (default: rerank.kind).")
    candidates: int | None = Field(None, ge=1, description="Leaves rescored.")
    trace: Any = Field(None, description="A dict that receives the reranker's record.")


class SegmentsOptions(RerankOptions):
    preset: str | None = Field(None, description="RSE preset: balanced | precision | find_all (default: segments.preset).")
    max_length: int | None = Field(None, ge=1, description="RSE: longest segment (chunks).")
    overall_max_length: int | None = Field(None, ge=1, description="RSE: chunks of all segments together.")
    minimum_value: float | None = Field(None, description="RSE: a segment's least value.")
    irrelevant_chunk_penalty: float | None = Field(None, description="RSE: subtracted from every chunk's value.")
    decay_rate: float | None = Field(None, description="RSE: rank decay of chunk values.")
    top_k_for_document_selection: int | None = Field(None, ge=1, description="RSE: documents considered.")
    chunk_length_adjustment: bool | None = Field(None, description="RSE: scale values by chunk length.")


LLMUse = Literal["none", "optional", "configurable"]


@dataclass(frozen=True)
class ModeSpec:
    """One retrieval mode.

    ``llm``: ``none`` (never calls an LLM), ``optional`` (uses the configured LLM when there is
    one, runs an offline plan otherwise), ``configurable`` (an LLM only when the config picks one,
    e.g. ``rerank.kind: llm``). No mode *needs* an LLM to answer (:attr:`needs_llm` is False).
    ``uses_vector``: the query text is embedded (False: BM25 only).
    """

    name: str
    target: str  # "module:function"
    description: str
    options: type[_Options] = NoOptions
    llm: LLMUse = "none"
    uses_vector: bool = True
    core: bool = False  # one of the four modes of the RAPTOR index itself (query/core.py)

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def needs_llm(self) -> bool:
        return False

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(self.options.model_fields)

    def installed(self) -> bool:
        return _installed(self.module)

    def load(self) -> Callable[..., Any]:
        """The mode's search function (its module imported on first use)."""
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


MODES: dict[str, ModeSpec] = {m.name: m for m in (
    ModeSpec("auto", "arborag.query.auto:search",
             "the measured default: dense + BM25 scores of the leaves fused (z-score), filled best-first", AutoOptions),
    ModeSpec("collapsed", "arborag.query.core:collapsed",
             "RAPTOR collapsed tree: every node of every level by cosine, best-first to the budget", core=True),
    ModeSpec("traversal", "arborag.query.core:traversal",
             "RAPTOR tree traversal: top-k per level from every root down to the leaves", core=True),
    ModeSpec("sparse", "arborag.query.core:sparse",
             "BM25 best-first to the budget (lucene=True: Lucene syntax)", uses_vector=False, core=True),
    ModeSpec("hybrid", "arborag.query.core:hybrid",
             "dense + BM25 over every level, fused (query.fusion), best-first", HybridOptions, core=True),
    ModeSpec("multi", "arborag.query.multi:search",
             "the question + n variants (LLM, or offline PRF), each hybrid, fused by RRF", MultiOptions, llm="optional"),
    ModeSpec("level", "arborag.query.level:search",
             "LevelRAG: sub-questions, Lucene rewrites + HyDE with feedback (LLM; offline plan without)", LevelOptions,
             llm="optional"),
    ModeSpec("segments", "arborag.query.segments:search",
             "dsRAG relevant segment extraction: contiguous runs of reranked leaves, stitched from the document",
             SegmentsOptions, llm="configurable"),
    ModeSpec("rerank", "arborag.query.rerank:search",
             "leaves rescored by the configured reranker (rerank.kind), best calibrated first", RerankOptions,
             llm="configurable"),
)}

#: Every registered mode, the default first (what the CLI and the server accept).
MODE_NAMES: tuple[str, ...] = tuple(MODES)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, ValueError):  # ValueError: already imported without a spec
        return module in sys.modules


def get_mode(name: str) -> ModeSpec | None:
    """The registered mode ``name`` (None when there is none)."""
    return MODES.get(name)


def available_modes() -> tuple[str, ...]:
    """The registered modes whose module is present, in table order."""
    return tuple(name for name, spec in MODES.items() if spec.installed())


def mode_modules() -> tuple[str, ...]:
    """The modules the registry imports by name (static import graphs cannot see them)."""
    return tuple(dict.fromkeys(spec.module for spec in MODES.values()))


def check_options(spec: ModeSpec, options: dict[str, Any]) -> str | None:
    """What is wrong with ``options`` for ``spec`` (unknown names, bad values), or None."""
    unknown = sorted(set(options) - set(spec.option_names))
    if unknown:
        if not spec.option_names:
            return f"mode {spec.name!r} takes no options ({', '.join(unknown)})"
        return f"mode {spec.name!r} takes no option {', '.join(unknown)}; it takes {', '.join(spec.option_names)}"
    try:
        spec.options.model_validate(options)
    except ValidationError as exc:
        bad = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return f"mode {spec.name!r}: {bad}"
    return None


def mode_help() -> str:
    """One line for ``--mode`` help texts: every mode, the default marked."""
    return " | ".join(f"{n} (default)" if n == DEFAULT_MODE else n for n in MODE_NAMES)


def modes_markdown() -> str:
    """The table of modes for the docs (``docs/ARCHITECTURE.md`` holds it; a test checks it is current)."""
    rows = ["| mode | implementation | LLM | options | what it does |", "| --- | --- | --- | --- | --- |"]
    for spec in MODES.values():
        opts = ", ".join(spec.option_names) or "–"
        name = f"`{spec.name}` (default)" if spec.name == DEFAULT_MODE else f"`{spec.name}`"
        rows.append(f"| {name} | `{spec.target}` | {spec.llm} | {opts} | {spec.description} |")
    return "\n".join(rows)
