"""diff_documents: the update plan by uri and content hash, on hand-built tables."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from arborag.errors import SchemaError
from arborag.storage.schemas import DOCUMENTS
from arborag.tasks.changes.documents_diff import KINDS, DocumentsDiff, diff_documents


def docs(*rows: tuple) -> pa.Table:
    """A DOCUMENTS table from ``(doc_id, uri, status[, duplicate_uris or raw metadata])`` rows."""
    out = []
    for row in rows:
        doc_id, uri, status = row[:3]
        extra = row[3] if len(row) > 3 else None
        if isinstance(extra, list):
            meta = json.dumps({"reader": "r", "duplicate_uris": extra})
        elif isinstance(extra, str):
            meta = extra
        else:
            meta = json.dumps({"reader": "r"})
        out.append({"doc_id": doc_id, "uri": uri, "title": None, "mime": "text/plain", "n_chars": 1, "text": "t",
                    "metadata": meta, "ingested_at": None, "status": status, "error": None})
    return pa.Table.from_pylist(out, schema=DOCUMENTS)


def incoming(*rows: tuple) -> pa.Table:
    """``(uri, doc_id[, status])`` rows; with a status column when any row names one."""
    with_status = any(len(r) > 2 for r in rows)
    cols = {"uri": [r[0] for r in rows], "doc_id": [r[1] for r in rows]}
    if with_status:
        cols["status"] = [r[2] if len(r) > 2 else "ok" for r in rows]
    return pa.table({k: pa.array(v, pa.string()) for k, v in cols.items()})


def rows(table: pa.Table) -> list[tuple]:
    return [tuple(r.values()) for r in table.to_pylist()]


def ids(array: pa.Array) -> list[str]:
    return array.to_pylist()


def test_empty_tables_give_an_empty_plan():
    d = diff_documents(DOCUMENTS.empty_table(), pa.table({"uri": pa.array([], pa.string()), "doc_id": pa.array([], pa.string())}))
    assert d.counts == {k: 0 for k in KINDS} | {"new_docs": 0, "gone_docs": 0}
    assert d.is_noop
    assert d.added.column_names == ["uri", "doc_id"]
    assert d.changed.column_names == ["uri", "doc_id", "old_doc_id"]
    assert d.added.schema.field("uri").type == pa.string() and d.new_doc_ids.type == pa.string()


def test_untyped_empty_incoming_is_accepted():
    d = diff_documents(docs(("X", "a", "ok")), pa.table({"uri": pa.array([]), "doc_id": pa.array([])}))
    assert rows(d.deleted) == [("a", "X")]
    assert ids(d.gone_doc_ids) == ["X"]


def test_everything_is_added_into_an_empty_corpus():
    d = diff_documents(DOCUMENTS.empty_table(), incoming(("b", "Y"), ("a", "X")))
    assert rows(d.added) == [("a", "X"), ("b", "Y")]  # sorted by uri
    assert ids(d.new_doc_ids) == ["X", "Y"]
    assert d.deleted.num_rows == d.changed.num_rows == d.unchanged.num_rows == 0
    assert not d.is_noop


def test_everything_is_deleted_when_no_source_is_left():
    d = diff_documents(docs(("X", "a", "ok"), ("Y", "b", "ok")), incoming())
    assert rows(d.deleted) == [("a", "X"), ("b", "Y")]
    assert ids(d.gone_doc_ids) == ["X", "Y"]
    assert ids(d.new_doc_ids) == []


def test_added_changed_deleted_unchanged():
    existing = docs(("X", "a", "ok"), ("Y", "b", "ok"), ("Z", "c", "ok"))
    d = diff_documents(existing, incoming(("a", "X"), ("b", "Y2"), ("d", "W")))
    assert rows(d.unchanged) == [("a", "X")]
    assert rows(d.changed) == [("b", "Y2", "Y")]
    assert rows(d.deleted) == [("c", "Z")]
    assert rows(d.added) == [("d", "W")]
    assert ids(d.new_doc_ids) == ["W", "Y2"]
    assert ids(d.gone_doc_ids) == ["Y", "Z"]
    assert d.counts == {"added": 1, "changed": 1, "deleted": 1, "unchanged": 1, "failed": 0, "new_docs": 2, "gone_docs": 2}


def test_same_sources_are_a_noop():
    existing = docs(("X", "a", "ok"), ("Y", "b", "ok"))
    d = diff_documents(existing, incoming(("b", "Y"), ("a", "X")))
    assert d.is_noop
    assert rows(d.unchanged) == [("a", "X"), ("b", "Y")]
    assert ids(d.new_doc_ids) == [] and ids(d.gone_doc_ids) == []


def test_a_failing_read_keeps_the_earlier_document():
    existing = docs(("X", "a", "ok"), ("Y", "b", "ok"))
    d = diff_documents(existing, incoming(("a", None, "error"), ("b", "Y", "ok"), ("n", "E", "error")))
    assert rows(d.failed) == [("a", "X"), ("n", None)]  # kept document; a new uri that fails holds none
    assert d.deleted.num_rows == 0
    assert ids(d.gone_doc_ids) == []  # X stays in the tree
    assert ids(d.new_doc_ids) == []  # an error row's doc_id is never content
    assert d.is_noop


def test_error_rows_of_the_table():
    existing = docs(("E1", "gone", "error"), ("E2", "fixed", "error"), ("E3", "still", "error"), ("X", "both", "ok"), ("E4", "both", "error"))
    d = diff_documents(existing, incoming(("fixed", "F"), ("still", None, "error"), ("both", "X")))
    assert rows(d.deleted) == [("gone", None)]  # the stale error row of a removed file
    assert rows(d.added) == [("fixed", "F")]  # a uri that failed before and reads now
    assert rows(d.failed) == [("still", None)]
    assert rows(d.unchanged) == [("both", "X")]  # an ok document beside an error row: the document counts
    assert ids(d.gone_doc_ids) == []


def test_status_other_than_ok_is_a_failure_and_null_status_too():
    d = diff_documents(docs(("X", "a", "ok")), incoming(("a", "X2", "skipped"), ("b", "Y", None)))
    assert rows(d.failed) == [("a", "X"), ("b", None)]
    assert d.changed.num_rows == d.added.num_rows == 0


def test_rows_of_unknown_status_in_the_table_are_ignored():
    existing = docs(("X", "a", "ok"), ("Q", "q", "quarantined"))
    d = diff_documents(existing, incoming(("a", "X")))
    assert d.is_noop and d.deleted.num_rows == 0
    assert ids(d.gone_doc_ids) == []


def test_duplicate_content_at_two_uris_stays_while_one_uri_holds_it():
    existing = docs(("X", "a", "ok", ["b"]), ("Y", "c", "ok"))
    d = diff_documents(existing, incoming(("b", "X"), ("c", "Y")))
    assert rows(d.deleted) == [("a", "X")]
    assert rows(d.unchanged) == [("b", "X"), ("c", "Y")]  # b is known through duplicate_uris
    assert ids(d.gone_doc_ids) == []


def test_duplicate_content_goes_when_every_uri_lets_go():
    existing = docs(("X", "a", "ok", ["b"]))
    d = diff_documents(existing, incoming(("a", "X2")))
    assert rows(d.changed) == [("a", "X2", "X")]
    assert rows(d.deleted) == [("b", "X")]
    assert ids(d.gone_doc_ids) == ["X"]
    assert ids(d.new_doc_ids) == ["X2"]


def test_changing_one_copy_keeps_the_other():
    d = diff_documents(docs(("X", "a", "ok", ["b"])), incoming(("a", "Y"), ("b", "X")))
    assert rows(d.changed) == [("a", "Y", "X")]
    assert ids(d.gone_doc_ids) == []
    assert ids(d.new_doc_ids) == ["Y"]


def test_new_copies_and_moved_content_are_not_new():
    existing = docs(("X", "a", "ok"), ("Y", "b", "ok"))
    # the same new text at two uris; X moved from a to c; a second copy of Y at d
    d = diff_documents(existing, incoming(("b", "Y"), ("c", "X"), ("d", "Y"), ("e", "Z"), ("f", "Z")))
    assert rows(d.added) == [("c", "X"), ("d", "Y"), ("e", "Z"), ("f", "Z")]
    assert rows(d.deleted) == [("a", "X")]
    assert ids(d.new_doc_ids) == ["Z"]  # once, although two uris hold it
    assert ids(d.gone_doc_ids) == []  # X is held at c now


def test_an_incoming_uri_listed_twice_keeps_its_later_row():
    d = diff_documents(docs(("X", "a", "ok")), incoming(("a", "Y", "ok"), ("a", "X", "ok")))
    assert rows(d.unchanged) == [("a", "X")] and d.changed.num_rows == 0


def test_a_uri_claimed_twice_in_the_table_belongs_to_the_later_row():
    existing = docs(("X", "a", "ok", ["b"]), ("Y", "b", "ok"))
    d = diff_documents(existing, incoming(("a", "X"), ("b", "Y")))
    assert rows(d.unchanged) == [("a", "X"), ("b", "Y")]


def test_a_document_left_without_a_uri_by_a_later_claim_is_gone():
    existing = docs(("X", "a", "ok"), ("Y", "b", "ok", ["a"]))  # the later row takes uri a
    d = diff_documents(existing, incoming(("a", "Y"), ("b", "Y")))
    assert rows(d.unchanged) == [("a", "Y"), ("b", "Y")]
    assert ids(d.gone_doc_ids) == ["X"]  # no uri holds X any more


def test_metadata_that_is_not_arborag_s():
    existing = docs(
        ("X", "a", "ok", json.dumps({"duplicate_uris": ["b", 7, None]})),
        ("Y", "c", "ok", json.dumps({"duplicate_uris": "d"})),
        ("Z", "e", "ok", "{not json duplicate_uris"),
    )
    d = diff_documents(existing, incoming(("a", "X"), ("c", "Y"), ("e", "Z")))
    # entries are read as strings, as the ingest merge reads them (tasks/ingest/existing.py); null is skipped
    assert rows(d.deleted) == [("7", "X"), ("b", "X")]
    assert rows(d.unchanged) == [("a", "X"), ("c", "Y"), ("e", "Z")]


def test_metadata_with_nested_lists_counts_only_its_strings():
    existing = docs(("X", "a", "ok", json.dumps({"duplicate_uris": [["x"], {"u": 1}, "b"]})), ("Y", "c", "ok", ["d"]))
    d = diff_documents(existing, incoming(("a", "X"), ("c", "Y")))
    assert rows(d.deleted) == [("b", "X"), ("d", "Y")]


def test_a_minimal_table_without_metadata_and_large_strings():
    existing = pa.table({"doc_id": pa.array(["X"], pa.large_string()), "uri": pa.array(["a"], pa.large_string()), "status": ["ok"]})
    new = pa.table({"uri": pa.array(["a", "b"], pa.large_string()), "doc_id": pa.array(["X", "Y"], pa.large_string())})
    d = diff_documents(existing, new)
    assert rows(d.unchanged) == [("a", "X")] and rows(d.added) == [("b", "Y")]
    assert d.added.schema.field("doc_id").type == pa.string()


def test_missing_columns_and_ids_are_schema_errors():
    with pytest.raises(SchemaError, match="doc_id"):
        diff_documents(DOCUMENTS.empty_table(), pa.table({"uri": ["a"]}))
    with pytest.raises(SchemaError, match="status"):
        diff_documents(pa.table({"doc_id": ["X"], "uri": ["a"]}), incoming(("a", "X")))
    with pytest.raises(SchemaError, match="no doc_id"):
        diff_documents(DOCUMENTS.empty_table(), incoming(("a", None, "ok")))
    with pytest.raises(SchemaError, match="no uri"):
        diff_documents(DOCUMENTS.empty_table(), incoming((None, "X")))


def test_the_plan_is_a_frozen_dataclass():
    d = diff_documents(DOCUMENTS.empty_table(), incoming(("a", "X")))
    assert isinstance(d, DocumentsDiff)
    with pytest.raises(AttributeError):
        d.added = d.deleted  # type: ignore[misc]


def _reference(existing: pa.Table, new: pa.Table) -> dict[str, list]:
    """The diff by dicts and sets, row by row (the semantics of the module docstring)."""
    by_uri: dict[str, str | None] = {}
    known: set[str] = set()
    errors: set[str] = set()
    for r in existing.to_pylist():
        if r["status"] == "ok":
            known.add(r["doc_id"])
            meta = json.loads(r["metadata"])
            for uri in [r["uri"], *meta.get("duplicate_uris", [])]:
                by_uri[uri] = r["doc_id"]
        elif r["status"] == "error":
            errors.add(r["uri"])
    now = {r["uri"]: (r["doc_id"], r["status"] == "ok") for r in new.to_pylist()}
    out: dict[str, list] = {k: [] for k in KINDS}
    for uri, (doc_id, ok) in now.items():
        old = by_uri.get(uri)
        if not ok:
            out["failed"].append((uri, old))
        elif old is None:
            out["added"].append((uri, doc_id))
        elif old == doc_id:
            out["unchanged"].append((uri, doc_id))
        else:
            out["changed"].append((uri, doc_id, old))
    out["deleted"] = [(u, by_uri.get(u)) for u in (by_uri.keys() | errors) - now.keys()]
    held = {r[1] for k in ("added", "changed", "unchanged", "failed") for r in out[k]}
    out = {k: sorted(v) for k, v in out.items()}
    out["new_doc_ids"] = sorted({r[1] for k in ("added", "changed") for r in out[k]} - known)
    out["gone_doc_ids"] = sorted(known - held)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_random_tables_match_a_row_by_row_reference(seed):
    import random

    rnd = random.Random(seed)
    uris = [f"u{i}" for i in range(12)]
    texts = ["A", "B", "C", "D", "E"]
    existing_rows = []
    for uri in rnd.sample(uris, rnd.randint(0, 9)):
        if rnd.random() < 0.2:
            existing_rows.append((f"err-{uri}", uri, "error"))
        else:
            existing_rows.append((rnd.choice(texts), uri, "ok", rnd.sample(uris, rnd.choice([0, 0, 1, 2]))))
    new_rows = [(uri, rnd.choice(texts), rnd.choice(["ok"] * 5 + ["error"])) for uri in rnd.sample(uris, rnd.randint(0, 10))]
    existing, new = docs(*existing_rows), incoming(*new_rows) if new_rows else incoming()
    d = diff_documents(existing, new)
    got = {k: rows(getattr(d, k)) for k in KINDS} | {"new_doc_ids": ids(d.new_doc_ids), "gone_doc_ids": ids(d.gone_doc_ids)}
    want = _reference(existing, new)
    assert got == want
