"""Extractive summaries a person can read (tasks/summarize/extractive.py) and the readability metrics that
check them (tasks/evaluation/readability.py)."""

from __future__ import annotations

import pyarrow as pa

from arborag.config import SummarizeConfig
from arborag.storage.schemas import EDGES, NODES
from arborag.tasks.evaluation.readability import fragmented, readability, whole, wrap_breaks
from arborag.tasks.evaluation.report import render_summary
from arborag.tasks.summarize.extractive import ExtractiveSummarizer, split_sentences
from arborag.tokenizer import get_tokenizer

CHILDREN = [
    # a leaf with a hard-wrapped remnant, a table run and a heading
    "Net sales\n$\n3,226.8\nOperating income increased 19.2% to $447.6 million in the fourth quarter. "
    "Comparable sales increased 15.6% in the fourth quarter.",
    "Cinderella went to her mother's grave under the hazel tree. She wept and prayed there three times a day. "
    "A little white bird always came on the tree.",
    "The king's son danced with her alone. He would not let go of her hand. When others came to invite her, "
    "he said, this is my partner.",
    "For more information visit https://www.example.com/investors or write to ir@example.com. "
    "This press release contains forward-looking statements about the fourth quarter.",
]


def test_summary_is_whole_sentences_in_reading_order_without_tables_or_boilerplate() -> None:
    s = ExtractiveSummarizer(SummarizeConfig(max_tokens=60))
    out = s.summarize(CHILDREN).text
    assert get_tokenizer().count(out) <= 60
    sents = split_sentences(out)
    assert sents and all(whole(x) for x in sents) and "\n" not in out
    assert "3,226.8" not in out and "https" not in out and "forward-looking" not in out
    # stable reading order: child by child, and inside a child in its order
    where = {x: (ci, si) for ci, t in enumerate(CHILDREN) for si, x in enumerate(split_sentences(t))}
    pos = [where[x] for x in sents]
    assert pos == sorted(pos)


def test_summary_takes_a_sentence_from_each_child_when_the_budget_allows() -> None:
    texts = CHILDREN[:3]
    out = ExtractiveSummarizer(SummarizeConfig(max_tokens=60)).summarize(texts).text
    children = {ci for ci, t in enumerate(texts) for x in split_sentences(out) if x in t}
    assert children == {0, 1, 2}
    # a budget for one sentence only: one child, one whole sentence
    out = ExtractiveSummarizer(SummarizeConfig(max_tokens=16)).summarize(texts).text
    assert len(split_sentences(out)) == 1 and whole(out)


def test_fragment_and_wrap_definitions() -> None:
    assert whole("Cinderella wept.") and whole("“Who is there?”") and whole("王子找到了灰姑娘。")
    assert not whole("she what she Then the bird threw") and not whole("cinderella went.") and not whole("A\nB.")
    assert fragmented("The king came. the bird threw down to her what she") and fragmented("One.\nTwo.")
    assert not fragmented("The king came. The bird threw down a dress.") and not fragmented("")
    assert wrap_breaks("her end\nwas drawing near, and\nsaid") == 2
    assert wrap_breaks("It ended.\nthe next") == 0 and wrap_breaks("Relations\nir@example.com") == 0


def _tree() -> tuple[pa.Table, pa.Table]:
    nodes = [
        {"node_id": "a", "level": 0, "text": "The king came. He was tall.", "n_tokens": 6, "doc_ids": ["d"]},
        {"node_id": "b", "level": 0, "text": "The queen\nwas kind. She smiled.", "n_tokens": 6, "doc_ids": ["d"]},
        {"node_id": "c", "level": 0, "text": "A bird sang.", "n_tokens": 4, "doc_ids": ["d"]},
        {"node_id": "s1", "level": 1, "text": "The king came. She smiled.", "n_tokens": 6, "doc_ids": ["d"]},
        {"node_id": "s2", "level": 1, "text": "bird sang", "n_tokens": 2, "doc_ids": ["d"]},
    ]
    nodes = [{**n, "summary_of": None, "summarizer": None, "summary_status": None, "created_by_run": None} for n in nodes]
    edges = [{"parent_id": p, "child_id": c, "probability": 1.0, "level": 1}
             for p, c in (("s1", "a"), ("s1", "b"), ("s1", "c"), ("s2", "c"))]
    return pa.Table.from_pylist(nodes, schema=NODES), pa.Table.from_pylist(edges, schema=EDGES)


def test_readability_of_a_tree() -> None:
    r = readability(*_tree())
    assert r["summaries"] == 2 and r["fragmented"] == 1 and r["fragment_rate"] == 0.5
    assert r["summary_sentences"] == 3 and abs(r["whole_sentence_share"] - 2 / 3) < 1e-9
    # s1 quotes a and b of its three children; s2 quotes nothing whole but "bird sang" is in c
    assert abs(r["coverage"] - (2 / 3 + 1.0) / 2) < 1e-9
    assert (r["leaves"], r["leaves_with_wrap_breaks"], r["wrap_breaks"]) == (3, 1, 1)


def test_report_has_a_readability_table() -> None:
    from arborag.storage.schemas import RESULTS

    md = render_summary(RESULTS.empty_table(), {"dataset": "toy", "readability": {"sentence": readability(*_tree())}})
    assert "## Readability of the tree" in md and "| sentence | 2 | 0.500 |" in md
