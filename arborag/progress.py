"""Progress bars (rich, on stderr) for long work; silent when disabled or not a terminal."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

__all__ = ["progress_bar", "ProgressFn"]

ProgressFn = Callable[[int], None]

_console = Console(stderr=True)


def _no_progress(n: int = 1) -> None:
    """``advance(n)`` of a disabled bar: does nothing."""


@contextlib.contextmanager
def progress_bar(description: str, total: int | None, *, enabled: bool = True) -> Iterator[ProgressFn]:
    """Yield ``advance(n)``; shows a bar on stderr when ``enabled`` and stderr is a terminal."""
    if not enabled or total == 0 or not (sys.stderr.isatty() or _console.is_terminal):
        yield _no_progress
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=_console,
        transient=False,
    ) as bar:
        task_id = bar.add_task(description, total=total)

        def advance(n: int = 1) -> None:
            bar.advance(task_id, n)

        yield advance
