"""Embedding for the stages: the cached embed of texts, the run's embedder and the staged vector files."""
