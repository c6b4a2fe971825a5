"""Prefect setup shared by every flow: environment defaults, task options, cache keys, config as JSON.

Nothing here imports Prefect at module import time; the functions that need it import it when
called. (The flow modules import Prefect themselves, after :func:`prefect_env_defaults`.)

Caching across runs: a task is skipped when its cache key was seen
before and its persisted result is still in ``CORPUS/prefect/results``. Keys are made of content
hashes (:func:`cache_key_from_stats`, :func:`table_fingerprint`, :func:`file_fingerprint`)
plus the config the stage depends on plus the code version
(:func:`arborag.flows.fingerprints.pipeline_fingerprint`) — never of whole tables. Tasks return small
JSON summaries (paths, counts, fingerprints), so results are persisted as JSON. The one wrapper
that runs a stage with these options is :func:`arborag.flows.stage.run_stage`.

A flow receives its config as JSON (:func:`config_overrides`: what differs from what the flow's
process would load by itself; secrets stay in the environment) and loads it with
:func:`arborag.config.load_config`.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from arborag.config import ArboragConfig, load_config
from arborag.env import offline_env
from arborag.errors import ArboragError, BackendUnavailable, LLMError
from arborag.extras import extra
from arborag.hashing import hash_json
from arborag.storage.corpus import Corpus
from arborag.tasks.stage_context import file_fingerprint, table_fingerprint

__all__ = [
    "RETRY_ON",
    "cache_key_from_stats",
    "config_overrides",
    "current_flow_run_id",
    "dask_task_runner",
    "install_fanout",
    "file_fingerprint",
    "new_run_id",
    "plain_json",
    "prefect_env_defaults",
    "prefect_map",
    "results_dir",
    "stat_fingerprint",
    "table_fingerprint",
    "task_options",
    "warm_imports",
    "was_cached",
]

#: Exceptions worth retrying: I/O and unreachable services. Typed input errors (IngestError,
#: SchemaError, ConfigError, ...) fail the same way every time and are not retried.
RETRY_ON: tuple[type[BaseException], ...] = (OSError, BackendUnavailable, LLMError)


def prefect_env_defaults() -> None:
    """Set the offline defaults (:func:`arborag.env.offline_env`); call before Prefect is first imported."""
    offline_env()


def results_dir(corpus: Corpus) -> Path:
    """Where task results and cache records of ``corpus`` live (created on demand)."""
    path = corpus.prefect_dir / "results"
    path.mkdir(parents=True, exist_ok=True)
    return path


def task_options(
    corpus: Corpus,
    *,
    retries: int = 0,
    retry_delay_seconds: Iterable[float] = (2, 5, 15),
    cache_key: str | None = None,
    refresh_cache: bool = False,
    serializer: str = "json",
    retry_on: tuple[type[BaseException], ...] = RETRY_ON,
) -> dict[str, Any]:
    """Options for ``task.with_options(**...)`` that make a task cache across runs of ``corpus``.

    With ``cache_key`` the key is exactly that string (build it from content hashes with
    :func:`cache_key_from_stats` / :func:`table_fingerprint`); without it the policy is
    ``INPUTS + TASK_SOURCE`` (the task's parameters must then be small and deterministic).
    Results persist as ``serializer`` (JSON: tasks return small summaries, never tables) under
    :func:`results_dir` — a ``Path``, because a string would be read as a block name.
    ``retries`` is for tasks doing I/O that can fail transiently (object stores, services);
    only exceptions in ``retry_on`` are retried.
    ``refresh_cache=True`` runs the task even on a cache hit and overwrites the record.
    """
    from prefect.cache_policies import INPUTS, TASK_SOURCE

    options: dict[str, Any] = {
        "persist_result": True,
        "result_storage": results_dir(corpus),
        "result_serializer": serializer,
        "retries": retries,
        "retry_delay_seconds": list(retry_delay_seconds) if retries else 0,
        "refresh_cache": refresh_cache,
    }
    if retries:
        options["retry_condition_fn"] = _retry_condition(retry_on)
    if cache_key is not None:
        fixed = cache_key

        def _key(_context: Any, _parameters: dict[str, Any]) -> str:
            return fixed

        options["cache_key_fn"] = _key
    else:
        options["cache_policy"] = INPUTS + TASK_SOURCE
    return options


def _retry_condition(retry_on: tuple[type[BaseException], ...]) -> Any:
    def should_retry(_task: Any, _task_run: Any, state: Any) -> bool:
        exc = getattr(state, "data", None)
        return isinstance(exc, retry_on)

    return should_retry


def was_cached(state: Any) -> bool:
    """True when a Prefect task state came from the cache (the task body did not run)."""
    return bool(getattr(state, "name", None) == "Cached")


def current_flow_run_id() -> str | None:
    """The id of the Prefect flow run we are in, or None outside a flow run."""
    try:
        from prefect.context import FlowRunContext
    except ImportError:  # pragma: no cover - prefect is a dependency
        return None
    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return None
    return str(ctx.flow_run.id)


def new_run_id() -> str:
    """A sortable run id for runs without Prefect: ``YYYYmmddTHHMMSS-<6 hex>``."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def stat_fingerprint(path: str | Path) -> str:
    """Size and modification time of a file (reads nothing); a stable marker when it cannot be seen."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    return f"{st.st_size}:{st.st_mtime_ns}"


def cache_key_from_stats(paths: Iterable[str | Path], *parts: Any) -> str:
    """A cache key over the size and mtime of ``paths`` (order-independent; reads no file) and
    JSON-able ``parts`` (stage name, the config section the stage depends on, the code fingerprint).

    For sources the stage reads anyway (ingest hashes each file's bytes itself and skips an
    unchanged one): a touched-but-unchanged file only costs a cache miss, never a wrong result.
    """
    files = sorted({os.path.abspath(os.fspath(p)) for p in paths})
    return hash_json([[f, stat_fingerprint(f)] for f in files] + [list(parts)])


def config_overrides(config: ArboragConfig) -> dict[str, dict[str, Any]]:
    """``config`` as the JSON overrides a flow needs to load it back (secrets excluded).

    Only what differs from the config this process would load by itself (defaults < arborag.yaml
    < ``ARBORAG_*``) is passed, so a flow run started in-process gets ``config`` back exactly
    while its parameters stay short. Secrets (``public_dict`` drops them) come from the
    environment of the process running the flow.
    """
    mine = config.public_dict()
    try:
        base = load_config(None).public_dict()
    except ArboragError:
        base = {}
    out: dict[str, dict[str, Any]] = {}
    for section, values in mine.items():
        diff = {k: v for k, v in values.items() if (base.get(section) or {}).get(k, object()) != v}
        if diff:
            out[section] = diff
    return out


def plain_json(out: dict[str, Any]) -> dict[str, Any]:
    """A plain-JSON copy of a flow's return value (detached from Prefect's result objects)."""
    copied: dict[str, Any] = json.loads(json.dumps(out, default=str))
    return copied


# ---------------------------------------------------------------------------------------------
# Fan-out: Dask through Prefect
# ---------------------------------------------------------------------------------------------
#: The runners ``arborag build --runner`` accepts: ``local`` (everything in this process) and
#: ``dask`` (embedding groups, summarization chunks and per-cluster local clusterings as Prefect
#: tasks on a ``prefect_dask.DaskTaskRunner``).
RUNNERS = ("local", "dask")


def dask_task_runner(*, workers: int | None = None, address: str | None = None) -> Any:
    """A ``DaskTaskRunner``: joins the scheduler at ``address`` (``tcp://host:port``) or starts a
    ``LocalCluster`` of ``workers`` single-threaded worker processes on 127.0.0.1 (no dashboard)."""
    offline_env()
    with extra("scale", "the Dask runner (arborag build --runner dask)"):
        from prefect_dask import DaskTaskRunner

    if address:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs={
            "n_workers": max(1, int(workers or 2)),
            "threads_per_worker": 1,
            "processes": True,
            "host": "127.0.0.1",
            "dashboard_address": None,
        },
    )


def _apply(fn: Callable[[Any], Any], item: Any) -> Any:
    return fn(item)


@lru_cache(maxsize=None)
def _fanout_task(name: str) -> Any:
    from prefect import task
    from prefect.cache_policies import NO_CACHE

    # results travel through Dask (arrays, summaries); nothing is persisted or cached per item
    return task(name=name, persist_result=False, cache_policy=NO_CACHE, log_prints=False)(_apply)


def prefect_map(name: str = "fanout") -> Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]]:
    """A ``map(fn, items)`` that submits one Prefect task per item to the flow's task runner
    (a ``DaskTaskRunner``: the items run on the workers) and yields the results in order.

    Call it inside a flow run (or a task called from one). ``fn`` and the items are pickled to
    the workers (cloudpickle); ``fn`` must not hold a loaded model (:class:`arborag.embed.model.Embedder`
    pickles without one and loads it once per worker process).
    """

    def _map(fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        from prefect.context import TaskRunContext

        t = _fanout_task(f"{name}-{getattr(fn, '__name__', 'fn').strip('_')}")
        # Submitted from inside a stage task: the runner ships the current run context to the
        # worker, and the stage's context holds its parameters (the StageContext, with locks and
        # models). The fan-out tasks hang off the flow run instead.
        token = TaskRunContext.__var__.set(None)  # type: ignore[attr-defined,arg-type]
        try:
            futures = [t.submit(fn, item) for item in items]
        finally:
            TaskRunContext.__var__.reset(token)  # type: ignore[attr-defined]
        for future in futures:
            yield future.result()

    return _map


def install_fanout(ctx: Any) -> None:
    """Make the stages of ``ctx``'s run fan out through the flow's task runner: the run's embedder
    encodes its groups as tasks and the tree stage gets ``ctx.resources["map"]``."""
    from arborag.embed.model import Embedder

    fan = prefect_map()
    ctx.resources["map"] = fan
    ctx.resources["embedder"] = Embedder(ctx.config.embed, map=fan)


def warm_imports(*items: str | Callable[[], Any]) -> None:
    """Import the modules ``items`` names (a callable there is called) on a background thread,
    now — for a stage that comes later. Start it once the run's own Python work is done (the plan,
    the segmenting): a pure-Python import on a thread *during* that work slows each of its many
    short file reads and polars calls, which give the GIL up and wait to get it back (the
    update's plan: 2.00 -> 0.35 s when lancedb moved out of it, benchmarks/results/
    update_overhead-quieter.md). Modules already imported are skipped; errors are left to the
    stage's own import."""
    import importlib
    import sys
    import threading

    todo = [m for m in items if callable(m) or m not in sys.modules]
    if not todo:
        return

    def work() -> None:
        for m in todo:
            try:
                m() if callable(m) else importlib.import_module(m)
            except Exception:  # noqa: BLE001 - the stage's own import reports it
                pass

    threading.Thread(target=work, name="arborag-warm-imports", daemon=True).start()
