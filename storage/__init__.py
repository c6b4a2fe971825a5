"""Storage: the floor above the foundation (imports only ``arborag.*`` foundation modules).

    schemas          every Arrow schema
    tables           the atomic writers (atomic_path, bytes, JSON, Parquet) and schema-checked tables
    arrays           the numpy <-> Arrow vector converter
    corpus           corpus layout, snapshots, the published manifest
    vectors          a snapshot's vectors in LanceDB (exact or ANN search)
    sparse/          the BM25 index: protocol, analysis, tantivy and Elasticsearch backends
    lucene/          the Lucene query subset: AST, lexer, parser, rendering
    sql              read-only DuckDB over a corpus's tables
    embedding_cache  content-addressed embedding vectors
"""
