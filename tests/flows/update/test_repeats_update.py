"""A text repeated across documents is one leaf through builds and updates.

A real build (MiniLM, tantivy, LanceDB) of three small documents that end with the same
certification paragraph: one leaf holds it, its ``doc_ids`` lists the three documents, the
snapshot's ``repeats`` table names the two other occurrences (kept in ``chunks``), and ``arborag
sql`` finds every place the text occurs with one join. Removing the document that holds the kept
occurrence keeps the text as the next document's leaf; the update's leaves equal a cold build's.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from arborag.config import ArboragConfig
from arborag.flows.build import run_build
from arborag.flows.update import run_update
from arborag.hashing import hash_text
from arborag.storage.sql import run_sql
from tests.helpers.update import ancestors, built_from, published

pytestmark = pytest.mark.slow

CONFIG = ArboragConfig().with_overrides(cluster={"dims": 2})
CERTIFICATION = ("I certify that this report fully complies with the requirements of Section 906 of the Sarbanes-Oxley Act "
                 "and that the information it contains fairly presents the financial condition of the company.")
SOURCES = {
    "Harbour.txt": ("Harbour Works\nThe harbour works rebuilt the eastern pier in 2019 for 4 million. The new pier carries two cranes "
                    "and a covered shed for the fishing fleet. Dredging the channel took most of the winter and closed the slipway for "
                    "six weeks. The council paid for half of the work and the port authority for the rest.\n\n" + CERTIFICATION + "\n"),
    "Mill.txt": ("Mill Report\nThe mill ground 12,000 tonnes of wheat and sold its flour to bakeries along the river. A second pair of "
                 "stones was fitted in the spring and the old wheel was replaced by a turbine. The miller hired four apprentices from "
                 "the village school and opened a shop beside the weir.\n\n" + CERTIFICATION.upper() + "\n"),
    "Ferry.txt": ("Ferry Accounts\nThe ferry carried 80,000 passengers between the two banks of the estuary. Fares rose by ten "
                  "pence in March after the engine was overhauled. A night crossing was added for the shift workers of the "
                  "cannery, and the timetable now runs every twenty minutes in summer. The old landing stage was painted blue.\n\n" + CERTIFICATION.replace(" ", "  ") + "\n"),
}


def _leaves(corpus: Path) -> dict[str, dict]:
    nodes = pq.read_table(published(corpus) / "nodes.parquet").to_pylist()
    return {r["node_id"]: r for r in nodes if r["level"] == 0}


def _certification_leaves(corpus: Path) -> list[dict]:
    return [r for r in _leaves(corpus).values() if "sarbanes" in r["text"].lower()]


def _uris(corpus: Path) -> dict[str, str]:
    docs = pq.read_table(published(corpus) / "documents.parquet").to_pylist()
    return {r["doc_id"]: Path(r["uri"]).name for r in docs}


def _places(corpus: Path, node_id: str) -> list[str]:
    """The files the leaf's text occurs in, by SQL over the snapshot alone."""
    _, rows = run_sql(corpus, "SELECT d.uri FROM chunks c JOIN documents d USING (doc_id) "
                              f"WHERE c.chunk_id = '{node_id}' OR c.chunk_id IN (SELECT chunk_id FROM repeats WHERE node_id = '{node_id}') "
                              "ORDER BY d.uri")
    return [Path(r[0]).name for r in rows]


def _repeats(corpus: Path) -> list[tuple[str, str]]:
    return sorted((r["chunk_id"], r["node_id"]) for r in pq.read_table(published(corpus) / "repeats.parquet").to_pylist())


def test_a_repeated_paragraph_is_one_leaf_and_stays_one_after_its_first_document_goes(tmp_path: Path) -> None:
    src, corpus = built_from(tmp_path, SOURCES, CONFIG)

    (leaf,) = _certification_leaves(corpus)
    uris = _uris(corpus)
    assert sorted(uris[d] for d in leaf["doc_ids"]) == sorted(SOURCES)
    assert _places(corpus, leaf["node_id"]) == sorted(SOURCES)
    chunks = pq.read_table(published(corpus) / "chunks.parquet").to_pylist()
    others = sorted(c["chunk_id"] for c in chunks if "sarbanes" in c["text"].lower() and c["chunk_id"] != leaf["node_id"])
    assert len(others) == 2 and _repeats(corpus) == [(o, leaf["node_id"]) for o in others]
    kept_doc = next(c["doc_id"] for c in chunks if c["chunk_id"] == leaf["node_id"])
    assert kept_doc == min(leaf["doc_ids"])  # the first occurrence in (doc_id, ordinal) order
    texts = [r["text"] for r in _leaves(corpus).values()]
    assert len(texts) == len(set(texts)) == 4  # three own paragraphs and one certification
    shares = {r["node_id"]: r["share"] for r in pq.read_table(published(corpus) / "boilerplate.parquet").to_pylist()}
    assert shares.keys() == _leaves(corpus).keys()  # one row per leaf
    assert shares[leaf["node_id"]] == 1.0  # counted over every occurrence: the one leaf is still boilerplate of three documents

    # a dry run that deletes a document whose certification is a repeat counts its own paragraph only
    other = next(n for d, n in sorted(uris.items()) if d != kept_doc and d in leaf["doc_ids"])
    moved = (src / other).rename(tmp_path / other)
    dry = run_update([src], corpus, CONFIG, prune=True, dry_run=True)
    assert dry["plan"]["estimate"]["gone_leaves"] == 1, dry["plan"]["estimate"]
    moved.rename(src / other)

    (src / uris[kept_doc]).unlink()  # the document holding the kept occurrence
    out = run_update([src], corpus, CONFIG, prune=True)
    assert out["status"] == "ok" and not out["noop"], out
    (after,) = _certification_leaves(corpus)
    rest = sorted(n for n in SOURCES if n != uris[kept_doc])
    assert after["node_id"] in others  # the next occurrence stands for the text now
    assert sorted(_uris(corpus)[d] for d in after["doc_ids"]) == rest
    assert _repeats(corpus) == [(o, after["node_id"]) for o in others if o != after["node_id"]]
    assert _places(corpus, after["node_id"]) == rest

    fresh = tmp_path / "fresh"
    assert run_build([src], fresh, CONFIG, use_prefect=False, progress=False)["status"] == "ok"
    key = lambda c: {i: (r["text"], r["doc_ids"]) for i, r in _leaves(c).items()}  # noqa: E731
    assert key(corpus) == key(fresh)  # the update's leaves are a cold build's
    assert _repeats(corpus) == _repeats(fresh)


