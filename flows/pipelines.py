"""Every stage, declared once, and the pipelines: ordered tuples of those same stage objects.

A :class:`~arborag.flows.stage.Stage` says what its runner reads and writes, which config keys
shape it, which run inputs it takes and when it is on; :func:`arborag.flows.stage.run_pipeline`
derives cache keys, proofs and skips from that. The flows (``flows/ingest.py``, ``flows/build.py``,
``flows/update.py``) run these tuples; ``arborag pipeline`` prints them.

Adding a stage is one module (``tasks/stages/<table>.py`` with ``run_<table>(ctx, **params)`` beside
its pure function, returning its frozen :class:`~arborag.tasks.stage_context.StageSummary`) plus one
entry here (see docs/ARCHITECTURE.md, "Adding a stage"). A stage's name is written only here;
other code names it through its object (``PUBLISH.name``).

Every stage declares ``code_version``: the version of what it produces. Its cache key and the build
key hold that string, not the source text: bump it (``"1"`` -> ``"2"``) in the same change that
changes the stage's output (its runner or anything the runner calls); a comment, docstring,
refactor or upgrade that leaves the output alone keeps it (docs/ARCHITECTURE.md, "Code versions").
"""

from __future__ import annotations

from arborag.config import ArboragConfig
from arborag.flows.lazy import LazyTask
from arborag.flows.stage import SNAPSHOT, SOURCES, Branch, Stage, staged, table
from arborag.tasks.stages import chunks, doc_context, documents, leaf_vectors, links, plan, publish, sections, sparse, tree, tree_update, vectors

__all__ = [
    "BRANCHES", "BUILD_PIPELINE", "CONTEXT", "EMBED", "INGEST", "INGEST_PIPELINE", "LINKS", "PIPELINES", "PLAN", "PUBLISH", "SECTIONS", "SEGMENT",
    "SPARSE", "TREE", "TREE_PIPELINE", "TREE_UPDATE", "UPDATE_BRANCH", "UPDATE_PIPELINE", "VECTORS",
]


def _task(name: str, runner):  # type: ignore[no-untyped-def]
    """The module-level Prefect task of a stage (``.fn`` is the runner: testable without Prefect),
    made on first use: a run without Prefect never imports it (flows/lazy.py)."""
    return LazyTask(name, runner)


def _sections_on(config: ArboragConfig) -> bool:
    return config.sections.strategy != "none"


# The LLM settings that change what the sections/context stages produce.
_LLM = ("summarize.base_url", "summarize.llm_model")


def _staged(names: tuple[str, ...]) -> tuple[str, ...]:
    """The staged files a runner module names in its ``OUTPUTS`` (the module owns the file names)."""
    return tuple(staged(n) for n in names)


# -- ingest: sources -> documents -> sections -> doc_context -> chunks --------------------------
# (table reads/writes can fail transiently on network file systems; LLM calls retry in the client)
INGEST = Stage(
    "ingest", _task("ingest", documents.run_documents), code_version="4", retries=2,
    reads=(SOURCES,), writes=(table("documents"),), config=("ingest",), params=("files",),
    on_cached=documents.cached_ingest_summary, describe="read the sources into documents (unchanged files are not parsed again)",
)
SECTIONS = Stage(
    "sections", _task("sections", sections.run_sections), code_version="1", retries=1,
    reads=(table("documents"),), writes=(table("sections"),), config=("sections", "context.llm", *_LLM), needs=("strategy",),
    enabled=_sections_on, describe="split documents into sections (structural, or semantic with the LLM)",
)
CONTEXT = Stage(
    "context", _task("context", doc_context.run_doc_context), code_version="1", retries=1,
    reads=(table("documents"),), writes=(table("doc_context"),), config=("context", *_LLM), needs=("strategy",),
    enabled=doc_context.headers_enabled, describe="document titles and summaries for the AutoContext chunk headers",
)
SEGMENT = Stage(
    "segment", _task("segment", chunks.run_chunks), code_version="2", retries=1,
    reads=(table("documents"), table("sections"), table("doc_context")), writes=(table("chunks"),),
    config=("segment", "sections.strategy", "context.headers"), params=("strategy",), proof=chunks.chunks_proof,
    describe="cut the ok documents into leaf chunks (inside sections, with headers)",
)

