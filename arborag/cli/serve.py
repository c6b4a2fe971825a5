"""`arborag serve`: the HTTP API and search page over a built corpus (FastAPI + uvicorn).

The command lives with the other commands; :mod:`arborag.serve` (imported inside the command)
never imports the CLI.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Optional

import typer

from arborag.cli.common import check_corpus_path

TOKEN_ENV = "ARBORAG_SERVE_TOKEN"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def register(app: typer.Typer) -> None:
    @app.command(
        "serve",
        help=(
            "Serve a built corpus over HTTP: POST /search, GET /nodes/{id}, GET /documents/{id}, /health, /stats, "
            "a search page at / and the API docs at /docs. The model stays loaded; a newly published build is "
            "picked up between requests.\n\n"
            "A request may name an earlier retained snapshot (POST /search {\"snapshot\": \"snap-3f2a\"}; GET /snapshots "
            "lists them). Every snapshot the server has open holds a reader lease, renewed while it is open, so "
            "`arborag snapshots gc` and the retention after each update never remove files under it.\n\n"
            f"Binds to 127.0.0.1 unless --host says otherwise. When ${TOKEN_ENV} (or the variable named by "
            "--token-env) is set, API calls need 'Authorization: Bearer <token>'.\n\n"
            "Example:\n\n"
            "  arborag serve --corpus /tmp/demo\n\n"
            "  arborag serve --corpus /tmp/demo --snapshot snap-3f2a   (pinned to an earlier snapshot)\n\n"
            "  curl -s localhost:8000/search -H 'content-type: application/json' "
            "-d '{\"text\": \"How did Cinderella reach her happy ending?\", \"budget\": 500}'"
        ),
    )
    def serve(
        corpus: Path = typer.Option(..., "--corpus", "-c", callback=check_corpus_path, help="Corpus directory (built with `arborag build`)."),
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind; 0.0.0.0 exposes the server to the network."),
        port: int = typer.Option(8000, "--port", "-p", min=1, max=65535, help="TCP port."),
        token_env: str = typer.Option(TOKEN_ENV, "--token-env", help="Environment variable holding the bearer token (unset = no token)."),
        cors_origin: Optional[list[str]] = typer.Option(None, "--cors-origin", help="Allow browser calls from this origin (repeatable); CORS is off by default."),
        max_k: int = typer.Option(100, "--max-k", min=1, help="Largest k a request may ask for."),
        max_budget: int = typer.Option(20000, "--max-budget", min=1, help="Largest token budget a request may ask for."),
        warm: bool = typer.Option(True, "--warm/--no-warm", help="Load the index and the query embedder before accepting requests."),
        embed_threads: Optional[int] = typer.Option(
            None, "--embed-threads", min=1,
            help="torch threads of the query embedder (default: embed.threads from the config, 'auto' = 1 per single query: on a shared "
                 "machine one thread measured 10-20x faster per query than two threads contending).",
        ),
        log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
        snapshot: Optional[str] = typer.Option(
            None, "--snapshot", help="Serve this retained snapshot (id or unique prefix; `arborag snapshots list`) and do not "
            "follow later publishes; its lease keeps it on disk while the server runs."),
        snapshot_idle: float = typer.Option(
            300.0, "--snapshot-idle", min=0.0,
            help="Seconds an earlier snapshot opened for a request that named it stays open (and leased) after its last use."),
        config: Optional[Path] = typer.Option(None, "--config", help="Path to an arborag.yaml (default: ./arborag.yaml if present)."),
    ) -> None:
        from arborag.cli.common import config_from, err_console, fail, offline_env

        offline_env()
        cfg = config_from(config)
        threads = embed_threads or cfg.embed.threads or 1
        if threads != cfg.embed.threads:
            cfg = config_from(config, overrides={"embed": {"threads": threads}})
        if not corpus.is_dir():
            fail(FileNotFoundError(f"{corpus} is not a directory; build one with `arborag build SOURCE... --corpus {corpus}`"))
        token = os.environ.get(token_env) or None
        if not is_loopback(host) and token is None:
            err_console.print(f"[yellow]warning:[/] serving on {host} without a token; set {token_env} to require one")
        import uvicorn

        from arborag.serve import Limits, create_app

        from arborag.errors import ArboragError

        try:
            app = create_app(corpus, token=token, cors_origins=cors_origin or None, config=cfg, warm=warm,
                             limits=Limits(max_k=max_k, max_budget=max_budget), old_snapshot_idle_s=snapshot_idle,
                             snapshot=snapshot)
        except ArboragError as exc:  # --snapshot names no retained snapshot: say which exist
            fail(exc)
            return
        err_console.print(f"arborag serve: {corpus} on http://{host}:{port}/ (token {'required, from $' + token_env if token else 'off'})")
        uvicorn.run(app, host=host, port=port, log_level=log_level, server_header=False)
