"""Polars frames <-> the project's Arrow tables: zero-copy in, conformed to the schema on the way out.

Table transforms between stages (filters, joins, group-bys, sorts) run in polars over Arrow
(``pl.from_arrow``). Polars hands back large strings and large lists; :func:`to_table` casts them
to the table's schema in ``storage/schemas.py`` (same values, so the Parquet files written do
not change) and conforms the result.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from arborag.storage.schemas import ADDED_COLUMNS, SCHEMAS
from arborag.storage.tables import conform

__all__ = ["frame", "to_table"]


def frame(table: pa.Table) -> pl.DataFrame:
    """``table`` as a polars frame (zero-copy where Arrow allows)."""
    out = pl.from_arrow(table)
    assert isinstance(out, pl.DataFrame)
    return out


def to_table(df: pl.DataFrame, name: str) -> pa.Table:
    """``df`` as the Arrow table ``name`` with exactly its schema (column order, types, nullability)."""
    schema = SCHEMAS[name]
    later = set(ADDED_COLUMNS.get(name, ()))  # a frame may leave these out: conform makes them null
    fields = [f for f in schema if f.name in df.columns or f.name not in later]
    arrow = df.select([f.name for f in fields]).to_arrow()
    return conform(name, arrow.cast(pa.schema([pa.field(f.name, f.type) for f in fields])))
