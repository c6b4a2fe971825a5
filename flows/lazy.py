"""Prefect tasks and flows made on first use, so a run without Prefect never imports it.

Importing Prefect costs a cold process ~0.8 s (benchmarks/results/cold_path.md) — and the CLI
runs the stages directly unless a Prefect server is configured. The stages' tasks and the
flows are still module-level objects (``flows/build.py:build`` is what a deployment names):

- :class:`LazyTask` — a stage's task: ``.fn`` is the runner (no Prefect); anything else
  (``with_options``, ``submit``, a call) makes the Prefect task once and is delegated to it.
- :func:`lazy_flow` — a flow module keeps its flow function under a private name and answers
  its public name from the module's ``__getattr__`` (PEP 562) with the Prefect flow, made on the
  first access and then stored in the module (``from arborag.flows.build import build``,
  Prefect's ``import_object("flows/build.py:build")`` and a warm runner's ``flow.serve`` get a
  real ``prefect.Flow``).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from arborag.env import offline_env

__all__ = ["LazyTask", "flow_getattr", "lazy_flow"]

_LOCK = threading.RLock()


class LazyTask:
    """A stage's Prefect task, made on first use (``.fn`` needs no Prefect)."""

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        self.fn = fn
        self._task: Any = None

    def real(self) -> Any:
        """The ``prefect.task`` around ``fn`` (made once)."""
        if self._task is None:
            with _LOCK:
                if self._task is None:
                    offline_env()  # Prefect reads its settings when imported
                    from prefect import task

                    self._task = task(name=self.name, log_prints=False)(self.fn)
        return self._task

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr in ("name", "fn", "_task"):
            raise AttributeError(attr)
        return getattr(self.real(), attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.real()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"LazyTask({self.name!r}, {getattr(self.fn, '__qualname__', self.fn)!r})"


def lazy_flow(fn: Callable[..., Any], *, attr: str, name: str) -> Callable[[], Any]:
    """A getter of the Prefect flow ``name`` around ``fn``, stored as ``attr`` of ``fn``'s module
    on first use. ``fn`` takes ``attr`` as its name, so the flow's entrypoint is ``module:attr``."""
    fn.__name__ = fn.__qualname__ = attr
    made: list[Any] = []

    def get() -> Any:
        if not made:
            with _LOCK:
                if not made:
                    offline_env()  # Prefect reads its settings when imported
                    from prefect import flow

                    made.append(flow(name=name, log_prints=False)(fn))
                    setattr(sys.modules[fn.__module__], attr, made[0])
        return made[0]

    return get


def flow_getattr(module: str, attr: str, get: Callable[[], Any]) -> Callable[[str], Any]:
    """A flow module's ``__getattr__`` (PEP 562): ``attr`` is the Prefect flow ``get`` makes on first
    use (:func:`lazy_flow`); a run without Prefect never imports it."""

    def __getattr__(name: str) -> Any:
        if name == attr:
            return get()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
