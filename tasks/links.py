"""Links between leaves, built offline: the graph a multi-hop question walks (docs/METHODS.md §9.1).

HippoRAG 2 builds its graph with an LLM reading every passage; we build ours from what the
text already says, with no model:

- **titles**: every leaf of a document is linked to its document's title (``kind = "title"``).
  A document title is ``documents.title`` (a file stem's ``_`` read as spaces) and, when the
  text opens with a short heading line, that line; a trailing parenthetical (``Green (Steve
  Hillage album)``) is dropped, as a mention never carries it.
- **mentions**: capitalised n-grams of a leaf's text (runs of capitalised words, with lower-case
  connectors such as *of*, *the*, *de* inside a run; every contiguous 1..``max_words`` sub-run
  whose first and last words are not function words), ``kind = "mention"``.

An entity is kept when it reaches at least two documents, not all of them, and at most
``max_doc_share`` of them (5 %, but never fewer than 10 documents);
its weight is its inverse document frequency, ``ln(N_docs / df)``. So a leaf that mentions
*Steve Hillage* is one hop from every leaf of the document titled *Steve Hillage*, and the link
is worth more the rarer the name.

One pure function, :func:`build_links` (polars over Arrow), writes the ``links`` table
(``storage.schemas.LINKS``); the ``links`` stage (``tasks/stages/links.py``) runs it over the
build's (or the update's) leaves, so an update recomputes it from the current leaves: added,
changed and deleted documents are reflected exactly, and document frequencies with them.
"""

from __future__ import annotations

import math

import polars as pl
import pyarrow as pa

from arborag.storage.schemas import LINKS

__all__ = ["CONNECTORS", "STOPWORDS", "build_links", "title_keys"]

#: Lower-case words allowed inside a capitalised run (``Lord of the Rings``, ``Charles de Gaulle``).
CONNECTORS = ("of", "the", "de", "del", "della", "der", "den", "di", "da", "du", "la", "le", "van", "von", "y", "and", "&")

#: Function words that neither start nor end an entity (capitalised at a sentence start, or connectors).
STOPWORDS = frozenset(
    {
        *CONNECTORS, "a", "an", "in", "on", "at", "to", "for", "from", "by", "with", "as", "or", "but", "if", "it", "its",
        "he", "she", "they", "his", "her", "their", "this", "that", "these", "those", "there", "then", "than", "when",
        "while", "after", "before", "during", "since", "although", "however", "also", "both", "we", "i", "you", "our",
        "who", "what", "which", "where", "why", "how", "is", "was", "are", "were", "be", "been", "not", "no", "yes",
        "all", "some", "one", "many", "most", "other", "such", "each", "every", "any", "only", "so", "between",
        "mr", "mrs", "ms", "dr", "st", "jr", "sr", "inc", "ltd", "co",
    }
)

_UP = r"\p{Lu}[\p{L}\p{N}'’\-]*"
_RUN = rf"{_UP}(?:,?\s+(?:(?:{'|'.join(c for c in CONNECTORS if c != '&')}|&)\s+)*{_UP})*"
_PAREN = r"\s*\([^)]*\)\s*$"
_POSSESSIVE = r"['’]s?$"


def _norm(expr: pl.Expr) -> pl.Expr:
    """The key of an entity: lower case, single spaces, no possessive or edge punctuation."""
    return (
        expr.str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars(" .,;:!?\"'’“”()[]")
        .str.replace(_POSSESSIVE, "").str.strip_chars(" -")
    )


def title_keys(documents: pa.Table) -> pl.DataFrame:
    """(doc_id, entity) for every title of every ok document: ``documents.title`` (``_`` as spaces)
    and the text's opening line when it reads as a heading (at most 12 words, no final period)."""
    docs = pl.from_arrow(documents.select(["doc_id", "title", "text", "status"]))
    assert isinstance(docs, pl.DataFrame)
    docs = docs.filter(pl.col("status") == "ok")
    first = pl.col("text").fill_null("").str.strip_chars_start().str.extract(r"^([^\n]{1,120})\n", 1)
    heading = pl.when(first.is_not_null() & (first.str.count_matches(r"\s+") < 12) & ~first.str.contains(r"[.!?:]\s*$")).then(first)
    keys = pl.concat(
        [
            docs.select("doc_id", pl.col("title").fill_null("").str.replace_all("_", " ").alias("raw")),
            docs.select("doc_id", heading.alias("raw")),
        ]
    )
    return (
        keys.drop_nulls("raw")
        .select("doc_id", _norm(pl.col("raw").str.replace(_PAREN, "")).alias("entity"))
        .filter(pl.col("entity").str.len_chars() >= 2)
        .unique(maintain_order=True)
    )


