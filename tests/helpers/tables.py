"""Comparing a freshly written table with a saved Parquet fixture (tests/fixtures/)."""

from __future__ import annotations

import polars as pl


def first_difference(name: str, fresh: pl.DataFrame, saved: pl.DataFrame) -> str:
    """Where ``fresh`` first differs from ``saved`` (schema, row count, then column by column,
    as text), or "" when they are equal."""
    if fresh.schema != saved.schema:
        return f"{name}: schema {dict(fresh.schema)} != saved {dict(saved.schema)}"
    if fresh.height != saved.height:
        return f"{name}: {fresh.height} rows, the fixture has {saved.height}"
    for col in fresh.columns:
        if fresh[col].dtype.is_nested():  # lists (doc_ids, keywords): compared as Python values
            rows = [i for i, (a, b) in enumerate(zip(fresh[col].to_list(), saved[col].to_list(), strict=True)) if a != b]
        else:
            diff = (fresh[col].cast(pl.Utf8, strict=False) != saved[col].cast(pl.Utf8, strict=False)).fill_null(True)
            both_null = fresh[col].is_null() & saved[col].is_null()
            rows = (diff & ~both_null).arg_true().to_list()
        if rows:
            i = int(rows[0])
            a, b = fresh[col].slice(i, 1).to_list()[0], saved[col].slice(i, 1).to_list()[0]
            return f"{name}.{col}: {len(rows)} row(s) differ; row {i}: fresh {a!r} != saved {b!r}"
    return ""
