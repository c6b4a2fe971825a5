"""Read-only query API over a published arborag snapshot.

    >>> from query import open_index
    >>> index = open_index("/tmp/corpus")
    >>> hits = index.search("How did Cinderella reach her happy ending?", mode="collapsed", budget=2000)

It reads only finished artifacts (the manifest, nodes/edges Parquet, LanceDB vectors, the
sparse index), never starts Prefect and never writes.
"""

from arborag.query.index import Hit, Index, Mode, open_index

__all__ = ["Hit", "Index", "Mode", "open_index"]
