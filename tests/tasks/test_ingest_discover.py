"""tasks/ingest/discover.py: sources (folders, globs, file:// URIs) to files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arborag.config import IngestConfig
from arborag.errors import IngestError
from arborag.tasks.stages.documents import discover_sources

CFG = IngestConfig()


def test_discover_walks_recursively_with_filters(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / ".hidden").mkdir()
    for rel in ("one.txt", "a/two.md", "a/b/three.PDF", "a/b/skip.log", "a/draft-x.txt", ".hidden/no.txt", ".dot.txt"):
        (tmp_path / rel).write_text("x")
    os.symlink(tmp_path / "a", tmp_path / "a" / "b" / "cycle")  # a directory cycle must end
    cfg = IngestConfig(exclude=["draft*"])
    names = [Path(s.uri).relative_to(tmp_path).as_posix() for s in discover_sources([tmp_path], cfg)]
    assert names == ["one.txt", "a/two.md", "a/b/three.PDF"]
    only_md = discover_sources([tmp_path], IngestConfig(include=["*.md"]))
    assert [Path(s.uri).name for s in only_md] == ["two.md"]
    globbed = discover_sources([str(tmp_path / "**" / "*.txt")], CFG)
    assert {Path(s.uri).name for s in globbed} >= {"one.txt", "draft-x.txt"}


def test_discover_rejects_missing_sources(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="no such file"):
        discover_sources([tmp_path / "nope"], CFG)
    with pytest.raises(IngestError, match="matched no files"):
        discover_sources([str(tmp_path / "*.zzz")], CFG)
    with pytest.raises(IngestError, match="file:// URIs"):
        discover_sources(["https://example.com/x.pdf"], CFG)
    (tmp_path / "f.txt").write_text("hi")
    assert discover_sources([f"file://{tmp_path / 'f.txt'}"], CFG)[0].uri == str(tmp_path / "f.txt")


def test_the_walks_compiled_matcher_is_the_pattern_list() -> None:
    """A walk matches every file against include/exclude as one compiled regex: the same answer
    as fnmatch pattern by pattern, on the name or the relative path, case-insensitively."""
    import random

    from arborag.tasks.ingest.discover import _matcher, _matches

    rng = random.Random(11)
    patterns = ["*.txt", "*.MD", "a/*", "**/b/*.pdf", "draft?.*", "[abc]*.log", "*[!x].csv", "notes", "sub/**"]
    names = ["one.txt", "two.md", "Draft1.TXT", "b.log", "d.log", "x.csv", "y.csv", "notes", "a.PDF", "c"]
    dirs = ["", "a", "a/b", "sub", "sub/deep", "B"]
    for _ in range(400):
        pats = rng.sample(patterns, rng.randint(0, 4))
        match = _matcher(pats)
        name = rng.choice(names)
        rel = f"{d}/{name}" if (d := rng.choice(dirs)) else name
        assert match(name, rel) == _matches(name, rel, pats), (pats, rel)
    assert not _matcher([])("a.txt", "a.txt")
    assert [Path(s.uri).name for s in discover_sources([Path(__file__).parent], IngestConfig(include=["TEST_INGEST_DISC*"]))] == [Path(__file__).name]
