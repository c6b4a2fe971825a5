"""The existing ``documents`` table, indexed with polars so a merge touches only the rows it needs.

An ingest reads a handful of files into a table that may hold 10⁶ documents. Instead of turning
every row into a Python dict, :class:`ExistingDocuments` finds, in one columnar pass, the rows
the files of this run produced before (by uri, including the ``duplicate_uris`` recorded in
``metadata``, and the records ``FILE#L<n>`` of a JSONL file) and keeps a sorted ``doc_id``
column for the few lookups by content. Every other row stays in Arrow and is written back as it
was. When a uri or doc_id appears twice (a table not written by arborag), the later row wins, as
it always has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl
import pyarrow as pa

from arborag.storage.schemas import DOCUMENTS

__all__ = ["ExistingDocuments", "RECORD_URI_PATTERN", "duplicate_uris", "sorted_documents"]

#: A JSONL record's uri ``FILE#L<n>`` belongs to ``FILE`` (same rule as ``merge._file_of``).
RECORD_URI_PATTERN = r"^(.+)#L\d+$"
_SORT_KEY = ["uri", "status", "doc_id"]


def _as_documents(table: pa.Table) -> pa.Table:
    if table.schema == DOCUMENTS:
        return table
    return pa.Table.from_arrays([table.column(f.name).cast(f.type) for f in DOCUMENTS], schema=DOCUMENTS)


def duplicate_uris(metadata: pl.Expr) -> pl.Expr:
    """The ``duplicate_uris`` list of a metadata JSON object (empty when absent or not a list)."""
    found = metadata.str.json_path_match("$.duplicate_uris")
    as_list = pl.when(found.str.starts_with("[")).then(found).otherwise(pl.lit("[]"))
    return as_list.str.json_decode(pl.List(pl.String))


class ExistingDocuments:
    """Row access to an existing documents table for the files of one ingest run."""

    #: lookups by content answered by a search of the sorted ids before a dict replaces it
    LOOKUPS_BEFORE_DICT = 64

    def __init__(self, table: pa.Table, file_uris: Sequence[str]) -> None:
        self.table = _as_documents(table)
        frame = pl.from_arrow(self.table.select(["doc_id", "uri", "metadata", "status"]))
        assert isinstance(frame, pl.DataFrame)
        frame = frame.with_row_index("row")
        ok = frame.filter(pl.col("status") == "ok").unique("doc_id", keep="last", maintain_order=True)
        errors = frame.filter(pl.col("status") == "error").unique("uri", keep="last", maintain_order=True)
        other = frame.filter(~pl.col("status").is_in(["ok", "error"]))
        #: rows of the table that are still rows of the output unless the merge replaces them
        self.kept = pl.concat([ok["row"], errors["row"], other["row"]]).sort()
        self._ids = ok.select("doc_id", "row").sort("doc_id")
        self._by_id: dict[str, int] | None = None
        self._lookups = 0
        self.needed = self._rows_of_files(ok, errors, file_uris)

    @staticmethod
    def _rows_of_files(ok: pl.DataFrame, errors: pl.DataFrame, file_uris: Sequence[str]) -> list[int]:
        """Rows holding a uri of ``file_uris`` (or of their records), and ok rows without metadata."""
        unread = ok.filter(pl.col("metadata").is_null())["row"]
        try:
            duplicates = ok.select("row", duplicate_uris(pl.col("metadata")).alias("uri")).explode("uri")
        except pl.exceptions.PolarsError:  # a list that is not of strings: read those rows in Python
            mentioned = ok.filter(pl.col("metadata").str.contains("duplicate_uris", literal=True))["row"]
            unread = pl.concat([unread, mentioned])
            duplicates = ok.clear().select("row", "uri")
        uris = pl.concat([ok.select("row", "uri"), duplicates.drop_nulls("uri"), errors.select("row", "uri")])
        files = pl.Series("file", list(file_uris), dtype=pl.String).unique()
        file_of = pl.col("uri").str.replace(RECORD_URI_PATTERN, "$1")
        hit = uris.filter(file_of.is_in(files) | pl.col("uri").is_in(files))["row"]
        return pl.concat([hit, unread]).unique().sort().to_list()

    def rows(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The rows at ``indices`` as dicts (only the few rows a merge works on)."""
        if len(indices) == 1:  # a lookup by content, once per new file: a slice is half a take's cost
            return self.table.slice(indices[0], 1).to_pylist()
        return self.table.take(pa.array(indices, type=pa.int64())).to_pylist() if indices else []

    def row_of_doc(self, doc_id: str) -> int | None:
        """The row of the ok document ``doc_id``, or None.

        The first lookups search the sorted ids (one polars call each, ~70 µs); past
        :attr:`LOOKUPS_BEFORE_DICT` of them — a renamed source folder makes every file new by
        uri, each one a lookup — a dict of every ok row is built once (~0.2 s per 10⁶ rows)."""
        if not self._ids.height:  # a first ingest: nothing to look up (and no polars call per new document)
            return None
        if self._by_id is None:
            self._lookups += 1
            if self._lookups <= self.LOOKUPS_BEFORE_DICT:
                ids = self._ids["doc_id"]
                at = int(ids.search_sorted(doc_id, side="left"))
                if at < len(ids) and ids[at] == doc_id:
                    return int(self._ids["row"][at])
                return None
            self._by_id = dict(zip(self._ids["doc_id"].to_list(), self._ids["row"].to_list()))
        return self._by_id.get(doc_id)


def sorted_documents(existing: ExistingDocuments, loaded: set[int], rows: list[dict[str, Any]]) -> pa.Table:
    """The kept rows of ``existing`` not ``loaded`` into the merge, plus ``rows`` (what the merge
    holds now), sorted by ``(uri, status, doc_id)`` (stable), copying at most one take of the data."""
    new = pa.Table.from_pylist(rows, schema=DOCUMENTS)
    n_old = existing.table.num_rows
    keep = existing.kept.filter(~existing.kept.is_in(pl.Series(sorted(loaded), dtype=pl.UInt32)))
    both = pa.concat_tables([existing.table, new])
    keys = pl.from_arrow(both.select(_SORT_KEY))
    assert isinstance(keys, pl.DataFrame)
    order = (
        keys.with_row_index("_at")
        .filter(pl.col("_at").is_in(keep) | (pl.col("_at") >= n_old))
        .sort(_SORT_KEY, maintain_order=True)["_at"]
    )
    return _gather(both, order)


def _gather(table: pa.Table, order: pl.Series, max_runs: int = 4096) -> pa.Table:
    """``table.take(order)``; when ``order`` is a few runs of consecutive rows (an ingest into a
    sorted table: the old rows in order, a few new rows between them) the runs are sliced out
    without copying. Either way the Parquet written from the result is the same bytes."""
    if len(order) == 0:
        return table.slice(0, 0)
    starts = order.diff().ne(1).fill_null(True)
    at = pl.int_range(0, len(order), eager=True).filter(starts)
    if len(at) > max_runs:
        return table.take(order.to_arrow()).combine_chunks()
    ends = [*at.to_list()[1:], len(order)]
    first = order.gather(at).to_list()
    return pa.concat_tables([table.slice(f, e - a) for f, a, e in zip(first, at.to_list(), ends)])
