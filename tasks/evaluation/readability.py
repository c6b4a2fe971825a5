"""Can a person read the tree? Fragment rate and coverage of summaries, line breaks in leaves.

Definitions (docs/EVALUATION.md, "Readability"), written here independently of the
summarizer's own filters so that the metric checks the summarizer rather than repeating it:

- **A whole sentence** (:func:`whole`): no line break; its first character (after opening quotes
  or brackets) is a capital, a digit or a letter of a script without case (Chinese); its last
  character (before closing quotes or brackets) is ``. ? ! …`` or CJK ``。？！``. Sentences are
  cut by the house splitter (:func:`arborag.text.split_sentences`, which also cuts at every
  line break).
- **Fragmented summary**: a summary node (level >= 1) whose text has a line break, or a
  sentence that is not whole. **Fragment rate** = fragmented / summary nodes.
- **Coverage** of a summary: the share of its children (``edges``) from whose text at least
  one of its sentences is quoted (whitespace-normalized containment). Mean over summaries; a
  measure for extractive summaries (an abstractive one quotes nothing, so it scores 0).
- **A line break inside a sentence** (leaves): a ``\\n`` whose line before ends with a
  letter, digit, comma, semicolon or hyphen (no sentence-final punctuation) and whose line after
  starts with a lowercase word (letters followed by a space, punctuation or the end: an e-mail
  address or a link on its own line is not a word, nor a list marker such as ``b)``) — the unmistakable hard wrap ("her
  end\\nwas drawing near").
  A wrap before a capitalised word ("to\\nCinderella") is not counted: the figure is a lower
  bound.

:func:`readability` computes all of them for a published snapshot's ``nodes`` + ``edges``;
:func:`corpus_readability` for a corpus folder. Table work is polars over the Arrow tables; the
per-text checks are string functions mapped over one column.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from arborag.errors import ArboragError
from arborag.storage.corpus import Corpus
from arborag.text import split_sentences

__all__ = ["corpus_readability", "fragmented", "readability", "wrap_breaks", "whole"]

_OPEN = "\"'“‘([«¿¡"
_END = re.compile(r"[.?!…。？！][\"'”’)\]»]*$")
_WRAP = re.compile(r"[\w,;\-][ \t]*\n[ \t]*[a-z][a-z'’-]*(?=[\s,.;:!?]|$)")


def whole(sentence: str) -> bool:
    """Whether ``sentence`` is a whole sentence (module docs)."""
    s = sentence.strip()
    if not s or "\n" in s or not _END.search(s):
        return False
    first = s.lstrip(_OPEN)[:1]
    return bool(first) and (first.isdigit() or (first.isalpha() and not first.islower()))


def fragmented(summary: str) -> bool:
    """A summary with a line break or a sentence that is not whole."""
    text = summary.strip()
    if not text:
        return False  # an empty summary is counted apart (``empty``), not as a fragment
    return "\n" in text or not all(whole(s) for s in split_sentences(text))


def wrap_breaks(text: str) -> int:
    """Line breaks inside a sentence (module docs) in ``text``."""
    return len(_WRAP.findall(text))


def _quoted(summary: str, child: str) -> bool:
    body = " ".join(child.split())
    return any(" ".join(s.split()) in body for s in split_sentences(summary))


def readability(nodes: pa.Table, edges: pa.Table) -> dict[str, Any]:
    """Fragment rate, coverage and leaf line breaks of one tree (``nodes``/``edges`` tables)."""
    df = pl.DataFrame(nodes.select(["node_id", "level", "text"]))
    summaries = df.filter(pl.col("level") >= 1)
    leaves = df.filter(pl.col("level") == 0)
    summ = summaries.with_columns(
        pl.col("text").map_elements(fragmented, return_dtype=pl.Boolean).alias("fragmented"),
        (pl.col("text").str.strip_chars() == "").alias("empty"),
        pl.col("text").map_elements(lambda t: len(split_sentences(t)), return_dtype=pl.Int64).alias("sentences"),
        pl.col("text").map_elements(lambda t: sum(not whole(s) for s in split_sentences(t)), return_dtype=pl.Int64).alias("partial"),
    )
    leaf = leaves.with_columns(pl.col("text").map_elements(wrap_breaks, return_dtype=pl.Int64).alias("breaks"))
    e = pl.DataFrame(edges.select(["parent_id", "child_id"]))
    pairs = (
        e.join(summaries.select(pl.col("node_id").alias("parent_id"), pl.col("text").alias("summary")), on="parent_id")
        .join(df.select(pl.col("node_id").alias("child_id"), pl.col("text").alias("child")), on="child_id")
    )
    pairs = pairs.with_columns(
        pl.struct(["summary", "child"]).map_elements(lambda r: _quoted(r["summary"], r["child"]), return_dtype=pl.Boolean).alias("quoted")
    )
    per_parent = pairs.group_by("parent_id").agg(pl.col("quoted").mean().alias("coverage"))
    n_summ = summ.height
    n_sent = int(summ["sentences"].sum()) if n_summ else 0
    return {
        "summaries": n_summ,
        "fragmented": int(summ["fragmented"].sum()) if n_summ else 0,
        "fragment_rate": float(summ["fragmented"].mean()) if n_summ else None,  # type: ignore[arg-type]
        "empty_summaries": int(summ["empty"].sum()) if n_summ else 0,
        "summary_sentences": n_sent,
        "whole_sentence_share": (1.0 - int(summ["partial"].sum()) / n_sent) if n_sent else None,
        "coverage": float(per_parent["coverage"].mean()) if per_parent.height else None,  # type: ignore[arg-type]
        "leaves": leaf.height,
        "leaves_with_wrap_breaks": int((leaf["breaks"] > 0).sum()) if leaf.height else 0,
        "wrap_breaks": int(leaf["breaks"].sum()) if leaf.height else 0,
    }


def corpus_readability(corpus_dir: str | Path) -> dict[str, Any]:
    """:func:`readability` of a corpus's published snapshot; ``{}`` when it has none."""
    corpus = Corpus(corpus_dir)
    try:
        nodes = pq.read_table(corpus.snapshot_table_path("nodes"), columns=["node_id", "level", "text"])
        edges = pq.read_table(corpus.snapshot_table_path("edges"), columns=["parent_id", "child_id"])
    except (ArboragError, OSError, KeyError, pa.ArrowInvalid):
        return {}
    return readability(nodes, edges)
