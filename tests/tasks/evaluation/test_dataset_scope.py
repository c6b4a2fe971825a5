"""The corpus scope of an evaluation dataset (``eval --full-corpus``; ``EvalOptions.scope`` in the
Python API): one of auto, full, questions — anything else is refused before any data is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from arborag.errors import ConfigError
from arborag.tasks.evaluation.datasets import corpus_scope, load_dataset


@pytest.mark.parametrize("scope", ["auto", "full", "questions"])
def test_the_three_scopes_are_taken(scope: str) -> None:
    assert corpus_scope(scope) == scope


@pytest.mark.parametrize("scope", ["Full", "all", ""])
def test_another_scope_is_refused_naming_the_choices(scope: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown corpus scope .*choose one of auto, full, questions"):
        load_dataset("hotpotqa", tmp_path, scope=scope)  # type: ignore[arg-type]
