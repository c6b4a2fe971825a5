"""`arborag add`: index the named files into a built corpus and keep every other document."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from arborag.cli.common import CONFIG_OPTION, FOLLOW_EXTERNAL_SYMLINKS_OPTION, NO_WAIT_OPTION, PREFECT_OPTION, check_corpus_path, require_corpus


def register(app: typer.Typer) -> None:
    @app.command(
        "add",
        help=(
            "Index the named files (new or changed) into a built corpus; every other document stays.\n\n"
            "The counterpart of `arborag update`: update makes the corpus hold exactly its SOURCES and "
            "deletes documents whose file is not among them; add deletes nothing. Both run the same "
            "incremental path — new leaves are assigned to the fitted clusters and only the clusters "
            "whose membership changed are re-summarized (a full rebuild only past update.max_drift, "
            "said why) — and publish a new snapshot atomically. A file the corpus holds unchanged is a "
            "no-op. Exit codes as update's: 0 done, 3 a file failed to read in a new way (listed with "
            "its reason), 1 error.\n\n"
            "Example:\n\n"
            "  arborag add notes/analyst_notes.txt --corpus /tmp/demo\n\n"
            "  arborag add new_filings/ --corpus /tmp/demo --dry-run"
        ),
    )
    def add(
        files: list[Path] = typer.Argument(..., help="Files or folders to index (added or re-read); nothing else is touched."),
        corpus: Path = typer.Option(..., "--corpus", "-c", callback=check_corpus_path, help="Corpus directory built by `arborag build`."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and the estimated embedding and summary work; change nothing."),
        prefect: Optional[bool] = PREFECT_OPTION,
        no_wait: bool = NO_WAIT_OPTION,
        follow_external_symlinks: bool = FOLLOW_EXTERNAL_SYMLINKS_OPTION,
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        require_corpus(corpus, "add")
        from arborag.cli.update import run_command

        run_command(files, corpus, prune=False, max_delete=None, dry_run=dry_run, prefect=prefect, no_wait=no_wait,
                    follow_external_symlinks=follow_external_symlinks, config=config, adding=True)
