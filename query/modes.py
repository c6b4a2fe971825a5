"""The retrieval modes ``Index.search`` knows, and where the plug-in ones live.

The core modes (``collapsed``, ``traversal``, ``sparse``, ``hybrid``) are methods of
:class:`~arborag.query.index.Index`. Every other mode is a module of its own under
``arborag.query`` that exposes::

    def search(index: Index, text: str, *, budget: int | None, k: int,
               levels: Sequence[int] | None, doc_ids: Sequence[str] | None,
               vector: np.ndarray | None, lucene: bool, **options) -> list[Hit]

and is listed in :data:`PLUGIN_MODES`. A mode whose module is not installed is not offered
(:func:`available_modes`), so a partly installed tree never advertises a mode it cannot run.
Options a mode takes (``n_variants=``, ``preset=``, ``trace=`` ...) pass through
``Index.search(..., **options)`` untouched.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["CORE_MODES", "PLUGIN_MODES", "available_modes", "plugin_module"]

CORE_MODES: tuple[str, ...] = ("collapsed", "traversal", "sparse", "hybrid")

#: mode name -> module implementing ``search(index, text, ...)``
PLUGIN_MODES: dict[str, str] = {
    "multi": "arborag.query.multi",        # multi-query retrieval + fusion (SPEC §6)
    "level": "arborag.query.level",        # LevelRAG searchers (SPEC §7)
    "segments": "arborag.query.segments",  # relevant segment extraction (SPEC §6, dsRAG)
    "rerank": "arborag.query.rerank",      # leaves rescored by the configured reranker, calibrated (SPEC §6)
    "auto": "arborag.query.auto",          # the measured default: dense + BM25 leaves fused (issue 12)
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, ValueError):  # ValueError: already imported without a spec
        import sys

        return module in sys.modules


def available_modes() -> tuple[str, ...]:
    """Core modes, then the plug-in modes whose module is present, in table order."""
    return CORE_MODES + tuple(m for m, mod in PLUGIN_MODES.items() if _installed(mod))


def plugin_module(mode: str) -> ModuleType | None:
    """The module of a plug-in mode (imported on first use), or None for a core or unknown mode."""
    module = PLUGIN_MODES.get(mode)
    if module is None or not _installed(module):
        return None
    return importlib.import_module(module)
