"""The ``arborag`` console script: start what the command will wait for, then the command line.

A cold ``arborag build`` / ``update`` starts its embedding worker here, before the command line's
own imports (typer, rich, the config models: ~0.4 s), so the worker's torch import starts that
much earlier on the other core (:mod:`arborag.embed.spawn`). Everything else is :mod:`arborag.cli`.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["main"]


def main() -> Any:
    from arborag.embed.spawn import start_early

    start_early(sys.argv)
    from arborag.cli import app

    return app()
