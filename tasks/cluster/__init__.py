"""RAPTOR clustering of one tree level.

- :mod:`~arborag.tasks.cluster.fit`: global-then-local clustering of a level, the token guard;
- :mod:`~arborag.tasks.cluster.reduction`: the UMAP of one fit (PCA when UMAP fails);
- :mod:`~arborag.tasks.cluster.mixture`: Gaussian mixtures, k by BIC, soft membership;
- :mod:`~arborag.tasks.cluster.fitted`: a level's fits kept as data, new points placed with them;
- :mod:`~arborag.tasks.cluster.processes`: the fits on this process and the run's helper process;
- :mod:`~arborag.tasks.cluster.knn`: the exact cosine kNN graph UMAP gets from 4,096 points;
- :mod:`~arborag.tasks.cluster.umap_import`: UMAP imported with its compiled code cached on disk.
"""
