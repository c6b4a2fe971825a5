"""Gold evidence -> doc_ids of a built corpus, and the gold items of one question.

A dataset's ``evidence.parquet`` (``storage.schemas.EVIDENCE``) names files and titles; a built
corpus knows documents by content hash. :func:`resolve_gold` joins the two (polars) so scoring
can tell whether a retrieved leaf comes from a gold document.

Page-level gold (FinanceBench: ``<doc_name>#page=<n>``, ``n`` counted from 0 as FinanceBench's
``evidence_page_num``): :func:`evidence_page_texts` cuts the text of that page out of the
ingested document (its ``metadata.page_starts``, written by the PDF reader), and
:func:`gold_items` matches retrieved texts against the *page* instead of the evidence snippet.
With the ``doc+text`` match a retrieved text then hits the evidence page when it comes from the
gold document and at least half of its word 5-grams lie on the page, or it holds at least half of
the page's (``metrics.text_overlap >= 0.5``) — so a ~100-token leaf anywhere on the page counts,
and so does a long segment that contains the page; a segment that only grazes it does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

import json
import re

import polars as pl
import pyarrow as pa

from arborag.tasks.evaluation.metrics import GoldItem, normalize_answer

__all__ = ["evidence_page_texts", "gold_items", "page_of", "resolve_gold"]

_PAGE_ID = re.compile(r"#page=(\d+)$")


def _uri_name(uri: str) -> str:
    """The file name of a documents.uri (a path or a file:// URI)."""
    if "://" in uri:
        uri = unquote(urlparse(uri).path)
    return Path(uri).name


def _matches(evidence: pl.DataFrame, docs: pl.DataFrame, left: str, name: str) -> pl.DataFrame:
    """Per evidence row (``_ev``), the doc_ids whose ``key`` equals the evidence's ``left`` column."""
    return (
        evidence.select("_ev", left)
        .join(docs, left_on=left, right_on="key", how="inner")
        .group_by("_ev")
        .agg(pl.col("doc_id").unique().alias(name))
    )


def resolve_gold(evidence: pa.Table, documents: pa.Table) -> dict[str, frozenset[str]]:
    """Map every gold id to the doc_ids of the ingested documents that hold it.

    Tried in order: the documents.uri file name equals the evidence file; the documents.title
    equals the evidence title or file stem; the document text contains the gold text
    (normalized). Only ``status == "ok"`` documents count. A gold id that matches nothing maps
    to an empty set (it can never be retrieved; the report counts such ids). The first two are
    polars joins; the text search runs only for the evidence they leave unresolved.
    """
    docs = pl.DataFrame(documents.select(["doc_id", "uri", "title", "text", "status"])).filter(pl.col("status") == "ok")
    by_name = docs.select("doc_id", pl.col("uri").fill_null("").map_elements(_uri_name, return_dtype=pl.String).alias("key"))
    by_title = docs.filter(pl.col("title").is_not_null() & (pl.col("title") != "")).select(
        "doc_id", pl.col("title").str.strip_chars().alias("key")
    )
    ev = pl.DataFrame(evidence.select(["gold_id", "file", "title", "text"])).with_row_index("_ev")
    ev = ev.with_columns(
        pl.col("title").fill_null("").str.strip_chars().alias("_title"),
        pl.col("file").map_elements(lambda f: Path(f).stem, return_dtype=pl.String).alias("_stem"),
    )
    found = (
        ev.join(_matches(ev, by_name, "file", "_by_name"), on="_ev", how="left")
        .join(_matches(ev, by_title, "_title", "_by_title"), on="_ev", how="left")
        .join(_matches(ev, by_title, "_stem", "_by_stem"), on="_ev", how="left")
        .sort("_ev")
        .select("gold_id", "text", pl.coalesce("_by_name", "_by_title", "_by_stem").alias("doc_ids"))
    )
    norm_docs: list[tuple[str, str]] | None = None
    out: dict[str, frozenset[str]] = {}
    for gold_id, text, doc_ids in found.iter_rows():
        if not doc_ids and text:  # the last resort: the gold text inside a document's text
            if norm_docs is None:
                norm_docs = [(d, normalize_answer(t or "")) for d, t in docs.select("doc_id", "text").iter_rows()]
            needle = normalize_answer(text)
            doc_ids = [doc_id for doc_id, t in norm_docs if needle and needle in t]
        out[gold_id] = frozenset(doc_ids or ())
    return out


def page_of(gold_id: str) -> int | None:
    """The 0-based page number of a page-level gold id (``"<doc>#page=<n>"``), else None."""
    m = _PAGE_ID.search(gold_id)
    return int(m.group(1)) if m else None


def evidence_page_texts(evidence: pa.Table, documents: pa.Table, gold_docs: dict[str, frozenset[str]]) -> dict[str, str]:
    """gold id -> the text of its evidence page, for page-level gold ids whose document
    (``gold_docs``, from :func:`resolve_gold`) records ``page_starts`` in its metadata.

    Page ``n`` runs from ``page_starts[n]`` to ``page_starts[n + 1]`` (the page separator is
    stripped). A gold id whose page cannot be located (no page number, a document without page
    offsets, a page past the end) is left out: scoring then uses the evidence text as before."""
    pages_of = {g: page_of(g) for g in evidence.column("gold_id").to_pylist()}
    wanted = {g: n for g, n in pages_of.items() if n is not None and gold_docs.get(g)}
    if not wanted:
        return {}
    need = set().union(*(gold_docs[g] for g in wanted))
    docs = pl.DataFrame(documents.select(["doc_id", "text", "metadata", "status"])).filter(
        (pl.col("status") == "ok") & pl.col("doc_id").is_in(list(need))
    )
    pages: dict[str, list[str]] = {}
    for doc_id, text, meta in docs.select("doc_id", "text", "metadata").iter_rows():  # a handful of documents
        try:
            starts = list(json.loads(meta or "{}").get("page_starts") or [])
        except (ValueError, AttributeError):
            starts = []
        text = text or ""
        bounds = [*starts, len(text)]
        pages[doc_id] = [text[bounds[i] : bounds[i + 1]].strip() for i in range(len(starts))]
    out: dict[str, str] = {}
    for g, n in wanted.items():
        for d in sorted(gold_docs[g]):
            if d in pages and n < len(pages[d]) and pages[d][n]:
                out[g] = pages[d][n]
                break
    return out


def gold_items(
    gold_ids: Sequence[str],
    gold_texts: Sequence[str] | None,
    gold_docs: dict[str, frozenset[str]],
    page_texts: dict[str, str] | None = None,
) -> list[GoldItem]:
    """The :class:`~arborag.tasks.evaluation.metrics.GoldItem` list of one query row; a gold id with a
    located evidence page (``page_texts``) is matched by the page's text."""
    texts = list(gold_texts or [])
    pages = page_texts or {}
    return [
        GoldItem(gold_id=g, doc_ids=gold_docs.get(g, frozenset()), text=pages.get(g) or (texts[i] if i < len(texts) else ""))
        for i, g in enumerate(gold_ids)
    ]
