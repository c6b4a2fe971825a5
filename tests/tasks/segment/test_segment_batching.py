"""The segment stage's batching changes nothing: ``reading_views`` (the table-like test of many
documents' lines in one polars pass) gives exactly the views ``reading_view`` gives one by one,
the line width computed in Python floats is ``int(np.percentile(lengths, 90))`` bit for bit, and
the offsets of texts tokenized together (``Tokenizer.offsets_many``, grouped by
``chunks._offsets``) are each text's own ``Tokenizer.offsets``."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.texts import WRAPPED

from arborag.tasks.ingest.reading import _width, reading_view, reading_views
from arborag.tasks.stages import chunks
from arborag.tokenizer import get_tokenizer

SHAPES = [
    WRAPPED,
    "Title Of The Piece\n\nA body sentence. Another one follows here.\n",
    "# Heading\n\n- one item\n- two items\n\n| a | b |\n| 1 | 2 |\n",
    "Revenue  $1,234  $2,345\nCost     $  987  $1,001\nTotal    12.5%   13.0%\n",
    "今天天气很好，我们去公园\n散步。公园里有很多人。\n中午我们在湖边吃午饭。",
    "no line breaks at all",
    "",
    "\n\n\n",
    "ended January\n29, 2022.\nThe next line Starts Here\nand goes on\n",
    "1\nst place went to the 2\nnd runner;\nour ability to pay;\nnothing else\n",
    "a,b,c\n1,2,3\n4,5,6\n",
]


def test_batched_views_equal_one_by_one_views() -> None:
    rng = random.Random(26)
    texts = SHAPES + ["\n".join(rng.sample(SHAPES, 3)) for _ in range(40)]
    wrapped = [rng.random() < 0.8 for _ in texts]
    for got, text, w in zip(reading_views(texts, wrapped), texts, wrapped, strict=True):
        want = reading_view(text, wrapped=w)
        assert got.text == want.text and got.original_length == want.original_length
        assert np.array_equal(got.cut, want.cut) and np.array_equal(got.shift, want.shift)
    assert reading_views([], []) == []


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=60))
def test_width_is_numpys_90th_percentile(lengths: list[int]) -> None:
    filled = [n for n in lengths if n > 0]
    assert _width(lengths) == (int(np.percentile(np.asarray(filled), 90)) if filled else 0)


def test_width_matches_numpy_on_many_sizes() -> None:
    rng = random.Random(7)
    for n in range(1, 300):
        lengths = [rng.randint(1, 200) for _ in range(n)]
        assert _width(lengths) == int(np.percentile(np.asarray(lengths), 90)), n


def test_offsets_of_texts_tokenized_together_are_their_own(monkeypatch) -> None:
    tok = get_tokenizer()
    rng = random.Random(3)
    long = " ".join(rng.choice(["slipper", "pumpkin", "midnight", "二〇二二年", "naïve", "co-operate"]) for _ in range(20000))
    assert len(long) > 2 * (1 << 15)  # several blocks
    texts = SHAPES + [long, "", "x", long[:5000]] + [rng.choice(SHAPES) for _ in range(30)]
    want = [tok.offsets(t) for t in texts]
    monkeypatch.setattr(chunks, "_BATCH_CHARS", 700)  # many groups, some of one text
    for got in (tok.offsets_many(texts), chunks._offsets(tok, texts)):
        assert len(got) == len(texts)
        for (gs, ge), (ws, we) in zip(got, want, strict=True):
            assert np.array_equal(gs, ws) and np.array_equal(ge, we) and gs.dtype == np.int64
    assert tok.offsets_many([]) == []
