"""Dataset adapters on the shared data: queries table, corpus folder, the prepared folder."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from arborag.errors import ConfigError
from arborag.storage.schemas import QUERIES
from arborag.tasks.evaluation.datasets import load_dataset, prepare_dataset, read_prepared, safe_filename


def test_safe_filename() -> None:
    assert safe_filename("Lilu (mythology)") == "Lilu_(mythology)"
    assert safe_filename("Alû") == "Alu"
    assert safe_filename("I Am a Good Person/I Am a Bad Person") == "I_Am_a_Good_Person_I_Am_a_Bad_Person"
    assert safe_filename("...") == "untitled"
    assert len(safe_filename("x" * 300)) == 80


def test_hotpotqa_prepared(shared_data: Path, tmp_path: Path) -> None:
    p = prepare_dataset("hotpotqa", tmp_path / "hp", data_dir=shared_data)
    q = p.queries()
    assert q.schema == QUERIES
    assert (p.n_queries, p.n_files) == (100, 994)
    files = sorted(x.name for x in p.corpus_dir.iterdir())
    assert len(files) == 994 and len({f.lower() for f in files}) == 994
    types = q.column("type").to_pylist()
    assert types.count("bridge") == 78 and types.count("comparison") == 22
    first = q.slice(0, 1).to_pylist()[0]
    assert first["gold_ids"] == ["Alû", "Lilu (mythology)"] and first["answers"] == ["a spirit"]
    assert all(len(r["gold_ids"]) == 2 and len(r["gold_texts"]) == 2 for r in q.to_pylist())
    # each gold text is its corpus file, title first
    ev = {r["gold_id"]: r for r in p.evidence().to_pylist()}
    for gid, text in zip(first["gold_ids"], first["gold_texts"]):
        assert text.splitlines()[0] == gid
        assert (p.corpus_dir / ev[gid]["file"]).read_text(encoding="utf-8") == text
    assert p.match == "doc"
    again = read_prepared(tmp_path / "hp")
    assert again.fingerprint == p.fingerprint and again.n_queries == 100


def test_prepare_is_idempotent_and_limit_cuts_corpus(shared_data: Path, tmp_path: Path) -> None:
    p = prepare_dataset("hotpotqa", tmp_path / "hp", data_dir=shared_data, limit=3)
    assert p.n_queries == 3 and p.n_files <= 30
    some = next(p.corpus_dir.iterdir())
    mtime = some.stat().st_mtime_ns
    p2 = prepare_dataset("hotpotqa", tmp_path / "hp", data_dir=shared_data, limit=3)
    assert p2.fingerprint == p.fingerprint and some.stat().st_mtime_ns == mtime
    gold = {g for ids in p.queries().column("gold_ids").to_pylist() for g in ids}
    ev_titles = set(p.evidence().column("gold_id").to_pylist())
    assert gold <= ev_titles
    # --full-corpus with a limit keeps every paragraph; stale files are removed when it shrinks again
    full = prepare_dataset("hotpotqa", tmp_path / "hp", data_dir=shared_data, limit=3, scope="full")
    assert full.n_files == 994 and full.fingerprint != p.fingerprint
    prepare_dataset("hotpotqa", tmp_path / "hp", data_dir=shared_data, limit=3)
    assert len(list(p.corpus_dir.iterdir())) == p.n_files


def test_narrativeqa_prepared(shared_data: Path, tmp_path: Path) -> None:
    p = prepare_dataset("narrativeqa", tmp_path / "nq", data_dir=shared_data)
    q = p.queries().to_pylist()
    assert (p.n_queries, p.n_files) == (50, 47)
    assert all(len(r["answers"]) == 2 and len(r["gold_ids"]) == 1 for r in q)
    assert q[0]["answers"] == ["They set up a school.", "They are schoolmistresses."]
    text = (p.corpus_dir / f"{q[0]['gold_ids'][0]}.txt").read_text(encoding="utf-8")
    assert text == q[0]["gold_texts"][0] and text.startswith("The play is set in Napoleonic times.")


def test_financebench_prepared(shared_data: Path, tmp_path: Path) -> None:
    p = prepare_dataset("financebench", tmp_path / "fb", data_dir=shared_data)
    q = p.queries().to_pylist()
    assert (p.n_queries, p.n_files) == (10, 5)
    assert p.match == "doc+text"
    assert q[0]["gold_ids"] == ["AMCOR_2022_8K_dated-2022-07-01#page=1"]
    assert q[0]["gold_texts"][0].startswith("On June 30, 2022, Amcor Finance")
    pdf = p.corpus_dir / "AMCOR_2022_8K_dated-2022-07-01.pdf"
    assert pdf.read_bytes() == (shared_data / "financebench" / "pdfs" / pdf.name).read_bytes()


def test_unknown_dataset_and_missing_data(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown dataset"):
        load_dataset("squad", tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_dataset("hotpotqa", tmp_path)