def test_a_document_that_only_repeats_another_changes_the_provenance(tmp_path: Path) -> None:
    src, corpus = built_from(tmp_path, SOURCES, CONFIG)
    (leaf,) = _certification_leaves(corpus)
    assert len(leaf["doc_ids"]) == 3

    # a notice that repeats the certification and sorts after both documents (a document's id is the
    # hash of its text): the leaves stay exactly the same, only where the text occurs changes
    words = CERTIFICATION.split(" ")
    notice = next(v for v in (" ".join(w.upper() if j == i else w for j, w in enumerate(words)) for i in range(len(words)))
                  if hash_text(v) > max(leaf["doc_ids"]))
    (src / "Notice.txt").write_text(notice, encoding="utf-8")
    out = run_update([src], corpus, CONFIG, prune=True)
    assert not out["noop"], out  # the same leaves, but the text now occurs in a third document
    assert hash_text(notice) in _uris(corpus)  # the notice's id is the hash of its text, as chosen
    (after,) = _certification_leaves(corpus)
    assert after["node_id"] == leaf["node_id"]
    assert sorted(_uris(corpus)[d] for d in after["doc_ids"]) == sorted([*SOURCES, "Notice.txt"])
    assert len(_repeats(corpus)) == 3 and {n for _, n in _repeats(corpus)} == {after["node_id"]}
    nodes = {r["node_id"]: r for r in pq.read_table(published(corpus) / "nodes.parquet").to_pylist()}
    above = ancestors(pq.read_table(published(corpus) / "edges.parquet").to_pylist(), after["node_id"])
    assert above and all(hash_text(notice) in nodes[p]["doc_ids"] for p in above)  # the summaries above it follow


def test_per_document_trees_collapse_repeats_only_inside_a_document(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    # one long sentence between the two certifications keeps each of them a chunk of its own
    between = ("The annexe to this report lists every contract the harbour works signed with the dredging company, the crane "
               "makers, the electricians who wired the shed, the painters of the railings and the surveyors who measured the "
               "channel before and after the winter storms that delayed the work, together with the dates on which each of "
               "them was paid in full by the council or by the port authority.")
    (src / "Harbour.txt").write_text(SOURCES["Harbour.txt"] + "\n" + between + "\n\n" + CERTIFICATION + "\n", encoding="utf-8")
    (src / "Mill.txt").write_text(SOURCES["Mill.txt"], encoding="utf-8")
    corpus = tmp_path / "c"
    config = CONFIG.with_overrides(tree={"scope": "document"})
    built = run_build([src], corpus, config, use_prefect=False, progress=False)
    assert built["status"] == "ok"
    uris = _uris(corpus)
    certs = _certification_leaves(corpus)
    assert sorted(uris[d] for r in certs for d in r["doc_ids"]) == ["Harbour.txt", "Mill.txt"]  # one leaf in each document's tree
    ((rep, stands_for),) = _repeats(corpus)  # Harbour's second certification
    assert stands_for in {r["node_id"] for r in certs} and _places(corpus, stands_for) == ["Harbour.txt", "Harbour.txt"]

    assert run_update([src], corpus, config, prune=True)["noop"]  # nothing changed: the repeats read back as they were
    (src / "Notice.txt").write_text(CERTIFICATION + "\n", encoding="utf-8")
    out = run_update([src], corpus, config, prune=True)
    assert out["mode"] == "incremental", out.get("reason")
    nodes = pq.read_table(published(corpus) / "nodes.parquet").to_pylist()
    kept_runs = {r["created_by_run"] for r in nodes if _uris(corpus)[r["doc_ids"][0]] != "Notice.txt"}
    assert kept_runs == {built["run_id"]}  # Harbour's and Mill's trees kept as built: their repeats compare equal
    assert sorted(_uris(corpus)[d] for r in _certification_leaves(corpus) for d in r["doc_ids"]) == ["Harbour.txt", "Mill.txt", "Notice.txt"]
    assert _repeats(corpus) == [(rep, stands_for)]
