"""The one registry of retrieval modes: name -> implementation, options, description, LLM use.

Every mode, core or plug-in, is one :class:`ModeSpec` in :data:`MODES`. Its ``target``
(``"module:function"``) names a function::

    def search(index: Index, text: str, *, budget: int | None, k: int,
               levels: Sequence[int] | None, doc_ids: Sequence[str] | None,
               vector: np.ndarray | None, lucene: bool, **options) -> list[Hit]

imported by name on first use (so ``arborag --help`` and the server's request model read the
registry without importing any mode). A mode drives the index through its public API only
(``dense_scores``, ``sparse_ranked``, ``fused_scores``, ``fill``, ``hit``, ``edge_rows`` ...);
``Index.search`` checks the option names against the mode's options model, then calls it.

Who reads this table: ``Index.search`` (dispatch, unknown modes and options), ``arborag query``
and ``arborag ask`` (``--mode`` choices and help), the server's request model
(``arborag.serve.models.Mode``), the evaluation's system check (``flows/eval_stages.py``), the
code fingerprint of cached eval retrieval (:func:`mode_modules`), the floors test (modes loaded
by name are import edges) and ``docs/ARCHITECTURE.md`` (:func:`modes_markdown`, checked by a test).

A mode whose module is not installed is not offered (:func:`available_modes`), so a partly
installed tree never advertises a mode it cannot run.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from arborag.query.options import (
    AutoOptions, HopOptions, HybridOptions, LevelOptions, ModeOptions, MultiOptions, NoOptions, RerankOptions, SegmentsOptions,
)

__all__ = [
    "DEFAULT_MODE", "MODES", "MODE_NAMES", "ModeOptions", "ModeSpec", "available_modes", "check_options", "get_mode",
    "mode_help", "mode_modules", "modes_markdown",
]

#: The mode of ``Index.search``, the CLI and the server when none is given (``query.mode``).
DEFAULT_MODE = "hop"


LLMUse = Literal["none", "optional", "configurable", "required"]


@dataclass(frozen=True)
class ModeSpec:
    """One retrieval mode.

    ``llm``: ``none`` (never calls an LLM), ``optional`` (uses the configured LLM when there is
    one, runs an offline plan otherwise), ``configurable`` (an LLM only when the config picks one,
    e.g. ``rerank.kind: llm``), ``required`` (cannot answer without one: :attr:`needs_llm`; no
    registered mode is, so every mode answers offline).
    ``uses_vector``: the query text is embedded (False: BM25 only).
    """

    name: str
    target: str  # "module:function"
    description: str
    options: type[ModeOptions] = NoOptions
    llm: LLMUse = "none"
    uses_vector: bool = True
    core: bool = False  # one of the four modes of the RAPTOR index itself (query/raptor.py)

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def needs_llm(self) -> bool:
        return self.llm == "required"

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(self.options.model_fields)

    def installed(self) -> bool:
        return _installed(self.module)

    def load(self) -> Callable[..., Any]:
        """The mode's search function (its module imported on first use)."""
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


MODES: dict[str, ModeSpec] = {m.name: m for m in (
    ModeSpec("hop", "arborag.query.hop:search",
             "the measured default: auto's ranking plus one hop from its best leaves into the documents they name "
             "(links between leaves: titles, names; IDF)", HopOptions),
    ModeSpec("auto", "arborag.query.auto:search",
             "dense + BM25 scores of the leaves fused (z-score), filled best-first (hop's first hop)", AutoOptions),
    ModeSpec("collapsed", "arborag.query.raptor:collapsed",
             "RAPTOR collapsed tree: every node of every level by cosine, best-first to the budget", core=True),
    ModeSpec("traversal", "arborag.query.raptor:traversal",
             "RAPTOR tree traversal: top-k per level from every root down to the leaves", core=True),
    ModeSpec("sparse", "arborag.query.raptor:sparse",
             "BM25 best-first to the budget (lucene=True: Lucene syntax)", uses_vector=False, core=True),
    ModeSpec("hybrid", "arborag.query.raptor:hybrid",
             "dense + BM25 over every level, fused (query.fusion), best-first", HybridOptions, core=True),
    ModeSpec("multi", "arborag.query.multi:search",
             "the question + n variants (LLM, or offline PRF), each hybrid, fused by RRF", MultiOptions, llm="optional"),
    ModeSpec("level", "arborag.query.level:search",
             "LevelRAG: sub-questions, Lucene rewrites + HyDE with feedback (LLM; offline plan without)", LevelOptions,
             llm="optional"),
    ModeSpec("segments", "arborag.query.segments:search",
             "dsRAG relevant segment extraction: contiguous runs of reranked leaves, stitched from the document",
             SegmentsOptions, llm="configurable"),
    ModeSpec("rerank", "arborag.query.rerank:search",
             "leaves rescored by the configured reranker (rerank.kind), best calibrated first", RerankOptions,
             llm="configurable"),
)}

#: Every registered mode, the default first (what the CLI and the server accept).
MODE_NAMES: tuple[str, ...] = tuple(MODES)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, ValueError):  # ValueError: already imported without a spec
        return module in sys.modules


def get_mode(name: str) -> ModeSpec | None:
    """The registered mode ``name`` (None when there is none)."""
    return MODES.get(name)


def available_modes() -> tuple[str, ...]:
    """The registered modes whose module is present, in table order."""
    return tuple(name for name, spec in MODES.items() if spec.installed())


def mode_modules() -> tuple[str, ...]:
    """The modules the registry imports by name (static import graphs cannot see them)."""
    return tuple(dict.fromkeys(spec.module for spec in MODES.values()))


def check_options(spec: ModeSpec, options: dict[str, Any]) -> str | None:
    """What is wrong with ``options`` for ``spec`` (unknown names, bad values), or None."""
    unknown = sorted(set(options) - set(spec.option_names))
    if unknown:
        if not spec.option_names:
            return f"mode {spec.name!r} takes no options ({', '.join(unknown)})"
        return f"mode {spec.name!r} takes no option {', '.join(unknown)}; it takes {', '.join(spec.option_names)}"
    try:
        spec.options.model_validate(options)
    except ValidationError as exc:
        bad = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return f"mode {spec.name!r}: {bad}"
    return None


def mode_help() -> str:
    """One line for ``--mode`` help texts: every mode, the default marked."""
    return " | ".join(f"{n} (default)" if n == DEFAULT_MODE else n for n in MODE_NAMES)


def modes_markdown() -> str:
    """The table of modes for the docs (``docs/ARCHITECTURE.md`` holds it; a test checks it is current)."""
    rows = ["| mode | implementation | LLM | options | what it does |", "| --- | --- | --- | --- | --- |"]
    for spec in MODES.values():
        opts = ", ".join(spec.option_names) or "–"
        name = f"`{spec.name}` (default)" if spec.name == DEFAULT_MODE else f"`{spec.name}`"
        rows.append(f"| {name} | `{spec.target}` | {spec.llm} | {opts} | {spec.description} |")
    return "\n".join(rows)
