"""The RAPTOR tree: built level by level, kept current incrementally.

- :mod:`.build`: :func:`~arborag.tasks.tree.build.build_tree`, leaves -> (cluster -> summarize -> embed) per level;
- :mod:`.frames`: the level frames the build clusters and assembles into the nodes and edges tables;
- :mod:`.model`: the fitted clustering of each level, kept in the snapshot as data;
- :mod:`.update`: :func:`~arborag.tasks.tree.update.update_tree`, the published tree brought up to date locally;
- :mod:`.update_docs`: the exact update of per-document trees;
- :mod:`.stats`: the typed statistics of a build level and of an update level.
"""
