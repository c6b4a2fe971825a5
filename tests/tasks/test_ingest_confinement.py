"""One root-confinement rule for every way a source is named (folder, glob, file list, update
sources, object-store prefixes): a file or folder symlink — relative or absolute — that leads out
of the root the user named is skipped and reported, unless ``--follow-external-symlinks``.

The root of a source is the deepest folder the user typed: a folder itself, the folder before a
glob's first wildcard, the folder of a named file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arborag.config import IngestConfig
from arborag.errors import IngestError
from arborag.tasks.ingest.discover import discover_sources
from arborag.tasks.ingest.records import IngestFailure

CFG = IngestConfig()
FOLLOW = IngestConfig(follow_external_symlinks=True)
INSIDE = {"in.txt", "inner_link.txt", "sub/deep.txt"}
#: the links that lead out of docs/: absolute and relative, to a file and to a folder
LINKS = {"abs_file.txt", "rel_file.txt", "abs_dir", "rel_dir"}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    outside, docs = tmp_path / "outside", tmp_path / "docs"
    (outside / "dir").mkdir(parents=True)
    (docs / "sub").mkdir(parents=True)
    (outside / "secret.txt").write_text("secret beyond the root\n")
    (outside / "dir" / "s.txt").write_text("another secret\n")
    (docs / "in.txt").write_text("inside\n")
    (docs / "sub" / "deep.txt").write_text("deep inside\n")
    os.symlink(outside / "secret.txt", docs / "abs_file.txt")
    os.symlink("../outside/secret.txt", docs / "rel_file.txt")
    os.symlink(outside / "dir", docs / "abs_dir")
    os.symlink("../outside/dir", docs / "rel_dir")
    os.symlink("in.txt", docs / "inner_link.txt")  # stays inside: read
    return docs


def _names(found, docs: Path) -> set[str]:
    return {Path(s.uri).relative_to(docs).as_posix() for s in found}


def _skipped(skipped: list[IngestFailure], docs: Path) -> set[str]:
    assert all("outside" in s.reason and "--follow-external-symlinks" in s.reason for s in skipped), skipped
    return {Path(s.uri).relative_to(docs).parts[0] for s in skipped}


def test_folder(tree: Path) -> None:
    skipped: list[IngestFailure] = []
    assert _names(discover_sources([tree], CFG, skipped=skipped), tree) == INSIDE
    assert _skipped(skipped, tree) == LINKS


@pytest.mark.parametrize("pattern", ["**/*.txt", "**/*", "*/*.txt"])
def test_glob(tree: Path, pattern: str) -> None:
    skipped: list[IngestFailure] = []
    found = _names(discover_sources([str(tree / pattern)], CFG, skipped=skipped), tree)
    assert not any(n.split("/")[0] in LINKS for n in found), found
    want_links = {"abs_dir", "rel_dir"} if pattern == "*/*.txt" else LINKS
    assert _skipped(skipped, tree) == want_links
    assert found == ({"sub/deep.txt"} if pattern == "*/*.txt" else INSIDE)


def test_glob_with_a_relative_pattern(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's own case: `arborag ingest 'docs/**/*.txt'` from the folder above."""
    monkeypatch.chdir(tree.parent)
    skipped: list[IngestFailure] = []
    found = discover_sources(["docs/**/*.txt"], CFG, skipped=skipped)
    assert {Path(s.uri).name for s in found} == {"in.txt", "inner_link.txt", "deep.txt"}
    assert {Path(s.uri).name for s in skipped} == {"abs_file.txt", "rel_file.txt", "s.txt"}


def test_file_list(tree: Path) -> None:
    skipped: list[IngestFailure] = []
    named = [tree / "in.txt", tree / "abs_file.txt", tree / "rel_file.txt", tree / "inner_link.txt", f"file://{tree / 'sub' / 'deep.txt'}"]
    assert _names(discover_sources(named, CFG, skipped=skipped), tree) == INSIDE
    assert _skipped(skipped, tree) == {"abs_file.txt", "rel_file.txt"}


