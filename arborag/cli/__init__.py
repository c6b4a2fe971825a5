"""The ``arborag`` command line: the top floor. Imports the rest of the project lazily.

One module per command area (``build``, ``ingest``, ``segment``, ``sql``, ``query``, ``inspect``, ``evaluate``), each with
``register(app)``; :mod:`arborag.cli.app` assembles them. Heavy imports (torch, Prefect,
LanceDB) happen inside the commands, never at import time.
"""

from arborag.cli.app import app, main

__all__ = ["app", "main"]