def _mentions(leaves: pl.DataFrame, max_words: int) -> pl.DataFrame:
    """(node_id, doc_id, entity) for every capitalised n-gram of every leaf (distinct).

    The n-grams of each size come from one explode of their start offsets (``int_ranges``), not
    from a filter per (size, offset): ~4 frames instead of ~4 x the longest run's length."""
    runs = (
        leaves.select("node_id", "doc_id", pl.col("text").str.extract_all(_RUN).alias("run"))
        .explode("run")
        .drop_nulls("run")
        .select("node_id", "doc_id", pl.col("run").str.replace_all(r"\s+", " ").str.split(" ").alias("words"))
    )
    if not runs.height or max_words < 1:
        return pl.DataFrame(schema={"node_id": pl.String, "doc_id": pl.String, "entity": pl.String})
    n = pl.col("words").list.len()
    grams = pl.concat([
        runs.filter(n >= size)
        .with_columns(pl.int_ranges(0, n - size + 1).alias("start"))
        .explode("start")
        .select("node_id", "doc_id", pl.col("words").list.slice(pl.col("start"), size).alias("gram"))
        for size in range(1, max_words + 1)
    ])
    first = _norm(pl.col("gram").list.first())
    last = _norm(pl.col("gram").list.last())
    stop = list(STOPWORDS)
    return (
        grams.filter(~first.is_in(stop) & ~last.is_in(stop))
        .select("node_id", "doc_id", _norm(pl.col("gram").list.join(" ")).alias("entity"))
        .filter(pl.col("entity").str.len_chars() >= 2)
        .unique()
    )


def build_links(leaves: pa.Table, documents: pa.Table, *, max_words: int = 4, max_doc_share: float = 0.05,
                min_docs: int = 2, min_docs_cap: int = 10) -> pa.Table:
    """The ``links`` table (``storage.schemas.LINKS``) of ``leaves`` (a CHUNKS table: ``chunk_id``,
    ``doc_id``, ``text``): one row per (leaf, entity, kind), with the entity's document frequency
    and IDF weight. Entities reaching fewer than ``min_docs`` documents, every document (IDF 0),
    or more than ``max_doc_share`` of them (a cap never below ``min_docs_cap``, so a small corpus
    keeps its names) are left out: they link nothing, or everything."""
    lv = pl.from_arrow(leaves.select(["chunk_id", "doc_id", "text"]))
    assert isinstance(lv, pl.DataFrame)
    lv = lv.rename({"chunk_id": "node_id"})
    if lv.height == 0:
        return LINKS.empty_table()
    titles = title_keys(documents).join(lv.select("doc_id").unique(), on="doc_id", how="semi")
    title_rows = lv.select("node_id", "doc_id").join(titles, on="doc_id", how="inner").with_columns(pl.lit("title").alias("kind"))
    mention_rows = _mentions(lv, max_words).with_columns(pl.lit("mention").alias("kind"))
    rows = pl.concat([title_rows.select("node_id", "doc_id", "entity", "kind"), mention_rows.select("node_id", "doc_id", "entity", "kind")])
    rows = rows.unique(["node_id", "entity", "kind"], keep="first")
    n_docs = lv.get_column("doc_id").n_unique()
    cap = max(min_docs_cap, int(math.floor(max_doc_share * n_docs)))
    df = rows.group_by("entity").agg(pl.col("doc_id").n_unique().alias("df"))
    df = df.filter((pl.col("df") >= min_docs) & (pl.col("df") <= cap) & (pl.col("df") < n_docs))
    out = (
        rows.join(df, on="entity", how="inner")
        .with_columns((pl.lit(float(n_docs)) / pl.col("df")).log().alias("weight"))
        .sort(["node_id", "kind", "entity"])
        .select("node_id", "doc_id", "entity", "kind", pl.col("df").cast(pl.Int32), "weight")
    )
    return out.to_arrow().cast(LINKS)
