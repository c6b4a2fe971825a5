"""`arborag serve`: options reach uvicorn and the app; safe defaults (loopback, token from env)."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from arborag.cli import serve as serve_cli


def _text(result) -> str:
    return " ".join(result.output.split())  # rich wraps long lines


def _app() -> typer.Typer:
    app = typer.Typer()
    serve_cli.register(app)

    @app.command("noop")  # a second command keeps typer from collapsing the app into `serve`
    def noop() -> None: ...

    return app


def test_serve_defaults_to_loopback_and_reads_the_token_from_env(monkeypatch, built_corpus):
    import uvicorn

    import arborag.serve as serve_pkg

    seen: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw, app=app))
    real_create = serve_pkg.create_app
    monkeypatch.setattr(serve_pkg, "create_app", lambda corpus, **kw: seen.update(create=kw) or real_create(corpus, **kw))
    monkeypatch.setenv("ARBORAG_SERVE_TOKEN", "from-env")
    r = CliRunner().invoke(_app(), ["serve", "--corpus", str(built_corpus), "--no-warm"])
    assert r.exit_code == 0, r.output
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8000
    assert seen["create"]["token"] == "from-env" and seen["create"]["cors_origins"] is None
    # embed.threads "auto": one torch thread for a single text (a query), torch's default for batches
    assert seen["create"]["config"].embed.threads == "auto"
    assert "from-env" not in r.output and "token required" in _text(r)


def test_serve_options_and_warning_without_token(monkeypatch, built_corpus):
    import uvicorn

    seen: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw, app=app))
    monkeypatch.delenv("ARBORAG_SERVE_TOKEN", raising=False)
    monkeypatch.setenv("MY_TOKEN", "abc")
    r = CliRunner().invoke(_app(), ["serve", "--corpus", str(built_corpus), "--host", "0.0.0.0", "--port", "9123",
                                    "--max-k", "7", "--cors-origin", "http://a.example", "--no-warm", "--embed-threads", "2"])
    assert r.exit_code == 0 and "without a token" in _text(r)
    assert seen["host"] == "0.0.0.0" and seen["port"] == 9123
    assert seen["app"].state.limits.max_k == 7 and seen["app"].state.holder.config.embed.threads == 2
    r = CliRunner().invoke(_app(), ["serve", "--corpus", str(built_corpus), "--token-env", "MY_TOKEN", "--no-warm"])
    assert r.exit_code == 0 and "token required, from $MY_TOKEN" in _text(r)


def test_serve_refuses_a_missing_corpus(tmp_path):
    r = CliRunner().invoke(_app(), ["serve", "--corpus", str(tmp_path / "nope")])
    assert r.exit_code == 1 and "not a directory" in _text(r)


def test_registering_the_command_does_not_import_fastapi():
    import subprocess
    import sys

    code = "import sys, arborag.cli.serve; print(sorted(m for m in ('fastapi', 'uvicorn', 'numpy', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.strip() == "[]"
