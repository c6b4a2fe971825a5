"""Helpers shared by the tests (fixtures-by-function, fakes of inputs, small hand-made corpora), one module per area:
``from helpers.query import publish_snapshot``. The tests/ folder is on sys.path (pytest rootdir conftest), so
``helpers`` imports as a top-level package."""
