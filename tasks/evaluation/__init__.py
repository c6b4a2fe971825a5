"""Evaluation stages as typed functions (the flow ``arborag.flows.evaluate`` only orchestrates).

- :mod:`.plan`      systems, strategy presets, the (strategy, system) plan
- :mod:`.retrieve`  every question through a search object (:class:`~.retrieve.SearchIndex`) -> HITS
- :mod:`.score`     HITS + queries + gold evidence -> RESULTS
- :mod:`.answer`    the answer prompt and the LLM answerer (``--answer``)
- :mod:`.stats`     nodes per level and leaf sizes of a built corpus
- :mod:`.write`     results.parquet, hits, run.json, summary.md writers
"""
