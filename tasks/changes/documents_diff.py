"""The plan of ``arborag update``: which sources were added, changed, deleted or left unchanged.

:func:`diff_documents` compares the ``documents`` table of a corpus with what the sources hold
now, by uri and content hash (``doc_id`` is the hash of the normalized text), in polars over Arrow: one
lazy plan reads both tables, joins them by uri and classifies every uri; the contents to add and
remove are then checked only for the few ids that gained or lost a uri. No Python loop over rows,
and the big columns of the table (``text``) are never touched. It is pure: nothing is read or
written (measured at 10⁶ documents: docs/BENCHMARKS.md, "What we tried").

``existing`` is a DOCUMENTS table. An ``ok`` row holds its content at its ``uri`` and at every
uri listed in ``metadata.duplicate_uris`` (the same text found at several uris is one document);
an ``error`` row records that its uri failed to read; rows of any other status are not ours and
are ignored. When a uri is claimed twice (a table not written by arborag), the later row wins, as
in the ingest merge. ``incoming`` has one row per source uri read now: ``uri``, ``doc_id`` and
optionally ``status`` (absent: every row is ok; a row is ok only when ``status == "ok"``). An
incoming uri listed twice keeps its later row.

Per uri (every output is sorted by uri):

- **added**: read ok now, and no document was held at this uri before (a uri whose earlier read
  failed counts as added once it reads).
- **changed**: read ok now, with a different content hash than before (``old_doc_id``).
- **unchanged**: read ok now, same content hash.
- **deleted**: the uri is gone from ``incoming``. ``doc_id`` is the document it held, or null
  when it only had an error row (that error row is stale and goes too).
- **failed**: the uri is present but did not read now (``status != "ok"``). This is **not** a
  delete: a file that fails to read keeps the document read from it before (``doc_id`` = that
  document, null when there was none), exactly as ``ingest`` keeps it; the next successful read
  decides. A failing file is removed only by removing the file.

Per content hash, what the tree must do (several uris can hold one content):

- ``new_doc_ids``: contents of added/changed uris that no document of ``existing`` holds: the
  only ones to segment and embed. Content that moved to another uri, or a second copy of a known
  text, is not new.
- ``gone_doc_ids``: documents of ``existing`` that no uri holds after the update (every uri
  holding them deleted or changed, none failed or unchanged): the ones whose leaves must leave
  the tree. A text still held at a duplicate uri stays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from arborag.errors import SchemaError
from arborag.storage.schemas import DOCUMENTS

__all__ = ["DocumentsDiff", "KINDS", "diff_documents"]

#: The per-uri classes, in the order the plan prints them.
KINDS = ("added", "changed", "deleted", "unchanged", "failed")
_URI = DOCUMENTS.field("uri").type
_ID = DOCUMENTS.field("doc_id").type


@dataclass(frozen=True)
class DocumentsDiff:
    """The update plan: per-uri tables (sorted by uri) and the content hashes to add and remove."""

    added: pa.Table  # uri, doc_id
    changed: pa.Table  # uri, doc_id, old_doc_id
    deleted: pa.Table  # uri, doc_id (null: only an error row was there)
    unchanged: pa.Table  # uri, doc_id
    failed: pa.Table  # uri, doc_id (the earlier document kept; null when none)
    new_doc_ids: pa.Array  # sorted: contents to segment and embed
    gone_doc_ids: pa.Array  # sorted: documents to remove from the tree, vectors and sparse index

    @property
    def counts(self) -> dict[str, int]:
        """Rows per class plus ``new_docs`` / ``gone_docs``, for the printed plan and ``runs``."""
        out = {kind: getattr(self, kind).num_rows for kind in KINDS}
        out["new_docs"] = len(self.new_doc_ids)
        out["gone_docs"] = len(self.gone_doc_ids)
        return out

    @property
    def is_noop(self) -> bool:
        """True when the update changes nothing (failures keep what they held)."""
        return not (self.added.num_rows or self.changed.num_rows or self.deleted.num_rows)


def diff_documents(existing: pa.Table, incoming: pa.Table) -> DocumentsDiff:
    """Compare the ``documents`` table with the sources read now (see the module docstring).

    Raises :class:`SchemaError` when a needed column is missing or an ok incoming row has no
    ``doc_id``.
    """
    base = _existing_frame(existing)
    ok_rows = base.filter(pl.col("status") == "ok")
    old, claims = _existing_uris(base, ok_rows)
    code = {name: i for i, name in enumerate(KINDS)}
    kind = (
        pl.when(pl.col("_new").is_null())
        .then(code["deleted"])
        .when(~pl.col("ok"))
        .then(code["failed"])
        .when(pl.col("old_doc_id").is_null())
        .then(code["added"])
        .when(pl.col("old_doc_id") == pl.col("new_doc_id"))
        .then(code["unchanged"])
        .otherwise(code["changed"])
        .cast(pl.UInt8)
    )
    # the one plan over the big tables: uris before and now, joined and classified
    joined = (
        old.join(_incoming(incoming), on="uri", how="full", coalesce=True)
        .select("uri", "old_doc_id", "new_doc_id", kind.alias("kind"))
        .sort("uri")
        .collect()
    )

    def rows(*names: str) -> pl.DataFrame:
        return joined.filter(pl.col("kind").is_in([code[n] for n in names]))

    # contents: only ids that lost or gained a uri can be gone or new (a few), checked against the rest
    lost = rows("deleted", "changed")["old_doc_id"].drop_nulls()
    if joined["old_doc_id"].is_not_null().sum() < claims:  # a uri claimed twice: some document may hold none
        orphans = ok_rows.select("doc_id").join(old.select(pl.col("old_doc_id").alias("doc_id")), on="doc_id", how="anti")
        lost = pl.concat([lost, orphans.collect()["doc_id"]])
    lost = lost.unique()
    still = pl.concat([
        rows("added", "changed", "unchanged").filter(pl.col("new_doc_id").is_in(lost))["new_doc_id"],
        rows("failed").filter(pl.col("old_doc_id").is_in(lost))["old_doc_id"],
    ])
    gone = lost.filter(~lost.is_in(still))
    fresh = rows("added", "changed")["new_doc_id"].unique()
    known = ok_rows.select("doc_id").filter(pl.col("doc_id").is_in(fresh)).collect()["doc_id"]
    return DocumentsDiff(
        added=_table(rows("added").select("uri", pl.col("new_doc_id").alias("doc_id"))),
        changed=_table(rows("changed").select("uri", pl.col("new_doc_id").alias("doc_id"), "old_doc_id")),
        deleted=_table(rows("deleted").select("uri", pl.col("old_doc_id").alias("doc_id"))),
        unchanged=_table(rows("unchanged").select("uri", pl.col("new_doc_id").alias("doc_id"))),
        failed=_table(rows("failed").select("uri", pl.col("old_doc_id").alias("doc_id"))),
        new_doc_ids=_ids(fresh.filter(~fresh.is_in(known)).sort()),
        gone_doc_ids=_ids(gone.sort()),
    )


# -- inputs ---------------------------------------------------------------------------------------
def _strings(table: pa.Table, name: str, columns: tuple[str, ...]) -> pl.LazyFrame:
    """``columns`` of ``table`` as a lazy frame of strings (zero-copy for string columns)."""
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise SchemaError(name, f"missing column(s) {', '.join(missing)} (need {', '.join(columns)})")
    arrays = [table.column(c) for c in columns]
    arrays = [a if pa.types.is_string(a.type) or pa.types.is_large_string(a.type) else a.cast(pa.string()) for a in arrays]
    frame = pl.from_arrow(pa.Table.from_arrays(arrays, names=list(columns)))
    assert isinstance(frame, pl.DataFrame)
    return frame.lazy()


def _existing_frame(existing: pa.Table) -> pl.LazyFrame:
    """``row, doc_id, uri, status, metadata`` of the documents table (row = its row number)."""
    if "metadata" in existing.column_names:
        return _strings(existing, "documents", ("doc_id", "uri", "status", "metadata")).with_row_index("row")
    lf = _strings(existing, "documents", ("doc_id", "uri", "status")).with_row_index("row")
    return lf.with_columns(pl.lit(None, dtype=pl.String).alias("metadata"))


def _existing_uris(base: pl.LazyFrame, ok: pl.LazyFrame) -> tuple[pl.LazyFrame, int]:
    """One row per uri known before: ``uri, old_doc_id`` (null for a uri with only an error row),
    and how many (uri, document) claims the table makes (more than the uris: a uri claimed twice)."""
    primary = ok.select("row", pl.lit(0, dtype=pl.Int32).alias("k"), "uri", "doc_id")
    duplicates = _duplicates(ok)
    claims = ok.select(pl.len()).collect().item() + duplicates.height
    pairs = pl.concat([primary, duplicates.lazy()]).sort(["row", "k"]).unique("uri", keep="last")
    errors = (
        base.filter(pl.col("status") == "error")
        .select("uri")
        .unique()
        .join(pairs, on="uri", how="anti")
        .select("uri", pl.lit(None, dtype=pl.String).alias("doc_id"))
    )
    return pl.concat([pairs.select("uri", "doc_id"), errors]).rename({"doc_id": "old_doc_id"}), claims


def _duplicates(ok: pl.LazyFrame) -> pl.DataFrame:
    """``row, k, uri, doc_id`` for every uri in ``metadata.duplicate_uris`` of an ok row (k >= 1).

    Only rows whose metadata mentions ``duplicate_uris`` (a few) are parsed. Entries are read
    as strings, as the ingest merge reads them (a number becomes its text; null is skipped); when
    some list holds lists or objects, those rows are parsed in Python and only string entries
    count; a value that is not a list, or metadata that is not JSON, lists nothing.
    """
    rows = ok.filter(pl.col("metadata").str.contains("duplicate_uris", literal=True)).select("row", "doc_id", "metadata").collect()
    if not rows.height:
        return pl.DataFrame(schema={"row": pl.UInt32, "k": pl.Int32, "uri": pl.String, "doc_id": pl.String})
    found = pl.col("metadata").str.json_path_match("$.duplicate_uris")
    as_list = pl.when(found.str.starts_with("[")).then(found).otherwise(pl.lit("[]"))
    try:
        listed = rows.select("row", "doc_id", as_list.str.json_decode(pl.List(pl.String)).alias("uri"))
    except pl.exceptions.PolarsError:  # not a list of strings somewhere: parse these few rows in Python
        listed = pl.DataFrame(
            {"row": rows["row"], "doc_id": rows["doc_id"], "uri": [_listed_uris(m) for m in rows["metadata"]]},
            schema={"row": pl.UInt32, "doc_id": pl.String, "uri": pl.List(pl.String)},
        )
    return (
        listed.with_columns(pl.int_ranges(1, pl.col("uri").list.len() + 1, dtype=pl.Int32).alias("k"))
        .explode(["uri", "k"])
        .drop_nulls("uri")
        .select("row", "k", "uri", "doc_id")
    )


def _listed_uris(metadata: str | None) -> list[str]:
    try:
        meta = json.loads(metadata) if metadata else {}
    except json.JSONDecodeError:
        return []
    found = meta.get("duplicate_uris") if isinstance(meta, dict) else None
    return [u for u in found if isinstance(u, str)] if isinstance(found, list) else []


def _incoming(incoming: pa.Table) -> pl.LazyFrame:
    """``uri, new_doc_id, ok, _new`` with one row per uri (the later row wins)."""
    has_status = "status" in incoming.column_names
    lf = _strings(incoming, "incoming documents", ("uri", "doc_id", "status") if has_status else ("uri", "doc_id"))
    ok = (pl.col("status") == "ok").fill_null(False) if has_status else pl.lit(True)
    lf = lf.select("uri", pl.col("doc_id").alias("new_doc_id"), ok.alias("ok"), pl.lit(True).alias("_new"))
    no_uri, no_id = lf.select(
        pl.col("uri").is_null().sum(), (pl.col("ok") & pl.col("new_doc_id").is_null()).sum()
    ).collect().row(0)
    if no_uri:
        raise SchemaError("incoming documents", f"{no_uri} row(s) have no uri")
    if no_id:
        raise SchemaError("incoming documents", f"{no_id} ok row(s) have no doc_id")
    return lf.unique("uri", keep="last")


# -- outputs --------------------------------------------------------------------------------------
def _table(df: pl.DataFrame) -> pa.Table:
    arrow = df.to_arrow()
    return pa.Table.from_arrays([arrow.column(c).cast(_URI if c == "uri" else _ID) for c in df.columns], names=df.columns)


def _ids(ids: pl.Series) -> pa.Array:
    return ids.to_arrow().cast(_ID)
