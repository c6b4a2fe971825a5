"""Plug-in retrieval modes: ``Index.search`` hands any non-core mode to its module."""

from __future__ import annotations

import sys
import types

import pytest

from arborag.errors import QueryError
from arborag.query import modes, open_index
from arborag.storage.corpus import Corpus
from tests.helpers_query import FakeQueryEmbedder, publish_snapshot


@pytest.fixture()
def index(tmp_path):
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "s1")
    return open_index(corpus.root, embed_query=FakeQueryEmbedder())


def test_a_plugin_mode_gets_the_call_and_its_options(index, monkeypatch):
    seen = {}
    fake = types.ModuleType("arborag_test_fake_mode")  # a test double, named so

    def search(ix, text, **kwargs):
        seen.update(kwargs, text=text, index=ix)
        return ix.search(text, mode="collapsed", budget=kwargs["budget"], k=kwargs["k"])

    fake.search = search
    monkeypatch.setitem(sys.modules, "arborag_test_fake_mode", fake)
    monkeypatch.setitem(modes.PLUGIN_MODES, "fake", "arborag_test_fake_mode")
    hits = index.search("alpha", mode="fake", budget=100, n_variants=3)
    assert [h.node_id for h in hits] == [h.node_id for h in index.search("alpha", mode="collapsed", budget=100)]
    assert seen["n_variants"] == 3 and seen["budget"] == 100 and seen["index"] is index
    assert "fake" in modes.available_modes()


def test_a_missing_plugin_module_is_not_offered(index, monkeypatch):
    monkeypatch.setitem(modes.PLUGIN_MODES, "ghost", "arborag.query.no_such_module")
    assert "ghost" not in modes.available_modes()
    with pytest.raises(QueryError, match="unknown mode 'ghost'.*collapsed"):
        index.search("alpha", mode="ghost")


def test_core_modes_refuse_options(index):
    with pytest.raises(QueryError, match="takes no options"):
        index.search("alpha", mode="collapsed", n_variants=3)
