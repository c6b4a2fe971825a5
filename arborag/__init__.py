"""arborag: documents to a hierarchical retrieval index.

The package is split the way the pipeline is:

- ``arborag``  — configuration, errors, the shared tokenizer, the CLI;
- ``storage``  — table schemas, atomic Parquet I/O, snapshots, vectors, sparse index, caches;
- ``tasks``    — the stage functions (pure, typed, testable without Prefect);
- ``flows``    — Prefect flows that run the stages as cached, retryable tasks;
- ``query``    — the read-only query API over a published snapshot.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
