"""The options model of every retrieval mode (pydantic): names, types, defaults, descriptions.

The registry (:mod:`arborag.query.modes`) names each mode's model; ``Index.search`` checks a
call's options against it, and the modes take their option names and defaults from here
(``auto.DEFAULTS``, ``level``'s known options), so an option is declared once. Imports nothing
of ours.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "FROM_CONFIG", "AutoOptions", "FromConfig", "HopOptions", "HybridOptions", "LevelOptions", "ModeOptions", "MultiOptions",
    "NoOptions", "QuerySettings", "RerankOptions", "SegmentsOptions", "query_settings",
]


class FromConfig:
    """The type of :data:`FROM_CONFIG`: "not given, take the config's value" (where None already
    means something, as ``budget=None`` = no token cap)."""

    _instance: "FromConfig | None" = None

    def __new__(cls) -> "FromConfig":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "FROM_CONFIG"


#: The default of ``budget`` in every front door: ``query.budget`` of the config.
FROM_CONFIG: Final = FromConfig()


class QuerySettings(NamedTuple):
    """The mode, token budget and k a search runs with."""

    mode: str
    budget: int | None
    k: int


def query_settings(query: Any, *, mode: str | None = None, budget: "int | None | FromConfig" = FROM_CONFIG,
                   k: int | None = None) -> QuerySettings:
    """The one place the front doors (``arborag query``/``ask``, ``arborag serve``, ``arborag mcp``,
    ``Index.search``, ``query.answer.ask``) take their defaults from: what the call gives, else
    ``query.mode``, ``query.budget`` and ``query.k`` of the config (``query``: its
    :class:`~arborag.config.QueryConfig`). ``budget=None`` stays None (no token cap: ``k`` hits)."""
    return QuerySettings(
        query.mode if mode is None else mode,
        query.budget if isinstance(budget, FromConfig) else budget,
        query.k if k is None else k,
    )


class ModeOptions(BaseModel):
    """Options of a mode: every field optional (None = the config's value or the mode's default)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class NoOptions(ModeOptions):
    """collapsed, traversal, sparse: no options."""


class HybridOptions(ModeOptions):
    fusion: Literal["rrf", "minmax", "zscore"] | None = Field(None, description="Score fusion (default: query.fusion).")
    dense_weight: float | Literal["adaptive"] | None = Field(
        None, description="The dense list's weight, 0..1, or 'adaptive' (default: query.dense_weight).")
    depth: int | None = Field(None, ge=1, description="Best scores anchoring each list's normalization (default: query.fusion_depth).")


class AutoOptions(ModeOptions):
    fusion: Literal["rrf", "minmax", "zscore"] | None = Field(None, description="Score fusion (default: query.fusion).")
    dense_weight: float | Literal["adaptive"] | None = Field(
        None, description="The dense list's weight, 0..1, or 'adaptive' (per question; default: query.dense_weight).")
    depth: int | None = Field(None, ge=1, description="Normalization depth (default: query.fusion_depth).")
    sparse: bool = Field(True, description="Fuse BM25 with dense (False: dense leaves only).")
    tree: Literal["none", "boost"] = Field("none", description="boost: a leaf gains tree_weight x its best ancestor's score.")
    tree_weight: float = Field(0.1, ge=0, description="Weight of the ancestor boost.")
    summaries: Literal["none", "dedup"] = Field("none", description="dedup: summaries may enter the context (never with their children).")
    summary_share: float = Field(0.25, ge=0, le=1, description="Most of the budget summaries may take.")
    pack: Literal["best", "segments"] = Field(
        "segments", description="How the budget is filled: segments (runs of adjacent leaves of a long document where the ranking "
        "clusters, then best-first; query/packing.py) or best (best-first leaves only).")


class HopOptions(ModeOptions):
    fusion: Literal["minmax", "zscore"] | None = Field(None, description="First-hop fusion, as auto (default: query.fusion).")
    dense_weight: float | Literal["adaptive"] | None = Field(None, description="First hop: the dense list's weight (default: query.dense_weight).")
    depth: int | None = Field(None, ge=1, description="First hop: normalization depth (default: query.fusion_depth).")
    walk: Literal["hop", "ppr", "tree", "none"] = Field(
        "hop", description="hop: one explicit hop over the links; ppr: Personalized PageRank; tree: level-1 cluster co-membership; none: auto.")
    seeds: int = Field(5, ge=0, description="Best first-hop leaves the walk starts from.")
    hop_weight: float = Field(1.0, ge=0, description="Weight of the walk's score (0..1 scaled) added to the first hop's z-score.")
    kinds: Literal["all", "title"] = Field("title", description="Links a walk may arrive through: title (into the documents a seed names), or all (shared names too).")
    damping: float = Field(0.5, gt=0, lt=1, description="ppr: probability of following a link (1 - restart).")
    iterations: int = Field(10, ge=1, description="ppr: walk steps.")
    pack: Literal["best", "segments"] = Field(
        "segments", description="How the budget is filled: segments (runs of adjacent leaves of a long document where the ranking "
        "clusters, then best-first; query/packing.py) or best (best-first leaves only).")


class MultiOptions(ModeOptions):
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


class LevelOptions(ModeOptions):
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


class RerankOptions(ModeOptions):
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