def test_follow_external_symlinks_opts_out_everywhere(tree: Path) -> None:
    for sources in ([tree], [str(tree / "**" / "*.txt")], [tree / "abs_file.txt", tree / "rel_file.txt"]):
        skipped: list[IngestFailure] = []
        found = discover_sources(sources, FOLLOW, skipped=skipped)
        assert not skipped
        assert {"abs_file.txt", "rel_file.txt"} <= {Path(s.uri).name for s in found}


def test_object_store_prefix_is_refused_before_anything_is_read(tree: Path) -> None:
    with pytest.raises(IngestError, match="object-store prefixes are not sources"):
        discover_sources([tree, "s3://bucket/docs/"], CFG)


def test_update_sources(tree: Path, tmp_path: Path) -> None:
    """`update` discovers with the same rule: its plan holds only the files inside the root."""
    from arborag.config import ArboragConfig
    from arborag.flows.update import run_update

    out = run_update([str(tree / "**" / "*.txt")], tmp_path / "corpus", ArboragConfig(), dry_run=True, use_prefect=False)
    assert {Path(u).relative_to(tree).as_posix() for u in out["plan"]["added_uris"]} == INSIDE
    out = run_update([str(tree)], tmp_path / "corpus", ArboragConfig(), dry_run=True, use_prefect=False)
    assert {Path(u).relative_to(tree).as_posix() for u in out["plan"]["added_uris"]} == INSIDE


def test_cli_reports_and_the_run_records_what_was_skipped(tree: Path, tmp_path: Path) -> None:
    import json

    import pyarrow.parquet as pq
    from helpers.reliability import cli, cli_env

    corpus = tmp_path / "c"
    result = cli("ingest", str(tree / "**" / "*.txt"), "--corpus", str(corpus), "--no-prefect", env=cli_env())
    assert result.returncode == 0, result.output
    for name in ("abs_file.txt", "rel_file.txt", "abs_dir/s.txt", "rel_dir/s.txt"):
        assert name in result.output, (name, result.output)
    assert "--follow-external-symlinks" in result.output
    texts = {r["text"].strip() for r in pq.read_table(corpus / "tables" / "documents.parquet").to_pylist()}
    assert texts == {"inside", "deep inside"}
    counts = json.loads(pq.read_table(corpus / "tables" / "runs.parquet").to_pylist()[-1]["counts"])
    assert counts["discover"]["skipped"] == 4


def test_named_files_behind_a_symlinked_folder(tree: Path) -> None:
    """A named file's root is the folder typed before its name, resolved once and reused for its
    neighbours (an update names every file): files behind a folder link are inside that root,
    while a file link among them that leads out of the folder is still skipped."""
    os.symlink("sub", tree / "inner_dir")
    os.symlink("../../outside/secret.txt", tree / "sub" / "out_link.txt")
    skipped: list[IngestFailure] = []
    named = [tree / "abs_dir" / "s.txt", tree / "rel_dir" / "s.txt", tree / "inner_dir" / "deep.txt",
             tree / "inner_dir" / "out_link.txt", tree / "sub" / "out_link.txt", tree / "in.txt"]
    found = discover_sources(named, CFG, skipped=skipped)
    assert {Path(s.uri).relative_to(tree).as_posix() for s in found} == {"abs_dir/s.txt", "rel_dir/s.txt", "inner_dir/deep.txt", "in.txt"}
    assert sorted(Path(s.uri).relative_to(tree).as_posix() for s in skipped) == ["inner_dir/out_link.txt", "sub/out_link.txt"]


def test_cached_real_paths_equal_realpath(tree: Path) -> None:
    from arborag.tasks.ingest.discover import _realpath

    folders: dict[str, str] = {}
    paths = [str(p) for p in sorted(tree.rglob("*"))] + [str(tree / "abs_dir" / "s.txt"), str(tree / "rel_dir" / "s.txt"),
                                                      str(tree / "sub" / ".." / "in.txt"), str(tree / "missing.txt"), "in.txt"]
    for p in paths * 2:  # the second pass answers from the cache
        assert _realpath(p, folders) == os.path.realpath(p), p
