"""Labels of summary nodes (tasks/summarize/labels.py): c-TF-IDF keywords, titles, incremental reuse, LLM titles."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arborag.storage.schemas import EDGES, NODES
from arborag.storage.tables import read_table
from arborag.storage.tree_tables import leaves_under, tree_sizes
from arborag.tasks.summarize.labels import LabelRequest, ctfidf, label_nodes, leaf_terms, llm_titler

LEAVES = {
    "a": "Apple orchards bloom in spring; the apple harvest follows in autumn.",
    "b": "Pears and apples are pressed into cider after the harvest.",
    "c": "An orchard needs pruning: apple trees fruit on old wood.",
    "d": "The ship left the harbour with a cargo of timber.",
    "e": "Sailors loaded the ship's cargo while the harbour master watched.",
    "f": "A storm drove the ship back into the harbour.",
    "g": "1999 2000 2001 42.",
}
# s1 = a b c (fruit), s2 = d e f (ships), s3 = g (numbers), r = s1 s2 (level 2), q = s3 (level 2)
EDGES_SPEC = ([("s1", c, 1.0, 1) for c in "abc"] + [("s2", c, 1.0, 1) for c in "def"] + [("s3", "g", 1.0, 1)]
              + [("r", "s1", 1.0, 2), ("r", "s2", 0.8, 2), ("q", "s3", 1.0, 2)])
SUMMARIES = {"s1": (1, "Apples and orchards."), "s2": (1, "Ships in the harbour."), "s3": (1, "Numbers of years and more numbers here."),
             "r": (2, "Fruit and ships."), "q": (2, "Only numbers.")}


def tree(summary_texts: dict[str, tuple[int, str]] = SUMMARIES) -> tuple[pa.Table, pa.Table]:
    rows = [{"node_id": i, "level": 0, "text": t, "n_tokens": 10, "doc_ids": ["d"], "summarizer": "leaf", "summary_status": "leaf"}
            for i, t in LEAVES.items()]
    rows += [{"node_id": i, "level": lv, "text": t, "n_tokens": 5, "doc_ids": ["d"], "summarizer": "x", "summary_status": "ok"}
             for i, (lv, t) in summary_texts.items()]
    edges = pa.Table.from_pylist([{"parent_id": p, "child_id": c, "probability": pr, "level": lv} for p, c, pr, lv in EDGES_SPEC], schema=EDGES)
    return pa.Table.from_pylist(rows, schema=NODES), edges


def labels_of(nodes: pa.Table) -> dict[str, dict]:
    return {r["node_id"]: r for r in nodes.select(["node_id", "keywords", "title", "title_source"]).to_pylist()}


def test_every_summary_gets_keywords_of_its_own_leaves_and_a_title() -> None:
    nodes, edges = tree()
    out = labels_of(label_nodes(nodes, edges))
    assert out["s1"]["keywords"][0] == "apple" and "orchard" in out["s1"]["keywords"][:3]
    assert sorted(out["s2"]["keywords"][:2]) == ["harbour", "ship"]
    assert not set(out["s1"]["keywords"]) & {"ship", "harbour", "cargo"}
    assert out["s1"]["title"].startswith("Apple · ") and out["s1"]["title_source"] == "ctfidf"
    # the level-2 root r spans both clusters; q (numbers only) has no word: its title is its summary's start
    assert {"apple", "ship", "harbour"} <= set(out["r"]["keywords"])
    assert out["q"]["keywords"] == [] and out["q"]["title"] == "Only numbers." and out["q"]["title_source"] == "text"
    assert out["s3"]["title"] == "Numbers of years and more numbers here."
    for leaf in LEAVES:
        assert out[leaf]["keywords"] is None and out[leaf]["title"] is None
    assert all(out[s]["title"] for s in SUMMARIES)


def test_rows_and_other_columns_are_unchanged() -> None:
    nodes, edges = tree()
    out = label_nodes(nodes, edges)
    assert out.schema == NODES
    assert out.drop_columns(["keywords", "title", "title_source"]).equals(nodes.drop_columns(["keywords", "title", "title_source"]))


def test_ctfidf_is_bertopic_formula_by_hand() -> None:
    counts = pl.DataFrame({"level": [1, 1, 1], "node_id": ["x", "x", "y"], "term": ["t", "u", "t"], "n": [3, 1, 2]}, schema_overrides={"n": pl.UInt32})
    got = {(r["node_id"], r["term"]): r["score"] for r in ctfidf(counts).iter_rows(named=True)}
    a = (3 + 1 + 2) / 2  # mean term occurrences per class
    assert got[("x", "t")] == pytest.approx(3 / 4 * math.log(1 + a / 5))
    assert got[("x", "u")] == pytest.approx(1 / 4 * math.log(1 + a / 1))
    assert got[("y", "t")] == pytest.approx(2 / 2 * math.log(1 + a / 5))


def test_leaf_terms_drop_stop_words_count_once_and_keep_the_usual_spelling() -> None:
    terms = leaf_terms(pl.DataFrame({"node_id": ["a"], "text": ["Paris is in France. Paris, PARIS and the Seine’s banks."]}))
    got = dict(zip(terms["term"].to_list(), terms["surface"].to_list()))
    assert got == {"paris": "Paris", "france": "France", "seine": "Seine", "banks": "banks"}


def test_leaves_under_follows_edges_down_to_the_leaves() -> None:
    nodes, edges = tree()
    under = leaves_under(pl.from_arrow(nodes), pl.from_arrow(edges))
    r = sorted(under.filter(pl.col("node_id") == "r")["leaf_id"].to_list())
    assert r == list("abcdef") and under.filter(pl.col("node_id") == "q")["leaf_id"].to_list() == ["g"]
    sizes = {r["node_id"]: (r["n_leaves"], r["n_children"]) for r in tree_sizes(pl.from_arrow(nodes), pl.from_arrow(edges)).iter_rows(named=True)}
    assert sizes["r"] == (6, 2) and sizes["s1"] == (3, 3) and sizes["a"] == (1, 0)


def test_update_keeps_the_labels_of_unchanged_summaries_and_labels_new_ones() -> None:
    nodes, edges = tree()
    first = label_nodes(nodes, edges)
    # a previous snapshot whose s1 was titled by someone else: an unchanged node keeps its label as published
    prev = labels_of(first)
    prev_rows = [dict(r, title="Published title", title_source="llm") if r["node_id"] == "s1" else r for r in first.to_pylist()]
    previous = pa.Table.from_pylist(prev_rows, schema=NODES)
    seen: list[str] = []

    def titler(reqs: list[LabelRequest]) -> list[str | None]:
        seen.extend(r.node_id for r in reqs)
        return [None] * len(reqs)

    # s2 is rewritten (new id s2b) in the update
    renamed = pa.Table.from_pylist([dict(r, node_id="s2b") if r["node_id"] == "s2" else r for r in nodes.to_pylist()], schema=NODES)
    e2 = pa.Table.from_pylist([dict(r, parent_id="s2b") if r["parent_id"] == "s2" else (dict(r, child_id="s2b") if r["child_id"] == "s2" else r)
                               for r in edges.to_pylist()], schema=EDGES)
    out = labels_of(label_nodes(renamed, e2, previous=previous, titler=titler))
    assert out["s1"]["title"] == "Published title" and out["s1"]["title_source"] == "llm"
    assert out["s2b"]["keywords"] == prev["s2"]["keywords"] and out["s2b"]["title_source"] == "ctfidf"
    assert seen == ["s2b"]  # only the new summary goes to the titler


def test_llm_titler_uses_the_first_line_and_a_failed_answer_keeps_the_keyword_title() -> None:
    nodes, edges = tree()
    prompts: list[str] = []
    scripted = {"s1": "Title: \"Orchards and the apple harvest\"\nmore text", "s2": "", "r": None}

    def fake_complete(ps: list[str]) -> list[str | None]:  # a scripted fake LLM: answers by the cluster it is asked about
        prompts.extend(ps)
        out = []
        for p in ps:
            key = "s1" if "apple" in p.split("Summary:")[0] and "ship" not in p.split("Summary:")[0] else ("s2" if "ship" in p.split("Summary:")[0] and "apple" not in p.split("Summary:")[0] else "r")
            out.append(scripted.get(key) if "numbers" not in p.lower() else "Numbers")
        return out

    out = labels_of(label_nodes(nodes, edges, titler=llm_titler(fake_complete)))
    assert out["s1"]["title"] == "Orchards and the apple harvest" and out["s1"]["title_source"] == "llm"
    assert out["s2"]["title_source"] == "ctfidf" and "·" in out["s2"]["title"]
    assert out["r"]["title_source"] == "ctfidf"
    assert out["q"]["title"] == "Numbers" and out["q"]["title_source"] == "llm"
    assert len(prompts) == len(SUMMARIES) and all("Keywords:" in p and "one line" in p for p in prompts)


def test_a_nodes_file_written_before_labels_reads_with_null_labels(tmp_path: Path) -> None:
    nodes, _ = tree()
    old = nodes.drop_columns(["keywords", "title", "title_source"])
    pq.write_table(old, tmp_path / "nodes.parquet")
    back = read_table("nodes", tmp_path / "nodes.parquet", missing_ok=False)
    assert back.schema == NODES and back.column("title").null_count == back.num_rows
    nodes2, edges = tree()
    assert labels_of(label_nodes(back, edges))["s1"]["title"] == labels_of(label_nodes(nodes2, edges))["s1"]["title"]


def test_a_title_skips_a_keyword_that_starts_like_an_earlier_one() -> None:
    leaves = {"a": "Jamaican reggae from Jamaica", "b": "Jamaica and Jamaican singers of reggae", "c": "Ships in harbour", "d": "A harbour ship"}
    rows = [{"node_id": i, "level": 0, "text": t, "n_tokens": 5, "doc_ids": ["d"], "summarizer": "leaf", "summary_status": "leaf"} for i, t in leaves.items()]
    rows += [{"node_id": s, "level": 1, "text": "x", "n_tokens": 1, "doc_ids": ["d"], "summarizer": "x", "summary_status": "ok"} for s in ("s1", "s2")]
    edges = pa.Table.from_pylist([{"parent_id": p, "child_id": c, "probability": 1.0, "level": 1}
                                  for p, c in (("s1", "a"), ("s1", "b"), ("s2", "c"), ("s2", "d"))], schema=EDGES)
    out = labels_of(label_nodes(pa.Table.from_pylist(rows, schema=NODES), edges))
    assert {"jamaica", "jamaican", "reggae"} <= set(out["s1"]["keywords"])
    words = out["s1"]["title"].split(" · ")
    assert "Reggae" in words and len([w for w in words if w.startswith("Jamaic")]) == 1


def test_per_document_labels_depend_on_their_own_document_only() -> None:
    docs = {"d1": {"x1": ["Apples and pears", "apple orchards"], "x2": ["Ships at sea", "a ship of apples"]},
            "d2": {"y1": ["Apples galore and more apples", "pears"], "y2": ["Rivers and ships", "river boats"]}}

    def tables(keep: set[str]) -> tuple[pa.Table, pa.Table]:
        rows, edges = [], []
        for d, clusters in docs.items():
            if d not in keep:
                continue
            for c, texts in clusters.items():
                rows.append({"node_id": c, "level": 1, "text": c, "n_tokens": 1, "doc_ids": [d], "summarizer": "x", "summary_status": "ok"})
                for j, t in enumerate(texts):
                    rows.append({"node_id": f"{c}{j}", "level": 0, "text": t, "n_tokens": 3, "doc_ids": [d], "summarizer": "leaf", "summary_status": "leaf"})
                    edges.append({"parent_id": c, "child_id": f"{c}{j}", "probability": 1.0, "level": 1})
        return pa.Table.from_pylist(rows, schema=NODES), pa.Table.from_pylist(edges, schema=EDGES)

    both = labels_of(label_nodes(*tables({"d1", "d2"}), per_document=True))
    alone = labels_of(label_nodes(*tables({"d1"}), per_document=True))
    assert {c: both[c] for c in ("x1", "x2")} == {c: alone[c] for c in ("x1", "x2")}
    corpus_wide = labels_of(label_nodes(*tables({"d1", "d2"})))
    assert any(corpus_wide[c]["keywords"] != alone[c]["keywords"] for c in ("x1", "x2"))  # corpus scope: the other document counts
