"""The delete guard of ``arborag update`` and the failure rows of its plan, as pure functions
(no corpus, no model): how a limit is read, what counts as a deleted document (a moved file or a
changed one does not), when an update is refused, and which read failures are new."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from arborag.errors import ArboragError
from arborag.storage.schemas import DOCUMENTS
from arborag.tasks.changes.documents_diff import diff_documents
from arborag.tasks.ingest.records import IngestFailure, IngestReport
from arborag.tasks.stages.plan import (
    DeleteLimit,
    DeletesRefused,
    check_deletes,
    deleted_documents,
    failure_rows,
    held_documents,
)


def documents(rows: list[dict]) -> pa.Table:
    """A DOCUMENTS table of ``rows`` (uri, doc_id, status, error); the other columns empty."""
    full = [{f.name: r.get(f.name) for f in DOCUMENTS} for r in rows]
    return pa.Table.from_pylist(full, schema=DOCUMENTS)


def incoming(rows: list[tuple[str, str | None, str]]) -> pa.Table:
    return pa.table({"uri": [r[0] for r in rows], "doc_id": [r[1] for r in rows], "status": [r[2] for r in rows]})


HELD = documents([
    {"uri": "/s/a.txt", "doc_id": "A", "status": "ok"},
    {"uri": "/s/b.txt", "doc_id": "B", "status": "ok"},
    {"uri": "/s/c.txt", "doc_id": "C", "status": "ok"},
    {"uri": "/s/bad.pdf", "doc_id": "E", "status": "error", "error": "not a PDF"},
])


@pytest.mark.parametrize(("text", "expected"), [
    (None, DeleteLimit(percent=50.0)),
    ("50%", DeleteLimit(percent=50.0)),
    ("100%", DeleteLimit(percent=100.0)),
    ("3", DeleteLimit(count=3)),
    (0, DeleteLimit(count=0)),
    ("all", DeleteLimit()),
])
def test_a_limit_is_a_count_a_share_or_none(text: str | int | None, expected: DeleteLimit) -> None:
    assert DeleteLimit.parse(text) == expected


@pytest.mark.parametrize("text", ["-1", "half", "150%", "2.5"])
def test_a_bad_limit_says_what_to_give(text: str) -> None:
    with pytest.raises(ArboragError, match="give a number of documents"):
        DeleteLimit.parse(text)


def test_allowed_deletes_of_a_limit() -> None:
    assert DeleteLimit(percent=50.0).allowed(3) == 1
    assert DeleteLimit(percent=50.0).allowed(4) == 2
    assert DeleteLimit(count=7).allowed(3) == 7
    assert DeleteLimit().allowed(3) is None


def test_held_documents_count_ok_rows_only() -> None:
    assert held_documents(HELD) == 3
    assert held_documents(documents([])) == 0


def test_one_file_given_where_the_folder_was_meant_is_refused_with_its_plan() -> None:
    diff = diff_documents(HELD, incoming([("/s/new.txt", "N", "ok")]))
    plan = {**diff.counts, "pruned": True, "deleted_documents": deleted_documents(diff)}
    assert plan["deleted_documents"] == 3
    with pytest.raises(DeletesRefused) as caught:
        check_deletes(plan, held_documents(HELD), DeleteLimit.parse(None))
    msg = str(caught.value)
    assert "delete 3 of the 3 documents" in msg and "arborag add" in msg and "--max-delete" in msg and "--allow-delete" in msg
    assert caught.value.plan is plan
    again = pickle.loads(pickle.dumps(caught.value))
    assert str(again) == msg and again.plan == plan


def test_within_the_limit_without_pruning_or_with_no_limit_the_update_goes_on() -> None:
    diff = diff_documents(HELD, incoming([("/s/a.txt", "A", "ok"), ("/s/b.txt", "B", "ok")]))
    one_gone = {**diff.counts, "pruned": True, "deleted_documents": deleted_documents(diff)}
    assert one_gone["deleted_documents"] == 1
    check_deletes(one_gone, 3, DeleteLimit.parse(None))  # 1 of 3: within half
    with pytest.raises(DeletesRefused):
        check_deletes(one_gone, 3, DeleteLimit(count=0))
    all_gone = {**one_gone, "deleted_documents": 3}
    check_deletes({**all_gone, "pruned": False}, 3, DeleteLimit.parse(None))  # --no-prune deletes nothing
    check_deletes(all_gone, 3, DeleteLimit.parse("all"))
    check_deletes(all_gone, 3, DeleteLimit.parse("100%"))


def test_a_moved_folder_and_a_changed_file_delete_no_document() -> None:
    moved = diff_documents(HELD, incoming([("/t/a.txt", "A", "ok"), ("/t/b.txt", "B", "ok"), ("/t/c.txt", "C", "ok")]))
    assert moved.counts["deleted"] == 4  # every uri (and the stale error row) goes ...
    assert deleted_documents(moved) == 0  # ... but every content stays
    changed = diff_documents(HELD, incoming([("/s/a.txt", "A2", "ok"), ("/s/b.txt", "B", "ok"), ("/s/c.txt", "C", "ok")]))
    assert changed.counts["changed"] == 1 and deleted_documents(changed) == 0


def test_a_failure_recorded_the_same_way_before_is_not_new() -> None:
    report = IngestReport(failed=[
        IngestFailure("/s/bad.pdf", "not a PDF"),  # still broken as recorded
        IngestFailure("/s/a.txt", "permission denied"),  # read before
        IngestFailure("/s/other.pdf", "not a PDF"),  # a new file
    ])
    rows = failure_rows(HELD, report)
    assert [(r["uri"], r["reason"], r["new"]) for r in rows] == [
        ("/s/bad.pdf", "not a PDF", False),
        ("/s/a.txt", "permission denied", True),
        ("/s/other.pdf", "not a PDF", True),
    ]
    again = failure_rows(HELD, IngestReport(failed=[IngestFailure("/s/bad.pdf", "encrypted")]))
    assert again[0]["new"] is True  # another reason: the file changed
