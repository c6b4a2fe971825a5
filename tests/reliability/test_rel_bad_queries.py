"""Bad queries through the CLI and the Python API: empty, 10k characters, control characters,
unknown Lucene fields, broken Lucene syntax. Always a typed error or the plain-words retry,
never a traceback. (The Lucene parser's own fuzzing lives in tests/test_lucene.py.)
"""

from __future__ import annotations

import pytest

from helpers.reliability import HOTPOT_CORPUS, cli, cli_env, write_hotpot_docs

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.shared_data]

BAD = {
    "empty": "",
    "blank": " \t\n ",
    "10k words": ("dice game river " * 700)[:10_000],
    "10k one token": "x" * 10_000,
    "control": "dice \x01\x02\x07\x1b[31m game\x7f\u200b\ufeff",
    "unknown field": "nosuchfield:x",
    "unknown field + term": "nosuchfield:x AND dice",
    "broken lucene": '((dice AND "game',
    "only operators": "AND OR NOT + - ~ ^ *",
    "wildcard only": "*",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not HOTPOT_CORPUS.is_file():
        pytest.skip(f"needs {HOTPOT_CORPUS}")
    from arborag.config import load_config
    from arborag.flows.build import run_build

    base = tmp_path_factory.mktemp("badq")
    write_hotpot_docs(base / "src", 12)
    run_build([base / "src"], base / "corpus", load_config(), use_prefect=False, progress=False)
    return base / "corpus"


@pytest.mark.parametrize("mode", ["collapsed", "traversal", "sparse", "hybrid"])
@pytest.mark.parametrize("lucene", [False, True])
def test_python_api_typed_errors_only(built, mode: str, lucene: bool) -> None:
    from arborag.errors import ArboragError
    from arborag.query import open_index

    index = open_index(built)
    outcomes = {}
    for name, text in BAD.items():
        try:
            hits = index.search(text, mode=mode, budget=500, lucene=lucene)
        except ArboragError as exc:  # typed, with a message that says what to do
            assert str(exc).strip(), name
            outcomes[name] = type(exc).__name__
        else:
            assert isinstance(hits, list), name
            outcomes[name] = f"{len(hits)} hits"
    print(f"\nRELIABILITY bad queries ({mode}, lucene={lucene}): {outcomes}")


@pytest.mark.parametrize(
    "name, args",
    [
        ("empty", ["", "--mode", "sparse"]),
        ("10k words dense", [BAD["10k words"]]),
        ("control hybrid", [BAD["control"], "--mode", "hybrid"]),
        ("unknown field lucene", [BAD["unknown field"], "--mode", "sparse", "--lucene"]),
        ("broken lucene", [BAD["broken lucene"], "--mode", "hybrid", "--lucene"]),
        ("10k one token lucene", [BAD["10k one token"], "--mode", "sparse", "--lucene", "--json"]),
    ],
)
def test_cli_never_tracebacks(built, name: str, args: list[str]) -> None:
    run = cli("query", *args, "--corpus", str(built), env=cli_env())
    assert "Traceback" not in run.output, run.output[-3000:]
    if run.returncode != 0:
        assert run.returncode in (1, 2), run.output[-2000:]
        assert "error" in run.stderr.lower(), run.stderr[-2000:]
