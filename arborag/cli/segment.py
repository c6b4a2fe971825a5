"""`arborag segment`: cut the corpus's documents into chunks with one strategy."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from arborag.cli.common import CONFIG_OPTION, PREFECT_OPTION, corpus_option
from arborag.cli.ingest import run_ingest_command
from arborag.config import Strategy

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``segment`` to ``app``."""

    @app.command(
        "segment",
        help=(
            "Cut the corpus's documents into chunks with one strategy.\n\n"
            "sentence: sentences packed into chunks of <= 100 tokens (RAPTOR leaves); ffs: fixed "
            "token windows; dfs: windows extended to the next delimiter; dds: windows of whole "
            "delimiter units; rcs: recursive character splitting (LangChain baseline). Sizes come "
            "from the segment section of the config (e.g. ARBORAG_SEGMENT__FFS_WINDOW=512).\n\n"
            "The chunks table keeps several strategies side by side: segmenting with a strategy "
            "replaces that strategy's rows only.\n\n"
            "Examples:\n\n"
            "  arborag segment --corpus .arborag-demo --strategy sentence\n\n"
            "  arborag segment --corpus /tmp/c --strategy dds --no-prefect"
        ),
    )
    def segment(
        corpus: Path = corpus_option("Corpus directory with ingested documents. Env: ARBORAG_CORPUS."),
        strategy: Optional[Strategy] = typer.Option(None, "--strategy", "-s", help="sentence|ffs|dfs|dds|rcs (default: config, sentence)."),
        prefect: Optional[bool] = PREFECT_OPTION,
        as_json: bool = typer.Option(False, "--json", help="Print the run summary as JSON (no progress bar)."),
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        run_ingest_command([], corpus, config, {}, strategy=strategy, segment=True, prefect=prefect, as_json=as_json)
