"""Typed request and response bodies of the HTTP API, and the server's limits.

Every body is a pydantic model with ``extra="forbid"``: an unknown field is a 422, not a
silently ignored typo. The limits (:class:`Limits`) are checked on top of the static bounds
here, so a deployment can tighten them without new models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from arborag.query.modes import MODE_NAMES, MODES

__all__ = [
    "settings_of", "AskRequest", "Limits", "SearchRequest", "SearchResponse", "SearchHit", "Source", "LuceneReport",
    "NodeRef", "NodeResponse", "SnapshotEntry", "Snapshots", "DocumentResponse", "Health", "QueryDefaults", "Stats", "ErrorBody", "ID_PATTERN",
]



def _registered(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {', '.join(MODE_NAMES)}")
    return mode


#: Every mode of the registry (arborag.query.modes; the same names as ``arborag query --mode``); a
#: mode whose module is not installed answers 400 with a clear error.
Mode = Annotated[str, AfterValidator(_registered), WithJsonSchema({"type": "string", "enum": list(MODE_NAMES)})]
#: A request's mode: a registered one, or left out (the server's ``query.mode``).
RequestMode = Annotated[str | None, AfterValidator(lambda m: None if m is None else _registered(m)),
                        WithJsonSchema({"type": "string", "enum": list(MODE_NAMES)})]
_MODE_HELP = "Default: query.mode of the server's config. " + " | ".join(MODE_NAMES) + ": " + "; ".join(
    f"{m.name}: {m.description}" for m in MODES.values())
#: Fields left out of a request take the server's config (``query.mode``, ``query.budget``,
#: ``query.k``), as ``arborag query``, ``arborag mcp`` and ``Index.search`` do.
_BUDGET_HELP = "Token budget of the returned context (left out: query.budget of the server's config; null = k hits, no cap)."
# node and document ids are content hashes (hex, maybe with a short prefix); nothing path-like
ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"


class Limits(BaseModel):
    """What one request may ask for. Over a limit: 413 (body size) or 422 (fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_body_bytes: int = Field(64 * 1024, ge=1024, description="Largest request body accepted (bytes).")
    max_text_chars: int = Field(2000, ge=1, description="Longest query text (characters).")
    max_k: int = Field(100, ge=1, description="Largest k.")
    max_budget: int = Field(20000, ge=1, description="Largest token budget.")
    max_filter_ids: int = Field(200, ge=1, description="Most doc ids in a doc filter.")
    max_document_chars: int = Field(200_000, ge=1, description="Most characters of a document's text returned.")


class AskRequest(BaseModel):
    """POST /ask: retrieve with ``mode`` and answer with the configured LLM, citing passages."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"text": "How did Cinderella reach her happy ending?", "budget": 2000}],
    })

    text: str = Field(..., min_length=1, description="The question.")
    mode: RequestMode = Field(None, description="The retrieval mode of the context (as in POST /search; default: query.mode).")
    budget: int | None = Field(None, ge=1, description=_BUDGET_HELP)
    k: int | None = Field(None, ge=1, description="traversal: nodes kept per level (default: query.k).")
    levels: list[int] | None = Field(None, description="Tree levels to search ([0] = leaves only).")
    max_tokens: int | None = Field(None, ge=1, le=4096, description="Cap on the answer's length (tokens).")

    @field_validator("text")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the question is blank")
        return v


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"text": "How did Cinderella reach her happy ending?", "mode": "auto", "budget": 2000}],
    })

    text: str = Field(..., min_length=1, description="The question (plain words; '?' and other Lucene syntax characters "
                      "are just text), or a Lucene query with lucene=true.")
    mode: RequestMode = Field(None, description=_MODE_HELP)
    budget: int | None = Field(None, ge=1, description=_BUDGET_HELP)
    k: int | None = Field(None, ge=1, description="traversal: nodes kept per level; with budget=null: number of hits (default: query.k).")
    levels: list[int] | None = Field(None, description="Tree levels to search ([0] = leaves only, the flat baseline).")
    doc_ids: list[str] | None = Field(None, description="Only nodes drawing on these documents.")
    lucene: bool = Field(False, description="sparse/hybrid: run text as Lucene syntax (+must -not \"phrase\" term^2).")
    strict_lucene: bool = Field(
        False, description="A malformed Lucene query is a 400 with its position instead of being retried as plain words."
    )
    vector: list[float] | None = Field(
        None, description="A precomputed, L2-normalised query embedding (skips embedding text; dense modes)."
    )
    snapshot: str | None = Field(
        None, pattern=ID_PATTERN, description="Answer from this retained snapshot (id or unique prefix; GET /snapshots "
        "lists them) instead of the published one; 404 when it is not retained."
    )

    @field_validator("text")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the query text is blank")
        return v

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and any(x < 0 for x in v):
            raise ValueError("levels are >= 0")
        return v


def settings_of(req: "SearchRequest | AskRequest", query: Any) -> Any:
    """The mode, budget and k of ``req`` (:class:`~arborag.query.options.QuerySettings`): a field
    left out takes ``query`` (the server's ``query.*`` config); ``"budget": null`` stays no cap."""
    from arborag.query.options import FROM_CONFIG, query_settings

    return query_settings(query, mode=req.mode, k=req.k,
                          budget=req.budget if "budget" in req.model_fields_set else FROM_CONFIG)


class Source(BaseModel):
    doc_id: str
    title: str | None = None
    uri: str | None = None


class SearchHit(BaseModel):
    node_id: str
    level: int
    score: float = Field(..., description="Higher is better, on the mode's one scale: cosine (collapsed), BM25 (sparse), "
                         "the fused score of query.fusion (auto, hop, hybrid; RRF sums for rrf).")
    text: str
    tokens: int
    sources: list[Source]
    title: str | None = Field(None, description="A summary node's label: a short title (null for leaves and older snapshots).")
    keywords: list[str] | None = Field(None, description="A summary node's keywords (c-TF-IDF), best first.")


class LuceneReport(BaseModel):
    """What happened to a Lucene query: a malformed one is retried as plain words (docs/METHODS.md §6)."""

    error: str
    position: int | None = None
    retried_plain: bool = True


class SearchResponse(BaseModel):
    snapshot: str = Field(..., description="The snapshot every hit comes from.")
    mode: Mode
    budget: int | None
    tokens: int = Field(..., description="Tokens of all hits together.")
    took_ms: float = Field(..., description="Server time of the search, query embedding included.")
    embedded: bool = Field(..., description="The query text was embedded by the server for this request.")
    embed_ms: float | None = Field(None, description="Of took_ms, the time spent embedding the query.")
    lucene: LuceneReport | None = None
    hits: list[SearchHit]


class NodeRef(BaseModel):
    node_id: str
    level: int
    tokens: int
    probability: float
    preview: str
    title: str | None = None


class NodeResponse(BaseModel):
    snapshot: str
    node_id: str
    level: int
    text: str
    tokens: int
    sources: list[Source]
    summarizer: str | None = None
    summary_status: str | None = None
    title: str | None = Field(None, description="A summary node's label (null for leaves and older snapshots).")
    keywords: list[str] | None = None
    parents: list[NodeRef]
    children: list[NodeRef]


class DocumentResponse(BaseModel):
    snapshot: str | None = Field(None, description="The snapshot the document was read from.")
    doc_id: str
    uri: str
    title: str | None = None
    mime: str | None = None
    n_chars: int | None = None
    status: str
    error: str | None = None
    ingested_at: str | None = None
    metadata: dict | None = None
    text: str | None = None
    truncated: bool = False


class SnapshotEntry(BaseModel):
    id: str
    published_at: str | None = None
    published: bool = Field(..., description="The snapshot the corpus publishes now (what requests without `snapshot` get).")
    pinned: bool
    open: bool = Field(..., description="This server has it open (and holds a reader lease on it).")
    nodes: int | None = None
    documents: int | None = None


class Snapshots(BaseModel):
    serving: str | None = Field(None, description="The published snapshot this server answers from by default.")
    snapshots: list[SnapshotEntry] = Field(..., description="Every retained snapshot, newest first.")


class QueryDefaults(BaseModel):
    """What a search that leaves out mode, budget or k gets: the server's ``query.*`` config."""

    mode: str
    budget: int
    k: int


class Health(BaseModel):
    status: Literal["ok", "no_index"]
    snapshot: str | None = None
    auth: bool = Field(..., description="API calls need a bearer token.")
    defaults: QueryDefaults | None = Field(None, description="The server's query.mode, query.budget and query.k.")


class Stats(BaseModel):
    snapshot: str
    published_at: str | None = None
    run_id: str | None = None
    build_seconds: float | None = None
    nodes: int
    levels: dict[str, int] = Field(..., description="Node count per tree level.")
    documents: int
    embedder_loaded: bool
    swaps: int = Field(..., description="Snapshot switches since the server started.")
    released: list[str] = Field(..., description="Snapshots released after a switch (latest last).")
    limits: Limits


class ErrorBody(BaseModel):
    detail: str
    position: int | None = None
    reason: str | None = None
