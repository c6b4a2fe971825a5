"""One leaf per repeated text: signature blocks, certifications, disclaimers and page furniture that
occur verbatim in several places become one leaf, with every place recorded as provenance.

Two chunks *repeat* each other when their texts have the same :func:`repeat_key`: the text after
Unicode NFKC and case folding, with every run of whitespace and punctuation read as one space.
Digits and symbols are kept, so two table rows with different figures are not repeats.

:func:`collapse_repeats` keeps the first occurrence of each text in (doc_id, ordinal) order and
records the others on it: the kept row gains ``doc_ids`` (every document the text occurs in,
sorted) and ``repeats`` (the chunk id and document of each occurrence not kept, in document
order). With ``within_document`` (per-document trees) only repeats inside one document collapse:
each document's tree still holds all of its own text. :func:`repeats_table` is the snapshot's
``repeats`` table (``storage.schemas.REPEATS``): one row per occurrence not kept, with the leaf
that stands for it. :func:`occurrence_keys` and :func:`published_occurrence_keys` say, for the
leaves of a run and for a published snapshot, which occurrence is where, so an update compares them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from arborag.storage.frames import frame
from arborag.storage.schemas import REPEATS

__all__ = ["LEAF_FIELDS", "collapse_repeats", "occurrence_keys", "published_occurrence_keys", "repeat_key", "repeat_keys", "repeats_table"]

_OCCURRENCE = pa.struct([pa.field("chunk_id", pa.string()), pa.field("doc_id", pa.string())])
#: The columns :func:`collapse_repeats` adds to the chunks it keeps.
LEAF_FIELDS = (pa.field("doc_ids", pa.list_(pa.string())), pa.field("repeats", pa.list_(_OCCURRENCE)))

_SEPARATORS = r"[\p{P}\s]+"


def repeat_keys(texts: Sequence[str]) -> list[str]:
    """The :func:`repeat_key` of each text (one regex pass over all of them)."""
    folded = pl.Series("t", [unicodedata.normalize("NFKC", t).casefold() for t in texts], dtype=pl.String)
    keys = folded.str.replace_all(_SEPARATORS, " ").str.strip_chars(" ").to_list()
    # a text of punctuation alone keeps itself as its key (it repeats only verbatim)
    return [k if k else "\0" + t for k, t in zip(keys, texts)]


_ASCII_PUNCTUATION = "".join(chr(c) for c in range(128) if unicodedata.category(chr(c)).startswith("P"))
_ASCII_LOWER = bytes.maketrans(bytes(range(65, 91)), bytes(range(97, 123)))
_ASCII_SEPARATORS = (_ASCII_PUNCTUATION + "\t\n\x0b\x0c\r ").encode("ascii")


def _group_keys(texts: Sequence[str]) -> list[object]:
    """A key per text, equal exactly when the texts' :func:`repeat_key` are equal, computed fast: a
    text's key with its separators deleted (for ASCII text one C-level ``bytes.translate``) is equal
    for any two repeats, so only texts that share it with another get their full key; the rest are
    alone (their own position)."""
    coarse: list[object] = [None] * len(texts)
    other = [i for i, t in enumerate(texts) if not t.isascii()]
    full: dict[int, str] = dict(zip(other, repeat_keys([texts[i] for i in other])))
    for i, t in enumerate(texts):
        coarse[i] = full[i].replace(" ", "") if i in full else t.encode("ascii").translate(_ASCII_LOWER, _ASCII_SEPARATORS).decode("ascii")
    seen: dict[object, int] = {}
    for c in coarse:
        seen[c] = seen.get(c, 0) + 1
    shared = [i for i, c in enumerate(coarse) if seen[c] > 1 and i not in full]
    full.update(zip(shared, repeat_keys([texts[i] for i in shared])))
    return [full[i] if seen[c] > 1 else i for i, c in enumerate(coarse)]


def repeat_key(text: str) -> str:
    """What two texts must share to be repeats: NFKC, case folded, whitespace and punctuation runs
    read as one space (digits and symbols kept)."""
    return repeat_keys([text])[0]


def collapse_repeats(chunks: pa.Table, *, within_document: bool = False) -> pa.Table:
    """The chunks with one row per repeated text (module docs), sorted by (doc_id, ordinal,
    start_char, chunk_id), with the :data:`LEAF_FIELDS` columns added. ``chunks``: a CHUNKS table
    (``chunk_id``, ``doc_id``, ``ordinal``, ``start_char``, ``text`` at least)."""
    if any(f.name in chunks.column_names for f in LEAF_FIELDS):
        raise ValueError("collapse_repeats: the chunks already carry doc_ids/repeats; pass the chunks table, not collapsed leaves")
    order = pc.sort_indices(chunks, sort_keys=[(k, "ascending") for k in ("doc_id", "ordinal", "start_char", "chunk_id")])
    chunks = chunks.take(order)
    schema = pa.schema([*chunks.schema, *LEAF_FIELDS])
    n = chunks.num_rows
    docs = chunks.column("doc_id").to_pylist()
    keys = _group_keys(chunks.column("text").to_pylist())
    first: dict[object, int] = {}
    keep_of = np.empty(n, np.int64)
    for i, (doc, key) in enumerate(zip(docs, keys)):
        keep_of[i] = first.setdefault((doc, key) if within_document else key, i)
    kept = np.flatnonzero(keep_of == np.arange(n))
    if kept.size == n:  # nothing repeats: every chunk is its own leaf
        doc_ids = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), chunks.column("doc_id").combine_chunks().cast(pa.string()))
        empty = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], _OCCURRENCE))
        return pa.Table.from_arrays([*chunks.columns, doc_ids, empty], schema=schema)
    others: dict[int, list[int]] = {}
    for i in np.flatnonzero(keep_of != np.arange(n)).tolist():
        others.setdefault(int(keep_of[i]), []).append(i)
    # doc_ids: the kept chunk's own document, or every document of its text (sorted); repeats: the others
    doc_values: list[str] = []
    doc_sizes = np.ones(kept.size, np.int64)
    rep_rows: list[int] = []
    rep_sizes = np.zeros(kept.size, np.int64)
    for j, i in enumerate(kept.tolist()):
        more = others.get(i)
        if more is None:
            doc_values.append(docs[i])
            continue
        ds = sorted({docs[i], *(docs[k] for k in more)})
        doc_values.extend(ds)
        doc_sizes[j] = len(ds)
        rep_rows.extend(more)
        rep_sizes[j] = len(more)
    doc_ids = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(doc_sizes)]).astype(np.int32)), pa.array(doc_values, pa.string()))
    rep_idx = pa.array(rep_rows, pa.int64())
    occ = pa.StructArray.from_arrays([chunks.column("chunk_id").take(rep_idx).combine_chunks().cast(pa.string()),
                                      chunks.column("doc_id").take(rep_idx).combine_chunks().cast(pa.string())], fields=list(_OCCURRENCE))
    repeats = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(rep_sizes)]).astype(np.int32)), occ)
    out = chunks.take(pa.array(kept))
    return pa.Table.from_arrays([*out.columns, doc_ids, repeats], schema=schema)


def repeats_table(leaves: pa.Table) -> pa.Table:
    """The ``repeats`` table of collapsed ``leaves``: one row per occurrence not kept (``chunk_id``)
    with the leaf that stands for it (``node_id``), in the leaves' order. Leaves without the
    ``repeats`` column (chunks that were never collapsed) have none."""
    if "repeats" not in leaves.column_names or leaves.num_rows == 0:
        return REPEATS.empty_table()
    reps = leaves.column("repeats").combine_chunks()
    parents = pc.list_parent_indices(reps)
    flat = pc.list_flatten(reps)
    node_ids = leaves.column("chunk_id").combine_chunks().take(parents)
    return pa.Table.from_arrays([pc.struct_field(flat, "chunk_id").cast(pa.string()), node_ids.cast(pa.string())], schema=REPEATS)


def occurrence_keys(leaves: pa.Table) -> pl.DataFrame:
    """What ``leaves`` (collapsed) hold, one row per occurrence: ``doc_id``, ``chunk_id``, ``header``
    (a leaf's, null read as ""; "" for an occurrence not kept) and ``stands_for`` (the leaf that
    stands for an occurrence not kept; "" for a leaf). Equal to :func:`published_occurrence_keys`
    of the snapshot built from them, so an update can tell what changed."""
    kept = frame(leaves.select(["doc_id", "chunk_id", "header"])).with_columns(pl.col("header").fill_null(""), pl.lit("").alias("stands_for"))
    if "repeats" not in leaves.column_names:
        return kept
    reps = leaves.column("repeats").combine_chunks()
    flat = pc.list_flatten(reps)
    others = pl.DataFrame({
        "doc_id": pc.struct_field(flat, "doc_id").to_pylist(),
        "chunk_id": pc.struct_field(flat, "chunk_id").to_pylist(),
        "header": [""] * len(flat),
        "stands_for": leaves.column("chunk_id").combine_chunks().take(pc.list_parent_indices(reps)).to_pylist(),
    }, schema=kept.schema)
    return pl.concat([kept, others])


def published_occurrence_keys(chunks: pa.Table, repeats: pa.Table | None) -> pl.DataFrame:
    """:func:`occurrence_keys` of a snapshot: its ``chunks`` (every occurrence) and ``repeats`` (None:
    a snapshot written before the table, whose chunks are all leaves)."""
    ch = frame(chunks.select(["doc_id", "chunk_id", "header"])).with_columns(pl.col("header").fill_null(""))
    if repeats is None or repeats.num_rows == 0:
        return ch.with_columns(pl.lit("").alias("stands_for"))
    rep = frame(repeats.select(["chunk_id", "node_id"])).rename({"node_id": "stands_for"})
    return ch.join(rep, on="chunk_id", how="left", maintain_order="left").select(
        "doc_id", "chunk_id",
        pl.when(pl.col("stands_for").is_null()).then(pl.col("header")).otherwise(pl.lit("")).alias("header"),
        pl.col("stands_for").fill_null(""),
    )
