"""Stage code versions key the builds, not source text.

Every module a stage runs is edited for real — every comment rewritten, every docstring replaced,
blank lines added — and the text the source fingerprint reads is that edited text: the build key
and the stage keys stay, while a bumped ``code_version`` changes them. The normalizer behind the
development check (tests/house/test_code_versions.py) is run over every one of those modules.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from arborag.config import ArboragConfig
from arborag.flows import fingerprints as stage_mod
from arborag.flows.eval_stages import EVAL_BUILD, stage_code
from arborag.flows.pipelines import BUILD_PIPELINE, INGEST_PIPELINE, PIPELINES, TREE_PIPELINE
from arborag.flows.fingerprints import code_versions, module_closure, normalized_code, normalized_source, pipeline_fingerprint
from arborag.flows.stage import stage_key
from arborag.storage.corpus import Corpus
from arborag.tasks.build.key import build_key
from arborag.tasks.stage_context import StageContext

ALL_STAGES = tuple({s.name: s for p in PIPELINES.values() for s in p}.values())


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8"))


def edit_comments_and_docstrings(source: str) -> str:
    """``source`` with every comment rewritten, every docstring replaced and a blank line added
    after the first line: the same code, other text."""
    lines = io.StringIO(source).readlines()  # "\n" only, as tokenize and ast count lines
    spans: list[tuple[int, int, int, int, str]] = []  # (start line, start col, end line, end col, new text), 1-based lines
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            spans.append((*tok.start, *tok.end, "# rewritten comment"))
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                assert first.end_lineno is not None and first.end_col_offset is not None
                start = _char_col(lines[first.lineno - 1], first.col_offset)  # ast counts UTF-8 bytes
                end = _char_col(lines[first.end_lineno - 1], first.end_col_offset)
                spans.append((first.lineno, start, first.end_lineno, end, '"""Rewritten docstring."""'))
    for l0, c0, l1, c1, new in sorted(spans, reverse=True):  # from the end: earlier positions stay valid
        head = lines[l0 - 1][:c0]
        tail = lines[l1 - 1][c1:]
        lines[l0 - 1 : l1] = [head + new + tail]
    return lines[0] + "\n" + "".join(lines[1:]) if lines else source


def _stage_sources() -> dict[str, Path]:
    return module_closure(m for s in ALL_STAGES for m in s.modules)


def test_every_stage_module_normalizes_the_same_after_a_comment_and_docstring_edit() -> None:
    closure = _stage_sources()
    assert len(closure) > 50 and "arborag.tasks.tree.build" in closure and "arborag.tasks.stages.publish" in closure
    edited_count = 0
    for name, path in closure.items():
        source = path.read_text(encoding="utf-8")
        edited = edit_comments_and_docstrings(source)
        edited_count += edited != source
        assert normalized_source(edited) == normalized_source(source), name
        assert normalized_source(source + "\n_PROBE = 1\n") != normalized_source(source), name  # code counts
    assert edited_count == len(closure)  # every module's text really changed


@pytest.fixture()
def edited_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, every stage module reads as edited (comments, docstrings, layout)."""
    paths = set(_stage_sources().values())
    real = Path.read_text

    def read_text(self: Path, *args, **kwargs) -> str:  # type: ignore[no-untyped-def]
        text = real(self, *args, **kwargs)
        return edit_comments_and_docstrings(text) if self in paths else text

    monkeypatch.setattr(Path, "read_text", read_text)
    stage_mod._imports.cache_clear()


def _keys(tmp_path: Path) -> dict[str, str]:
    config = ArboragConfig()
    leaves = pa.table({"chunk_id": ["c1", "c2"], "header": ["Doc", None]})
    ctx = StageContext(Corpus(tmp_path / "corpus").ensure(), config, "run-1", progress=False)
    inputs = {"files": [], "strategy": config.segment.strategy}
    keys = {s.name: stage_key(ctx, s, inputs) for s in INGEST_PIPELINE}
    keys["build"] = build_key(leaves, config, code_versions(TREE_PIPELINE))
    keys["eval-build"] = stage_code(EVAL_BUILD)
    return keys


def test_a_comment_edit_in_every_stage_module_keeps_the_build_key_and_stage_keys(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    before_keys = _keys(tmp_path)
    before_source = pipeline_fingerprint(BUILD_PIPELINE)
    before_code = normalized_code(BUILD_PIPELINE)
    request.getfixturevalue("edited_sources")
    assert pipeline_fingerprint(BUILD_PIPELINE) != before_source  # the source hashing sees the edit ...
    assert _keys(tmp_path) == before_keys  # ... the keys do not
    assert normalized_code(BUILD_PIPELINE) == before_code  # nor does the development check


def test_a_bumped_code_version_changes_the_keys(tmp_path: Path) -> None:
    config = ArboragConfig()
    ctx = StageContext(Corpus(tmp_path / "corpus").ensure(), config, "run-1", progress=False)
    inputs = {"files": [], "strategy": config.segment.strategy}
    leaves = pa.table({"chunk_id": ["c1"], "header": ["Doc"]})
    bumped = tuple(replace(s, code_version=s.code_version + ".1") if s.name == "tree" else s for s in TREE_PIPELINE)
    assert build_key(leaves, config, code_versions(bumped)) != build_key(leaves, config, code_versions(TREE_PIPELINE))
    segment = next(s for s in BUILD_PIPELINE if s.name == "segment")
    assert stage_key(ctx, replace(segment, code_version=segment.code_version + ".1"), inputs) != stage_key(ctx, segment, inputs)
    assert code_versions((EVAL_BUILD,), bumped) != code_versions((EVAL_BUILD,), TREE_PIPELINE)


def test_a_stage_without_a_declared_version_is_keyed_by_its_source(monkeypatch: pytest.MonkeyPatch) -> None:
    declared = TREE_PIPELINE[0]
    undeclared = replace(declared, code_version="")
    before = (code_versions((declared,)), code_versions((undeclared,)))
    path = module_closure(undeclared.modules)[undeclared.runner.__module__]
    real = Path.read_text

    def read_text(self: Path, *args, **kwargs) -> str:  # type: ignore[no-untyped-def]
        return real(self, *args, **kwargs) + ("\n_PROBE = 1\n" if self == path else "")  # a real code change

    monkeypatch.setattr(Path, "read_text", read_text)
    assert code_versions((undeclared,)) != before[1]
    assert code_versions((declared,)) == before[0]
