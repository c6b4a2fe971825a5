"""`arborag mcp`: the corpus as an MCP server for agents (stdio, or streamable HTTP on 127.0.0.1)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from arborag.cli.common import check_corpus_path

TOKEN_ENV = "ARBORAG_SERVE_TOKEN"



def register(app: typer.Typer) -> None:
    @app.command(
        "mcp",
        help=(
            "Serve a built corpus to agents over the Model Context Protocol: tools search (mode, budget, Lucene, "
            "doc filter), get_node (with parents and children), get_chunk (a document by offsets), tree_top (the "
            "summaries at the top of the tree) and ask (when an LLM is configured); resource arborag://snapshot/info. "
            "The model stays loaded; a newly published build is picked up between calls.\n\n"
            "stdio by default (the agent starts the command). --http serves streamable HTTP at /mcp on 127.0.0.1 "
            f"unless --host says otherwise; when ${TOKEN_ENV} (or --token-env) is set, requests need "
            "'Authorization: Bearer <token>', as with `arborag serve`.\n\n"
            "Example:\n\n"
            "  arborag mcp --corpus /tmp/demo\n\n"
            "  arborag mcp --corpus /tmp/demo --http --port 8765\n\n"
            "Client configuration (Claude Desktop, IDEs; the mcpServers block):\n\n"
            '  {"mcpServers": {"arborag": {"command": "arborag", "args": ["mcp", "--corpus", "/tmp/demo"]}}}'
        ),
    )
    def mcp(
        corpus: Path = typer.Option(..., "--corpus", "-c", callback=check_corpus_path, help="Corpus directory (built with `arborag build`)."),
        http: bool = typer.Option(False, "--http", help="Serve streamable HTTP at /mcp instead of stdio."),
        host: str = typer.Option("127.0.0.1", "--host", help="--http: interface to bind; 0.0.0.0 exposes it to the network."),
        port: int = typer.Option(8765, "--port", "-p", min=1, max=65535, help="--http: TCP port."),
        token_env: str = typer.Option(TOKEN_ENV, "--token-env", help="--http: environment variable holding the bearer token (unset = no token)."),
        max_budget: int = typer.Option(20000, "--max-budget", min=1, help="Largest token budget a call may ask for."),
        warm: bool = typer.Option(True, "--warm/--no-warm", help="Open the index and load the query embedder before serving."),
        config: Optional[Path] = typer.Option(None, "--config", help="Path to an arborag.yaml (default: ./arborag.yaml if present)."),
    ) -> None:
        from arborag.cli.common import config_from, err_console, fail, offline_env

        offline_env()
        cfg = config_from(config)
        if not corpus.is_dir():
            fail(FileNotFoundError(f"{corpus} is not a directory; build one with `arborag build SOURCE... --corpus {corpus}`"))
        try:
            from arborag.mcpserver.server import create_server, http_app, run_stdio
            from arborag.mcpserver.tools import Limits
        except ModuleNotFoundError as exc:
            fail(ModuleNotFoundError(f"`arborag mcp` needs the MCP SDK ({exc.name} is missing): pip install 'arborag[mcp]'"))
        server, _ = create_server(corpus, config=cfg, limits=Limits(max_budget=max_budget), warm=warm)
        if not http:
            err_console.print(f"arborag mcp: {corpus} over stdio")  # stderr: stdout carries the protocol
            run_stdio(server)
            return
        from arborag.cli.serve import is_loopback  # the one loopback rule of `serve`

        token = os.environ.get(token_env) or None
        if not is_loopback(host) and token is None:
            err_console.print(f"[yellow]warning:[/] serving MCP on {host} without a token; set {token_env} to require one")
        import uvicorn

        err_console.print(f"arborag mcp: {corpus} on http://{host}:{port}/mcp (token {'required, from $' + token_env if token else 'off'})")
        uvicorn.run(http_app(server, token=token), host=host, port=port, log_level="warning", server_header=False)
