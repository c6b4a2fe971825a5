"""Optional dependencies: a missing extra is named with its install command, at the place that needs it,
and the core commands import none of the extras."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from arborag.errors import ArboragError
from arborag.extras import EXTRAS, MissingExtra, extra

ROOT = Path(__file__).resolve().parents[2]


def block(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Make ``import <name>`` (and of any of its submodules) raise ModuleNotFoundError, as when the
    package is not installed: a submodule an earlier test imported would otherwise be found in
    ``sys.modules`` without its package being looked up."""
    for name in names:
        for key in [k for k in sys.modules if k.startswith(name + ".")]:
            monkeypatch.setitem(sys.modules, key, None)
        monkeypatch.setitem(sys.modules, name, None)


# --- the helper -------------------------------------------------------------------------------


def test_a_missing_package_names_its_extra_and_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    block(monkeypatch, "rouge_score")
    with pytest.raises(MissingExtra) as info:
        with extra("eval", "`arborag eval`"):
            import rouge_score  # noqa: F401
    assert str(info.value) == "`arborag eval` needs the eval extra (rouge_score is not installed): pip install 'arborag[eval]'"
    assert info.value.extra == "eval" and info.value.name == "rouge_score"
    # one of arborag's errors (the CLI prints those without a traceback) and still a missing module
    assert isinstance(info.value, ArboragError) and isinstance(info.value, ModuleNotFoundError)


def test_a_submodule_import_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    block(monkeypatch, "sacrebleu")
    with pytest.raises(MissingExtra, match=r"\(sacrebleu is not installed\): pip install 'arborag\[eval\]'"):
        with extra("eval", "BLEU"):
            from sacrebleu.metrics import BLEU  # noqa: F401


def test_a_module_outside_the_extra_is_raised_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    block(monkeypatch, "rouge_score")
    with pytest.raises(ModuleNotFoundError) as info:
        with extra("llm", "an endpoint"):
            import rouge_score  # noqa: F401
    assert not isinstance(info.value, MissingExtra)


def test_an_unknown_extra_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown extra 'evals'; known: bench, es, eval, llm, mcp, scale"):
        with extra("evals", "x"):
            pass


def test_every_extra_is_declared_in_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = project["optional-dependencies"]
    assert set(EXTRAS) <= set(declared)
    # dev (scripts/test.sh) installs every extra: each requirement of each extra, as written there
    for name in EXTRAS:
        assert set(declared[name]) <= set(declared["dev"]), name
    core = " ".join(project["dependencies"])
    for pkg in ("openai", "mcp", "elasticsearch", "rouge-score", "sacrebleu", "matplotlib", "prefect-dask", "distributed", "s3fs"):
        assert f'"{pkg}' not in core and not any(d.split(">")[0].split("<")[0] == pkg for d in project["dependencies"]), pkg


# --- every place that imports an extra's package ----------------------------------------------


def test_rouge_and_bleu_name_the_eval_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.tasks.evaluation import metrics

    block(monkeypatch, "rouge_score", "sacrebleu")
    metrics._rouge_scorer.cache_clear()
    metrics._bleu_metric.cache_clear()
    try:
        with pytest.raises(MissingExtra, match=r"arborag\[eval\]"):
            metrics.rouge_l("a cat", ["a cat"])
        with pytest.raises(MissingExtra, match=r"arborag\[eval\]"):
            metrics.bleu("a cat", ["a cat"])
        with pytest.raises(MissingExtra, match=r"arborag\[eval\]"):
            metrics.corpus_bleu(["a cat"], [["a cat"]])
    finally:
        metrics._rouge_scorer.cache_clear()
        metrics._bleu_metric.cache_clear()


def test_plots_name_the_eval_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.tasks.evaluation import plots

    block(monkeypatch, "matplotlib", "matplotlib.pyplot")
    with pytest.raises(MissingExtra, match=r"the evaluation plots \(arborag eval\) needs the eval extra"):
        plots._plt()


def test_the_openai_client_names_the_llm_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.llm.client import LLMClient

    block(monkeypatch, "openai")
    llm = LLMClient(model="m", base_url="http://127.0.0.1:9/v1", retries=0, timeout_s=1)
    with pytest.raises(MissingExtra, match=r"needs the llm extra \(openai is not installed\): pip install 'arborag\[llm\]'"):
        llm.complete([{"role": "user", "content": "hi"}], max_tokens=5)
    with pytest.raises(MissingExtra, match=r"arborag\[llm\]"):
        llm._client()


def test_elasticsearch_names_the_es_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.config import SparseConfig
    from arborag.storage.sparse.es_backend import ElasticsearchSparseIndex
    from arborag.storage.sparse.es_connection import EsConnection

    block(monkeypatch, "elasticsearch", "elastic_transport")
    cfg = SparseConfig(backend="elasticsearch", es_url="http://127.0.0.1:9")
    with pytest.raises(MissingExtra, match=r"sparse.backend: elasticsearch\) needs the es extra .*arborag\[es\]"):
        _ = EsConnection(cfg).client
    with pytest.raises(MissingExtra, match=r"arborag\[es\]"):
        ElasticsearchSparseIndex(cfg, "arborag-corpus-x")


def test_the_dask_runner_names_the_scale_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.flows.common import dask_task_runner

    block(monkeypatch, "prefect_dask")
    with pytest.raises(MissingExtra, match=r"--runner dask\) needs the scale extra .*arborag\[scale\]"):
        dask_task_runner(workers=1)


