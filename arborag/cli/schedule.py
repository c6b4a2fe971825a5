"""`arborag schedule`: serve the scheduled ``update`` and ``rebuild`` deployments of one corpus.

One long-running process on one machine, no work pool: it registers two deployments with the
Prefect server at ``PREFECT_API_URL`` and runs their scheduled flow runs itself — by default in
this warm process, one after another (:mod:`arborag.cli.warm_runner`: imports, the embedding
model and UMAP's compiled code are loaded once, not every run), or with ``--isolated`` through
``prefect.serve``, each run in its own subprocess:

- ``update`` — the ``update`` flow (``arborag.flows.update:update``, incremental) every
  ``--update-every``;
- ``rebuild`` — the ``build`` flow (``arborag.flows.build:build``, full rebuild) on
  ``--rebuild-cron``.

Both carry JSON parameters only (corpus folder, sources, config file); secrets stay in the
serving process's environment. Writers are serialised by the corpus lock, so a rebuild and an
update never write at once; ``--limit`` (default 1) also keeps the runner to one run at a time.
``deploy/prefect.yaml`` declares the same two deployments for ``prefect deploy`` + a worker.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import typer

from arborag.cli.common import CONFIG_OPTION, console, err_console, fail, offline_env
from arborag.cli.common import check_corpus_path
from arborag.errors import ArboragError, BackendUnavailable, ConfigError

__all__ = ["parse_duration", "register", "schedule_deployments"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")


def parse_duration(text: str) -> timedelta:
    """``"15m"``, ``"90s"``, ``"1h30m"``, ``"2d"`` or plain seconds (``"300"``) as a timedelta > 0."""
    raw = text.strip().lower()
    try:
        seconds = float(raw)
    except ValueError:
        parts = _DURATION.findall(raw)
        if not parts or _DURATION.sub("", raw).strip():
            raise ConfigError(
                f"cannot read the duration {text!r}: write a number with a unit, e.g. 30s, 15m, 1h30m, 1d (or plain seconds)"
            ) from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ConfigError(f"the duration {text!r} must be longer than 0 s")
    return timedelta(seconds=seconds)


def _check_cron(cron: str, timezone: str) -> None:
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron, timezone=timezone)
    except ValueError as exc:
        raise ConfigError(f"invalid --rebuild-cron {cron!r} / --timezone {timezone!r}: {exc}".splitlines()[0]) from None


def schedule_deployments(
    corpus: str | Path,
    sources: list[str],
    *,
    update_every: timedelta | None,
    rebuild_cron: str | None,
    timezone: str = "UTC",
    config_path: str | Path | None = None,
    prune: bool = True,
    suffix: str = "",
) -> list[Any]:
    """The RunnerDeployments ``update`` (interval) and ``rebuild`` (cron) for ``corpus`` (either may be off: None)."""
    from prefect.deployments.runner import EntrypointType
    from prefect.schedules import Cron, Interval

    if update_every is None and rebuild_cron is None:
        raise ConfigError("nothing to schedule: give --update-every, --rebuild-cron or both")
    params: dict[str, Any] = {
        "corpus_dir": str(Path(corpus).expanduser().resolve()),
        "sources": [_absolute(s) for s in sources],
    }
    if config_path is not None:
        params["config_path"] = str(Path(config_path).expanduser().resolve())
    tag = ["arborag", f"corpus:{Path(params['corpus_dir']).name}"]
    out: list[Any] = []
    if update_every is not None:
        from arborag.flows.update import update

        out.append(update.to_deployment(
            name=f"update{suffix}", schedules=[Interval(update_every, timezone=timezone)],
            parameters={**params, "prune": prune}, tags=tag, entrypoint_type=EntrypointType.MODULE_PATH,
            description=f"Incremental update of {params['corpus_dir']} every {update_every} (arborag schedule).",
        ))
    if rebuild_cron is not None:
        _check_cron(rebuild_cron, timezone)
        from arborag.flows.build import build

        out.append(build.to_deployment(
            name=f"rebuild{suffix}", schedules=[Cron(rebuild_cron, timezone=timezone)],
            parameters=params, tags=tag, entrypoint_type=EntrypointType.MODULE_PATH,
            description=f"Full rebuild of {params['corpus_dir']} on '{rebuild_cron}' {timezone} (arborag schedule).",
        ))
    return out


def _absolute(source: str) -> str:
    """A local path made absolute (runs start in another process and folder); URIs and globs as given."""
    if "://" in source or any(c in source for c in "*?["):
        return source
    return str(Path(source).expanduser().resolve())


def _api_url() -> str:
    """The Prefect API this process talks to; fails clearly when there is no server to schedule on."""
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    hint = ("start one with `prefect server start` (UI at http://127.0.0.1:4200) and "
            "`export PREFECT_API_URL=http://127.0.0.1:4200/api`, then run arborag schedule again")
    if not url:
        raise BackendUnavailable("Prefect server", None, "schedules need a running Prefect server (PREFECT_API_URL is not set): " + hint)
    import httpx

    try:
        ok = httpx.get(url.rstrip("/") + "/health", timeout=10).status_code == 200
    except httpx.HTTPError:
        ok = False
    if not ok:
        raise BackendUnavailable("Prefect server", url, hint)
    return url


def register(app: typer.Typer) -> None:
    @app.command(
        "schedule",
        help=(
            "Keep a corpus current on a schedule: serve an incremental `update` every --update-every "
            "and a full `rebuild` on --rebuild-cron, from this one process (no work pool, no worker).\n\n"
            "Needs a Prefect server: run `prefect server start` and set PREFECT_API_URL (e.g. "
            "http://127.0.0.1:4200/api); watch the runs in its UI under Deployments. The runs execute "
            "in this process, one at a time, so the model and imports stay loaded between runs (--isolated: "
            "each in its own subprocess); writers take the corpus lock, so runs never overlap on the corpus. "
            "Stop with Ctrl-C (the schedules are paused on shutdown). For a worker-based setup use "
            "deploy/prefect.yaml with `prefect deploy`.\n\n"
            "Examples:\n\n"
            "  arborag schedule docs/ --corpus /srv/c --update-every 15m --rebuild-cron \"0 3 * * 0\"\n\n"
            "  arborag schedule docs/ notes/ --corpus /srv/c --update-every 1h --no-rebuild --config arborag.yaml"
        ),
    )
    def schedule(
        sources: list[str] = typer.Argument(..., help="Files or folders the corpus mirrors (all of them; a removed file is pruned by update)."),
        corpus: Path = typer.Option(..., "--corpus", "-c", callback=check_corpus_path, envvar="ARBORAG_CORPUS", help="Corpus directory (created and built in full by the first run if empty)."),
        update_every: str = typer.Option("15m", "--update-every", help="Interval of the incremental update: 30s, 15m, 1h30m, 1d or seconds."),
        rebuild_cron: str = typer.Option("0 3 * * 0", "--rebuild-cron", help="Cron of the full rebuild (default: Sundays 03:00)."),
        timezone: str = typer.Option("UTC", "--timezone", help="Time zone of the schedules (IANA name)."),
        no_update: bool = typer.Option(False, "--no-update", help="Serve only the rebuild."),
        no_rebuild: bool = typer.Option(False, "--no-rebuild", help="Serve only the update."),
        prune: bool = typer.Option(True, "--prune/--no-prune", help="update: delete documents whose file is gone (default on)."),
        name_suffix: str = typer.Option("", "--name-suffix", help="Appended to the deployment names (e.g. -docs) to serve several corpora on one server."),
        isolated: bool = typer.Option(
            False, "--isolated",
            help="Run each scheduled run in its own subprocess (Prefect's serve): every run pays the imports, the model "
                 "load and UMAP's code load again, but a cancel from the UI stops a running run. Default: the runs execute "
                 "in this warm process, one at a time.",
        ),
        limit: int = typer.Option(1, "--limit", min=1, help="With --isolated: flow runs this process runs at once."),
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        offline_env()
        try:
            every = None if no_update else parse_duration(update_every)
            deployments = schedule_deployments(
                corpus, list(sources), update_every=every, rebuild_cron=None if no_rebuild else rebuild_cron,
                timezone=timezone, config_path=config, prune=prune, suffix=name_suffix,
            )
            url = _api_url()
        except ArboragError as exc:
            fail(exc)
            return
        for d in deployments:
            when = ", ".join(_describe(s) for s in d.schedules)
            console.print(f"serving [bold]{d.flow_name}/{d.name}[/] ({when})", highlight=False)
        how = "each run in its own subprocess" if isolated else "runs execute in this process, one at a time"
        err_console.print(f"[dim]Prefect API {url}; runs are listed in its UI under Deployments; {how}. Ctrl-C stops.[/]",
                          highlight=False)
        if isolated:
            from prefect import serve

            serve(*deployments, limit=limit, print_starting_message=False)
            return
        from prefect.settings import get_current_settings

        from arborag.cli.warm_runner import WarmRunner

        poll = float(get_current_settings().runner.poll_frequency)
        from arborag.flows.build import build
        from arborag.flows.update import update

        runner = WarmRunner(deployments, [update, build], poll_seconds=poll, on_run=_report_run)
        try:
            runner.serve()
        except KeyboardInterrupt:
            err_console.print("[dim]stopped; the schedules are paused[/]")


def _report_run(flow_run: Any, state: Any, seconds: float) -> None:
    name = getattr(state, "name", None) or type(state).__name__
    console.print(f"{flow_run.name} ({flow_run.id}): {name} in {seconds:.1f} s", highlight=False)


def _describe(schedule: Any) -> str:
    inner = getattr(schedule, "schedule", schedule)
    if getattr(inner, "interval", None) is not None:
        return f"every {inner.interval}"
    if getattr(inner, "cron", None):
        return f"cron '{inner.cron}' {inner.timezone or 'UTC'}"
    return str(inner)
