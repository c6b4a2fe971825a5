"""Fixtures of the searcher tests, registered once (a session fixture imported into two test
modules would be built once per module)."""

from helpers.searchers import demo_corpus, hops_index  # noqa: F401 - fixtures
