"""RAPTOR clustering of one tree level.

- :mod:`~arborag.tasks.cluster.fit`: global-then-local clustering of a level, the token guard;
- :mod:`~arborag.tasks.cluster.mixture`: Gaussian mixtures, k by BIC, soft membership;
- :mod:`~arborag.tasks.cluster.processes`: the fits on this process and the run's helper process;
- :mod:`~arborag.tasks.cluster.umap_import`: UMAP imported with its compiled code cached on disk.
"""