# -- the tree: everything staged under the build key, then sealed as one snapshot ---------------
EMBED = Stage(
    "embed", _task("embed", leaf_vectors.run_leaf_vectors), code_version="1", retries=2,
    reads=(table("chunks"),), writes=_staged(leaf_vectors.OUTPUTS), params=("key",),
    describe="embed the leaves through the embedding cache",
)
TREE = Stage(
    "tree", _task("tree", tree.run_tree), code_version="3", retries=3,
    reads=(table("chunks"), *_staged(leaf_vectors.OUTPUTS)), writes=_staged(tree.OUTPUTS), params=("key",),
    snapshot=("nodes.parquet", "edges.parquet"), describe="cluster, summarize and embed level by level (RAPTOR)",
)
TREE_UPDATE = Stage(
    "tree-update", _task("tree-update", tree_update.run_tree_update), code_version="4", retries=3,
    reads=(table("chunks"), *_staged(leaf_vectors.OUTPUTS), SNAPSHOT), writes=_staged(tree_update.OUTPUTS), params=("key",),
    snapshot=("nodes.parquet", "edges.parquet"), describe="update the published tree locally (only changed clusters re-summarized)",
)
VECTORS = Stage(
    "vectors", _task("vectors", vectors.run_vectors), code_version="2",
    reads=(staged("nodes.parquet"), staged("node_vectors.parquet")), writes=_staged(vectors.OUTPUTS), config=("query.ann_min_rows",), params=("key",),
    snapshot=("vectors.lance",), beside=True, describe="write the nodes and their vectors as a LanceDB table",
)
SPARSE = Stage(
    "sparse", _task("sparse", sparse.run_sparse), code_version="1", retries=3,
    reads=(table("chunks"), staged("nodes.parquet")), writes=_staged(sparse.OUTPUTS), params=("key",),
    snapshot=("sparse",), beside=True, describe="index the nodes for BM25 (tantivy, or Elasticsearch)",
)
LINKS = Stage(
    "links", _task("links", links.run_links), code_version="2",
    reads=(table("chunks"), table("documents")), writes=_staged(links.OUTPUTS), params=("key",),
    snapshot=("links.parquet", "boilerplate.parquet"), describe="link leaves through document titles and the names they mention (IDF), for --mode hop",
)
PUBLISH = Stage(
    "publish", _task("publish", publish.run_publish), code_version="1",
    reads=(table("chunks"), table("documents"), staged("<snapshot files of the stages before>")),
    writes=(SNAPSHOT,), params=("key", "snapshot_files"), describe="seal the staged files as a snapshot and switch the manifest",
)

# -- update: the plan (documents as the sources hold them now) -----------------------------------
PLAN = Stage(
    "plan", _task("plan", plan.run_update_documents), code_version="2", retries=1,
    reads=(SOURCES, table("documents")), writes=(table("documents"),), config=("ingest",), params=("files", "prune", "dry_run"),
    cached=False, describe="read the sources, diff them against documents, prune what is gone",
)

INGEST_PIPELINE: tuple[Stage, ...] = (INGEST, SECTIONS, CONTEXT, SEGMENT)
TREE_PIPELINE: tuple[Stage, ...] = (EMBED, TREE, VECTORS, SPARSE, LINKS, PUBLISH)
BUILD_PIPELINE: tuple[Stage, ...] = INGEST_PIPELINE + TREE_PIPELINE
#: links first (they need no vectors: a cold run's embedding worker is still loading); then the
#: vector table (written by a helper process that imported lancedb meanwhile: flows/update.py)
#: and the sparse index side by side (``beside``: flows/stage.py), both joined before publish
UPDATE_PIPELINE: tuple[Stage, ...] = (LINKS, EMBED, TREE_UPDATE, VECTORS, SPARSE, PUBLISH)
#: What ``arborag update`` runs: the plan and the ingest stages after ingest, then the route
#: ``decide`` names — the incremental tree update, or a full rebuild of the tree (``noop``: none).
UPDATE_BRANCH = Branch(
    "update", before=(PLAN, SECTIONS, CONTEXT, SEGMENT), choose=plan.decide,
    routes=(("incremental", UPDATE_PIPELINE), ("full", TREE_PIPELINE)),
    describe="noop when the published tree holds these leaves; full when there is no tree, a new tree config or drift past update.max_drift; else incremental",
)

PIPELINES: dict[str, tuple[Stage, ...]] = {"ingest": INGEST_PIPELINE, "build": BUILD_PIPELINE, "update": UPDATE_BRANCH.stages}
#: The pipelines that fork (``arborag pipeline`` prints their routes).
BRANCHES: dict[str, Branch] = {"update": UPDATE_BRANCH}
