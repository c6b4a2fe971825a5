"""What the segment stage may reuse: the chunk rows of documents segmented before with the same inputs.

A document's chunks depend on its text (``doc_id`` is the hash of it), its ``mime`` (which says
whether its lines are records or wrapped prose), its sections (``section_id``, start, end: when
``sections.strategy`` is on) and on what is the same for every document of a run — the
strategy and its parameters with the tokenizer (``params_hash``), the sections' strategies,
``segment.within_sections``, the reading view's version and the segmentation code. The segment
stage hashes the run-wide part into one ``setup`` string; this module keeps the per-document
part.

After every segment run the stage writes, per strategy, ``cache/segment/<strategy>.parquet``
(schema :data:`~arborag.storage.schemas.SEGMENT_KEYS`: ``doc_id, mime, sections`` of every ok
document it segmented or kept) with the ``setup`` and the content hash of the ``chunks.parquet``
it describes in the file's metadata. The next run reuses a document's rows only when:

- the file's ``setup`` equals this run's (else every document is segmented again);
- ``chunks.parquet`` is still exactly the file it describes (a chunks table written by anything
  else, or a run that stopped between the two writes, makes it stale: everything is segmented);
- the document's ``doc_id``, ``mime`` and sections all equal what the file holds for it.

The file is a cache: deleting it costs one full segmentation, never a wrong chunk.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa

from arborag.storage.schemas import SEGMENT_KEYS
from arborag.storage.tables import read_keyed_parquet, write_keyed_parquet

__all__ = ["KEYS_DIR", "doc_keys", "keys_path", "read_keys", "reusable", "write_keys"]

KEYS_DIR = "segment"  # under the corpus cache folder
_SETUP = b"setup"
_CHUNKS = b"chunks"
_ON = ["doc_id", "mime", "sections"]


def keys_path(cache_dir: Path, strategy: str) -> Path:
    """Where the keys of ``strategy``'s rows live."""
    return Path(cache_dir) / KEYS_DIR / f"{strategy}.parquet"


def doc_keys(documents: pl.DataFrame, sections: pa.Table | None) -> pl.DataFrame:
    """``doc_id, mime, sections`` of every row of ``documents``: ``sections`` is the document's
    section rows as ``id:start:end`` joined by ``;`` in start order (what segmentation reads of
    them), null when it has none or ``sections`` is None (sections off)."""
    keys = documents.select(pl.col("doc_id").cast(pl.String), pl.col("mime").cast(pl.String))
    if sections is None or sections.num_rows == 0:
        return keys.with_columns(pl.lit(None, dtype=pl.String).alias("sections"))
    sec = pl.from_arrow(sections.select(["doc_id", "section_id", "start_char", "end_char"]))
    assert isinstance(sec, pl.DataFrame)
    sig = (
        sec.sort(["doc_id", "start_char", "end_char", "section_id"])
        .group_by("doc_id", maintain_order=True)
        .agg(pl.format("{}:{}:{}", "section_id", "start_char", "end_char").str.join(";").alias("sections"))
    )
    return keys.join(sig, on="doc_id", how="left", maintain_order="left")


def read_keys(path: Path, *, setup: str, chunks: str) -> pl.DataFrame | None:
    """The keys file at ``path`` when it was written for this ``setup`` and for the chunks file
    whose content hash is ``chunks``; None when absent, unreadable or stale (nothing reusable:
    segment everything, the next write replaces it)."""
    table = read_keyed_parquet(path, SEGMENT_KEYS, {_SETUP: setup.encode(), _CHUNKS: chunks.encode()})
    if table is None:
        return None
    out = pl.from_arrow(table)
    assert isinstance(out, pl.DataFrame)
    return out.with_columns(pl.col("sections").cast(pl.String))


def reusable(keys: pl.DataFrame, prior: pl.DataFrame | None) -> pl.Series:
    """The ``doc_id`` of every row of ``keys`` whose key equals the one ``prior`` holds for it."""
    if prior is None or keys.height == 0:
        return pl.Series("doc_id", [], dtype=pl.String)
    return keys.join(prior.select(_ON), on=_ON, how="semi", nulls_equal=True)["doc_id"]


def write_keys(path: Path, keys: pl.DataFrame, *, setup: str, chunks: str) -> None:
    """Write ``keys`` (from :func:`doc_keys`) for ``setup`` and the chunks file hashed ``chunks``."""
    write_keyed_parquet(keys.select(_ON).to_arrow().cast(SEGMENT_KEYS), path, {_SETUP: setup.encode(), _CHUNKS: chunks.encode()})
