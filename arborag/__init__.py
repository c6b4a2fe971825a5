"""arborag: documents to a hierarchical retrieval index.

The package is split the way the pipeline is:

- ``arborag``  — configuration, errors, the shared tokenizer, the CLI;
- ``storage``  — table schemas, atomic Parquet I/O, snapshots, vectors, sparse index, caches;
- ``tasks``    — the stage functions (pure, typed, testable without Prefect);
- ``flows``    — Prefect flows that run the stages as cached, retryable tasks;
- ``query``    — the read-only query API over a published snapshot.
"""

__all__ = ["__version__", "installed_version"]


def installed_version() -> str:
    """arborag's version from the installed package's metadata (pyproject.toml's ``version``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("arborag")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def __getattr__(name: str) -> str:
    # ``arborag.__version__``: read from the metadata when asked for, not at import time (which
    # would slow every ``arborag`` command)
    if name == "__version__":
        return installed_version()
    raise AttributeError(f"module 'arborag' has no attribute {name!r}")
