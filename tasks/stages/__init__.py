"""Stage runners, one module per stage, named after the table or file it writes
(``chunks.py``: ``run_chunks``), each beside its pure function."""
