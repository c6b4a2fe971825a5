"""arborag.storage.tables: the one atomic writer family (atomic_path, bytes, JSON, Parquet)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arborag.storage.tables import atomic_path, atomic_write_bytes, atomic_write_json, atomic_write_parquet


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_writers_replace_the_target_and_leave_no_temporary(tmp_path: Path) -> None:
    atomic_write_bytes(tmp_path / "sub" / "a.bin", b"one")
    atomic_write_bytes(tmp_path / "sub" / "a.bin", b"two")
    assert (tmp_path / "sub" / "a.bin").read_bytes() == b"two"
    atomic_write_json(tmp_path / "m.json", {"b": 1, "a": [1, 2]})
    assert (tmp_path / "m.json").read_text() == json.dumps({"a": [1, 2], "b": 1}, indent=2, sort_keys=True)
    out = atomic_write_parquet(pa.table({"x": [1, 2]}), tmp_path / "t.parquet")
    assert out == tmp_path / "t.parquet" and pq.read_table(out).column("x").to_pylist() == [1, 2]
    assert _names(tmp_path) == ["m.json", "sub", "t.parquet"] and _names(tmp_path / "sub") == ["a.bin"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    atomic_write_bytes(target, b"old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("crash while writing")
    assert target.read_bytes() == b"old" and _names(tmp_path) == ["page.html"]
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp != target
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new"


def test_unknown_table_name_is_a_schema_error(tmp_path: Path) -> None:
    from arborag.errors import SchemaError
    from arborag.storage.corpus import Corpus

    with pytest.raises(SchemaError, match="known: .*documents"):
        Corpus(tmp_path).table_path("nope")
