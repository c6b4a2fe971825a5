"""The registry of retrieval modes (query/modes.py): ``Index.search`` dispatches every mode through it."""

from __future__ import annotations

import inspect
import sys
import types
from pathlib import Path

import pytest
from pydantic import Field

from arborag.errors import QueryError
from arborag.query import modes, open_index
from arborag.storage.corpus import Corpus
from tests.helpers.query import FakeQueryEmbedder, publish_snapshot

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def index(tmp_path):
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "s1")
    return open_index(corpus.root, embed_query=FakeQueryEmbedder())


class FakeOptions(modes.ModeOptions):  # the options model of the test double below
    n_variants: int = Field(3, ge=0)


def test_a_registered_mode_gets_the_call_and_its_options(index, monkeypatch):
    seen = {}
    fake = types.ModuleType("arborag_test_fake_mode")  # a test double, named so

    def search(ix, text, **kwargs):
        seen.update(kwargs, text=text, index=ix)
        return ix.search(text, mode="collapsed", budget=kwargs["budget"], k=kwargs["k"])

    fake.search = search
    monkeypatch.setitem(sys.modules, "arborag_test_fake_mode", fake)
    monkeypatch.setitem(modes.MODES, "fake", modes.ModeSpec("fake", "arborag_test_fake_mode:search", "a test double", FakeOptions))
    hits = index.search("alpha", mode="fake", budget=100, n_variants=3)
    assert [h.node_id for h in hits] == [h.node_id for h in index.search("alpha", mode="collapsed", budget=100)]
    assert seen["n_variants"] == 3 and seen["budget"] == 100 and seen["index"] is index
    assert "fake" in modes.available_modes()
    with pytest.raises(QueryError, match="takes no option colour; it takes n_variants"):
        index.search("alpha", mode="fake", colour=1)
    with pytest.raises(QueryError, match="n_variants"):  # the options model checks values too
        index.search("alpha", mode="fake", n_variants=-1)


def test_a_missing_mode_module_is_not_offered(index, monkeypatch):
    monkeypatch.setitem(modes.MODES, "ghost", modes.ModeSpec("ghost", "arborag.query.no_such_module:search", "not installed"))
    assert "ghost" not in modes.available_modes()
    with pytest.raises(QueryError, match="unknown mode 'ghost'.*collapsed"):
        index.search("alpha", mode="ghost")
    with pytest.raises(QueryError, match="unknown mode 'nope'"):
        index.search("alpha", mode="nope")


def test_core_modes_refuse_options(index):
    with pytest.raises(QueryError, match="takes no options"):
        index.search("alpha", mode="collapsed", n_variants=3)


@pytest.mark.parametrize("name", modes.MODE_NAMES)
def test_every_registered_mode_is_installed_and_takes_its_options(name):
    spec = modes.MODES[name]
    assert spec.name == name and spec.description
    fn = spec.load()
    params = inspect.signature(fn).parameters
    for required in ("budget", "k", "levels", "doc_ids", "vector", "lucene"):
        assert required in params, f"{spec.target} lacks {required}="
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for option in spec.option_names:  # the options model names nothing the function cannot take
        assert takes_any or option in params, f"{spec.target} does not take {option}= (its options model says it does)"
        if option in params and params[option].default is not inspect.Parameter.empty:  # one default, not two
            assert params[option].default == spec.options.model_fields[option].default, (spec.target, option)
    assert not spec.needs_llm  # every mode answers offline (an LLM is optional or configured)


def test_the_registry_names_the_default_first_and_every_module():
    assert modes.MODE_NAMES[0] == modes.DEFAULT_MODE == "hop"
    assert set(modes.available_modes()) == set(modes.MODE_NAMES)
    assert {"arborag.query.raptor", "arborag.query.auto", "arborag.query.rerank", "arborag.query.level"} <= set(modes.mode_modules())
    assert "hop (default)" in modes.mode_help() and "auto" in modes.mode_help() and "rerank" in modes.mode_help()


def test_the_docs_table_of_modes_is_the_registry():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert modes.modes_markdown() in doc, (
        "docs/ARCHITECTURE.md's table of modes is not the registry's; paste the output of "
        "python -c 'from arborag.query.modes import modes_markdown; print(modes_markdown())'")


def test_reading_the_registry_imports_no_mode_and_no_index():
    import subprocess

    code = ("import sys, arborag.query.modes as m; m.mode_help(); "
            "print(sorted(x for x in sys.modules if x.startswith('arborag.query.') and x not in ('arborag.query.modes', 'arborag.query.options')) + "
            "[x for x in ('numpy', 'torch') if x in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    assert out == "[]", out


def test_modes_use_only_the_public_index_api():
    """No mode module reaches into the index's private members (``index._x``)."""
    import ast

    bad = []
    for path in sorted((ROOT / "query").rglob("*.py")):
        if path.name == "index.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = node.value
                name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
                if name in ("index", "ix", "idx"):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}.{node.attr}")
    assert not bad, "private Index members used by modes:\n" + "\n".join(bad)


def test_search_without_mode_budget_or_k_takes_the_configs(tmp_path):
    from arborag.config import ArboragConfig

    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "s1")
    cfg = ArboragConfig().with_overrides(query={"mode": "traversal", "budget": 90, "k": 1})
    index = open_index(corpus.root, config=cfg, embed_query=FakeQueryEmbedder())
    implicit = [(h.node_id, h.score) for h in index.search("alpha")]
    assert implicit == [(h.node_id, h.score) for h in index.search("alpha", mode="traversal", budget=90, k=1)]
    assert implicit != [(h.node_id, h.score) for h in index.search("alpha", mode="hop", budget=2000, k=5)]
    assert len(index.search("alpha", mode="collapsed", budget=None)) == 1  # budget=None stays no cap: query.k hits
