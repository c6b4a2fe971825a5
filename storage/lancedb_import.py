"""``import lancedb`` without loading the REST namespace client's API modules until something uses them.

lancedb 0.40 imports ``lance_namespace``, which imports models from the generated OpenAPI client
``lance_namespace_urllib3_client``. That package's ``__init__`` imports every API module of the
REST namespace (branch, data, index, metadata, table, tag, transaction …), whose methods are
wrapped by pydantic's ``validate_call`` at import time — about half of ``import lancedb``'s CPU
seconds (measured ad hoc, 4 fresh processes each after numpy, pyarrow and polars: 0.94-0.97 s
plain, 0.44-0.48 s here), and arborag never talks to a REST namespace: its vector tables are
local LanceDB databases.

Importing this module makes ``lance_namespace_urllib3_client`` a package whose ``__init__`` has
not run yet — its ``__path__`` is the real one, so ``lance_namespace_urllib3_client.models.x``
(what lancedb and lance_namespace import) loads as always — and runs that ``__init__`` the first
time a name of the package itself is asked for (``from lance_namespace_urllib3_client import
ApiClient``: a REST namespace connection, a user's own import). So everything in the package is
there when used; only the unused part is not paid for. When the package was imported before,
cannot be found, or the stub cannot be made, lancedb is imported as it is.

The build and the update import lancedb through this module (its name,
:data:`arborag.storage.vectors.LANCEDB_IMPORT`, is what they give to
:func:`arborag.flows.common.warm_imports` and :func:`arborag.embed.worker.preimport`), and so
does :mod:`arborag.storage.vectors`.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

__all__ = ["CLIENT", "deferred_client", "lancedb"]

#: The OpenAPI client package whose ``__init__`` is deferred.
CLIENT = "lance_namespace_urllib3_client"

_LOCK = threading.RLock()
#: Package-level dunders that the real ``__init__`` defines: asking for one runs it. Other dunders
#: (``__wrapped__``, ``__getstate__`` … probes of tools) are answered "absent" without loading.
_LOADS_FOR = frozenset({"__version__", "__all__"})


def deferred_client(name: str = CLIENT) -> ModuleType | None:
    """Put package ``name`` in ``sys.modules`` with its ``__init__`` not yet run (module docs); the
    first package-level name asked for runs it. None (nothing changed) when the package is imported
    already or cannot be found."""
    if name in sys.modules:
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return None
    module = importlib.util.module_from_spec(spec)  # __path__, __spec__, __file__: submodules import as always
    loaded = threading.Event()

    def __getattr__(attr: str) -> Any:  # only called for names the module does not hold yet
        if (attr.startswith("__") and attr not in _LOADS_FOR) or loaded.is_set():
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        with _LOCK:
            if not loaded.is_set():
                module.__dict__.pop("__getattr__", None)
                try:
                    spec.loader.exec_module(module)  # type: ignore[union-attr]  # the real __init__, into this module
                finally:
                    loaded.set()  # a failed __init__ raises here, as the plain import would have; it is not run twice
        return getattr(module, attr)

    module.__dict__["__getattr__"] = __getattr__
    sys.modules[name] = module
    return module


with _LOCK:
    if "lancedb" not in sys.modules:
        deferred_client()
import lancedb  # noqa: E402
