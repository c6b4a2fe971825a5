"""The delete guard in the update flow itself (``run_update``: the scheduler and the Python API
take it, not only the CLI): on an ingested corpus (no tree needed: the guard stops the run at its
plan), an update given one new file where the folder was meant raises
:class:`~arborag.tasks.stages.plan.DeletesRefused` and changes no file of the corpus; with the
limit lifted, the same plan goes on past the guard. Once without Prefect, once as a Prefect flow run."""

from __future__ import annotations

from pathlib import Path

import pytest

from arborag.config import ArboragConfig
from arborag.flows.ingest import run_ingest_and_segment
from arborag.flows.update import run_update
from arborag.tasks.stages.plan import DeletesRefused


def _corpus(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "src"
    src.mkdir()
    for name, text in (("a", "Apples grow in the northern orchard."), ("b", "Bees keep the clover fields alive."),
                       ("c", "Copper kettles hang in the palace kitchen.")):
        (src / f"{name}.txt").write_text(text + "\n", encoding="utf-8")
    corpus = tmp_path / "c"
    run_ingest_and_segment([src], corpus, ArboragConfig(), segment=False)
    new = tmp_path / "inbox" / "notes.txt"
    new.parent.mkdir()
    new.write_text("Analyst notes: the tinker index rose again.\n", encoding="utf-8")
    return corpus, new


def _files(corpus: Path) -> dict[str, bytes]:
    """Every file of the corpus but Prefect's own result records (``prefect/``: every flow run's)."""
    return {str(p.relative_to(corpus)): p.read_bytes() for p in sorted(corpus.rglob("*"))
            if p.is_file() and p.name != "writer.lock" and p.relative_to(corpus).parts[0] != "prefect"}


def test_the_flow_refuses_a_run_that_would_delete_most_documents(tmp_path: Path) -> None:
    corpus, new = _corpus(tmp_path)
    before = _files(corpus)
    with pytest.raises(DeletesRefused) as caught:
        run_update([new], corpus, ArboragConfig())
    assert caught.value.plan["deleted_documents"] == 3 and caught.value.plan["added"] == 1
    assert _files(corpus) == before
    # the same plan with the limit lifted passes the guard (the run then needs a tree: its plan is written)
    out = run_update([new], corpus, ArboragConfig(), max_delete="all", dry_run=True)
    assert out["plan"]["deleted_documents"] == 3 and "refused" not in out["plan"]


@pytest.mark.slow
def test_the_prefect_flow_run_refuses_it_too(prefect_harness: None, tmp_path: Path) -> None:
    corpus, new = _corpus(tmp_path)
    before = _files(corpus)
    with pytest.raises(DeletesRefused):
        run_update([new], corpus, ArboragConfig(), use_prefect=True)
    assert _files(corpus) == before