def test_an_s3_corpus_names_the_scale_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.storage.objectstore import ObjectStore

    block(monkeypatch, "s3fs")
    with pytest.raises(MissingExtra, match=r"an s3:// corpus needs the scale extra .*arborag\[scale\]"):
        ObjectStore("s3://bucket/corpus")


def test_arborag_mcp_names_the_mcp_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    block(monkeypatch, "mcp")
    monkeypatch.delitem(sys.modules, "arborag.mcpserver.tools", raising=False)
    monkeypatch.delitem(sys.modules, "arborag.mcpserver.server", raising=False)
    with pytest.raises(MissingExtra, match=r"arborag mcp needs the mcp extra \(mcp is not installed\): pip install 'arborag\[mcp\]'"):
        import arborag.mcpserver.tools  # noqa: F401


# --- the core install -------------------------------------------------------------------------

_BLOCKED_RUN = textwrap.dedent("""
    import importlib, pkgutil, sys

    BLOCKED = set({blocked!r})

    class Blocker:
        # an extra's package is not installed: every import of it (or of its submodules) fails
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    for name in list(sys.modules):
        if name.split(".")[0] in BLOCKED:
            del sys.modules[name]
    sys.meta_path.insert(0, Blocker())

    from typer.testing import CliRunner
    from arborag.cli.app import app
    from arborag.extras import MissingExtra

    runner = CliRunner()
    for args in (["--help"], ["--version"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
    commands = sorted(c.name for c in app.registered_commands if c.name)
    groups = sorted(g.name for g in app.registered_groups if g.name)
    for name in commands + groups:
        result = runner.invoke(app, [name, "--help"])
        assert result.exit_code == 0, (name, result.output, result.exception)

    # every module of the package imports (the commands import them inside their functions),
    # except the MCP server, which says which extra it needs
    missing = []
    for top in ("arborag", "arborag.flows", "arborag.tasks", "arborag.storage", "arborag.query"):
        package = importlib.import_module(top)
        for info in pkgutil.walk_packages(package.__path__, top + ".", onerror=lambda name: None):
            try:
                importlib.import_module(info.name)
            except MissingExtra as exc:
                missing.append((info.name, exc.extra))
    print("missing", sorted(missing))
    print("commands", len(commands) + len(groups))
    print("loaded", sorted({{m.split(".")[0] for m in sys.modules}} & BLOCKED))
""")


@pytest.mark.slow
def test_the_core_commands_import_no_extra() -> None:
    """With every extra's packages uninstallable, `arborag --help`, every command's --help and every
    module of the package import (the commands import them lazily); only the MCP server, which
    needs its SDK at import, fails, with the extra to install."""
    blocked = sorted(set().union(*EXTRAS.values()))
    code = _BLOCKED_RUN.format(blocked=blocked)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("missing ", "commands ", "loaded ")))
    assert lines["missing"] == "[('arborag.mcpserver.server', 'mcp'), ('arborag.mcpserver.tools', 'mcp')]"
    assert int(lines["commands"]) >= 10
    assert lines["loaded"] == "[]"


def test_help_loads_no_extra_even_when_installed() -> None:
    """`arborag --help` with every extra installed: none of their packages is imported (they would
    only slow the command line down)."""
    names = sorted(set().union(*EXTRAS.values()))
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from arborag.cli.app import app\n"
        "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {names!r}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"


# --- the version ------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_installed_version(flag: str) -> None:
    from importlib.metadata import version

    from typer.testing import CliRunner

    from arborag.cli.app import app

    result = CliRunner().invoke(app, [flag])
    assert result.exit_code == 0
    assert result.output == f"arborag {version('arborag')}\n"


def test_the_changelog_has_an_entry_for_the_version_in_pyproject() -> None:
    project_version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = [line for line in changelog.splitlines() if line.startswith("## [") and not line.startswith("## [Unreleased]")]
    assert releases, "CHANGELOG.md has no release section"
    assert releases[0].startswith(f"## [{project_version}] - "), (releases[0], project_version)


def test_the_command_line_prints_the_install_command_with_its_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    """The extra in ``pip install 'arborag[eval]'`` is printed, not taken for console markup."""
    import typer

    from arborag.cli.common import fail

    with pytest.raises(typer.Exit):
        fail(MissingExtra("eval", "`arborag eval`", "rouge_score"))
    err = " ".join(capsys.readouterr().err.split())
    assert "error: `arborag eval` needs the eval extra (rouge_score is not installed): pip install 'arborag[eval]'" in err


def test_arborag_eval_checks_its_extra_before_any_work(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from arborag.cli.app import app

    block(monkeypatch, "sacrebleu")
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["eval", "hotpotqa", "--out", str(out), "--limit", "1", "--no-progress"])
    assert result.exit_code == 1, result.output
    assert "`arborag eval` needs the eval extra (sacrebleu is not installed): pip install 'arborag[eval]'" in " ".join(result.output.split())
    assert not out.exists()


def test_require_imports_every_package_of_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.extras import require

    block(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtra, match=r"^`arborag eval` needs the eval extra \(matplotlib is not installed\)"):
        require("eval", "`arborag eval`")


def test_build_with_the_dask_runner_checks_its_extra_before_the_corpus_is_made(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from arborag.cli.app import app

    block(monkeypatch, "prefect_dask")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("One sentence about a cat.", encoding="utf-8")
    corpus = tmp_path / "corpus"
    result = CliRunner().invoke(app, ["build", str(src), "--corpus", str(corpus), "--runner", "dask"])
    assert result.exit_code == 1, result.output
    assert "needs the scale extra (prefect_dask is not installed): pip install 'arborag[scale]'" in " ".join(result.output.split())
    assert not corpus.exists()
