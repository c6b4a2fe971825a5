"""The reading-order view (tasks/ingest/reading.py) and the chunks cut on it (build_chunks).

Property: over generated hard-wrapped and hyphenated documents, every chunk's
``start_char``/``end_char`` point at the exact original text — the chunk's text is that slice
with its joined line breaks as spaces and its split words' ``-\\n`` dropped, nothing else — and
the chunks cover every word of the document in order.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arborag.config import SegmentConfig
from arborag.storage.schemas import DOCUMENTS
from arborag.tasks.ingest.reading import is_heading_like, is_table_like, reading_view
from arborag.tasks.stages.chunks import build_chunks
from arborag.tokenizer import get_tokenizer

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WORDS = ("the", "king", "daughter", "slipper", "garden", "golden", "tree", "wept", "and", "continued",
         "operating", "income", "increased", "compared", "quarter", "beautiful", "sisters", "pigeons")


def _wrap(words: list[str], width: int, hyphenate: random.Random | None) -> str:
    """Words filled into lines of at most ``width`` characters; with ``hyphenate`` a long word at a
    line end is sometimes split with a hyphen, as PDFs do."""
    lines: list[str] = []
    line = ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            if hyphenate is not None and len(w) > 5 and w.isalpha() and w.islower() and hyphenate.random() < 0.5:
                cut = hyphenate.randint(2, len(w) - 2)
                lines.append(f"{line} {w[:cut]}-")
                line = w[cut:]
                continue
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    if line:
        lines.append(line)
    return "\n".join(lines)


def _document(seed: int, width: int, hyphens: bool) -> str:
    rng = random.Random(seed)
    paragraphs = []
    for _ in range(rng.randint(1, 4)):
        sentences = []
        for _ in range(rng.randint(1, 5)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(3, 18))]
            words[0] = words[0].capitalize()
            sentences.append(" ".join(words) + rng.choice([".", ".", "!", "?", ","]))
        body = " ".join(sentences)
        paragraphs.append(_wrap(body.split(" "), width, rng if hyphens else None))
        if rng.random() < 0.3:
            paragraphs.append(rng.choice(["# Chapter One", "- a list item\n- another item", "Net sales | 3,226.8 | 2,729.4"]))
    return "\n\n".join(paragraphs)


def _docs_table(texts: list[str]) -> pa.Table:
    rows = [{"doc_id": f"d{i}", "uri": f"d{i}.txt", "title": None, "mime": "text/plain", "n_chars": len(t), "text": t,
             "metadata": "{}", "ingested_at": None, "status": "ok", "error": None} for i, t in enumerate(texts)]
    return pa.Table.from_pylist(rows, schema=DOCUMENTS)


def _view_of_slice(text: str, start: int, end: int) -> str:
    """What a chunk over ``text[start:end]`` may read: wrapped breaks as spaces, ``-\\n`` of a
    split word dropped (an independent re-statement of the view's two edits)."""
    s = re.sub(r"(?<=[a-z])-\n(?=[a-z])", "", text[start:end])
    return s


def _squash(s: str) -> str:
    return re.sub(r"\s+", "", s)


@SETTINGS
@given(seed=st.integers(0, 10_000), width=st.integers(25, 90), hyphens=st.booleans(),
       strategy=st.sampled_from(["sentence", "ffs", "dds", "rcs"]), max_tokens=st.integers(8, 60))
def test_chunk_offsets_point_at_the_exact_original_text(seed: int, width: int, hyphens: bool, strategy: str, max_tokens: int) -> None:
    text = _document(seed, width, hyphens)
    cfg = SegmentConfig(sentence_max_tokens=max_tokens, ffs_window=max_tokens, ffs_step=max(1, max_tokens // 2),
                        dds_window=max_tokens, rcs_chunk_size=max_tokens, rcs_overlap=max_tokens // 4)
    rows = build_chunks(_docs_table([text]), cfg, strategy=strategy, tokenizer=get_tokenizer()).to_pylist()  # type: ignore[arg-type]
    assert rows, "a non-empty document gives chunks"
    view = reading_view(text)
    for r in rows:
        s, e = r["start_char"], r["end_char"]
        assert 0 <= s < e <= len(text)
        assert not text[s].isspace() and not text[e - 1].isspace(), "a chunk starts and ends on a character, not a break"
        original = text[s:e]
        # same characters, in order, apart from whitespace and the dropped hyphens of split words
        assert _squash(r["text"]) == _squash(_view_of_slice(text, s, e))
        # and the chunk is exactly the original with only joined breaks changed
        assert len(r["text"]) == len(original) - 2 * (len(original) - len(_view_of_slice(text, s, e))) // 2
        for a, b in zip(r["text"], _view_of_slice(text, s, e), strict=True):
            assert a == b or (a == " " and b == "\n")
        assert "-\n" not in r["text"] or not re.search(r"[a-z]-\n[a-z]", r["text"])
        assert r["text"] in view.text
    if strategy == "sentence":  # disjoint chunks covering every word once, in order
        joined = "".join(_squash(r["text"]) for r in rows)
        assert joined == _squash(view.text)
        starts = [r["start_char"] for r in rows]
        assert starts == sorted(starts)


@SETTINGS
@given(seed=st.integers(0, 10_000), width=st.integers(25, 90), hyphens=st.booleans())
def test_view_map_round_trips(seed: int, width: int, hyphens: bool) -> None:
    text = _document(seed, width, hyphens)
    view = reading_view(text)
    pos = np.arange(len(view.text), dtype=np.int64)
    orig = view.to_original(pos)
    assert np.all(np.diff(orig) > 0), "the map is strictly increasing"
    for i, o in zip(pos.tolist(), orig.tolist(), strict=True):
        assert view.text[i] == text[o] or (view.text[i] == " " and text[o] == "\n")
    assert np.array_equal(view.to_view(orig), pos), "to_view inverts to_original"
    dropped = set(range(len(text))) - set(orig.tolist())
    assert all(text[k] in "-\n" for k in dropped), "the view drops nothing but split words' '-\\n'"


def test_view_joins_wraps_and_keeps_structure() -> None:
    text = ("The wife of a rich man fell sick, and as she felt that her end\n"
            "was drawing near, she called her only daughter to her bedside and\n"
            "said, dear child, be good and pious. The results conti-\n"
            "nued to improve.\n"
            "Short last line.\n"
            "\n"
            "# Chapter Two\n"
            "- first item\n"
            "- second item\n"
            "Net sales | 3,226.8 | 2,729.4\n"
            "Ulta Beauty Announces Fourth Quarter\n"
            "Fiscal 2022 Results")
    v = reading_view(text).text
    assert "her end was drawing near, she called her only daughter to her bedside and said," in v
    assert "The results continued to improve." in v
    for kept in ("improve.\nShort last line.\n\n# Chapter Two\n- first item\n- second item\nNet sales",
                 "2,729.4\nUlta Beauty Announces Fourth Quarter\nFiscal 2022 Results"):
        assert kept in v
    assert reading_view("no line breaks at all").text == "no line breaks at all"


def test_cjk_lines_join_without_a_space() -> None:
    text = "今天天气很好，我们去公园\n散步。公园里有很多人。\n中午我们在湖边吃午饭。"
    assert reading_view(text).text == "今天天气很好，我们去公园散步。公园里有很多人。\n中午我们在湖边吃午饭。"


@pytest.mark.parametrize(("line", "table", "heading"), [
    ("$ 3,226.8", True, False), ("Net sales | 3,226.8", True, False), ("29, 2022.", True, False),
    ("Comparable Sales Increased 15.6%", False, True), ("For the Fourth Quarter of Fiscal 2022", False, True),
    ("the snow spread a white sheet over the grave, and by the time the", False, False),
    ("Thereupon she closed her eyes and departed.", False, False),
])
def test_line_kinds(line: str, table: bool, heading: bool) -> None:
    assert is_table_like(line) is table
    assert is_heading_like(line) is heading


def test_unwrapped_documents_keep_their_chunk_ids_and_texts() -> None:
    text = "One paragraph per line. It is never wrapped.\nA second paragraph, on its own line."
    assert reading_view(text).text == text
    cfg = SegmentConfig(sentence_max_tokens=8)
    rows = build_chunks(_docs_table([text]), cfg, strategy="sentence", tokenizer=get_tokenizer()).to_pylist()
    assert all(r["text"] == text[r["start_char"] : r["end_char"]] for r in rows)


def test_csv_rows_are_never_joined() -> None:
    text = "product: kettle; price: 25\nproduct: teapot; price: 18\nproduct: cup; price: 4"
    docs = _docs_table([text]).set_column(3, "mime", pa.array(["text/csv"]))
    rows = build_chunks(docs, SegmentConfig(sentence_max_tokens=100), strategy="sentence", tokenizer=get_tokenizer()).to_pylist()
    assert "".join(r["text"] for r in rows).count("price") == 3
    assert all(r["text"] == text[r["start_char"] : r["end_char"]] for r in rows)
    assert reading_view(text).text != text, "as plain text the rows would read as one wrapped paragraph"
