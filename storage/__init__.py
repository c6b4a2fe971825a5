"""Storage: table schemas, atomic Parquet I/O, corpus layout and snapshots, vectors, sparse index, caches."""
