"""Saved Parquet fixtures pin the tree tables a build publishes: ``nodes``, ``edges`` and ``links``
(tests/fixtures/tree/), over a tiny corpus — examples/corpus/cinderella.txt and five short
documents that name each other (helpers.update.LINKED_SOURCES) — built in-process with the
defaults (the packaged embedder, sentence leaves, the extractive summarizer; no Prefect, no LLM).

What is compared, and why:

- **Leaves and links, always.** Leaf nodes (level 0: ids, texts, token counts, documents) and the
  links table (entities, kinds, document frequencies, weights) follow from the texts and the code
  alone, so they are the same on every machine.
- **The whole tree, on the machine and install that recorded it.** Summary nodes and edges depend
  on the embedder's floats and UMAP's compiled layout: a tree is reproducible on one machine with
  one install, not across CPUs or library releases. The recording saves
  :func:`arborag.env.numeric_environment` beside the tables (``environment.json``); where this
  machine's differs, the whole-tree test skips and names what differs.

``created_by_run`` (a fresh run id per build) is left out of ``nodes``; vectors are not saved.

When a change to the tree tables is intended, re-record the fixtures and commit them with it:

    python tests/tasks/tree/test_tree_fixtures.py --record
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

TESTS = Path(__file__).resolve().parents[2]
FIXTURES = TESTS / "fixtures" / "tree"
EXAMPLE = TESTS.parent / "examples" / "corpus" / "cinderella.txt"
TABLES = ("nodes", "edges", "links")
SORT = {"nodes": ["level", "node_id"], "edges": ["level", "parent_id", "child_id"], "links": ["node_id", "entity", "kind"]}
HOW = "if the change is intended: python tests/tasks/tree/test_tree_fixtures.py --record, and commit tests/fixtures/tree/"

pytestmark = pytest.mark.slow


def build_tables(workdir: Path) -> dict[str, pl.DataFrame]:
    """Build the tiny corpus under ``workdir``; its published nodes (without ``created_by_run``),
    edges and links, each sorted by its key."""
    from helpers.update import LINKED_SOURCES, write_sources

    from arborag.config import ArboragConfig
    from arborag.flows.build import run_build
    from arborag.storage.corpus import Corpus

    src = write_sources(workdir / "src", {"cinderella.txt": EXAMPLE.read_text(encoding="utf-8"), **LINKED_SOURCES})
    out = run_build([str(src)], workdir / "c", ArboragConfig(), use_prefect=False, progress=False)
    assert out["status"] == "ok", out
    snapshot = Corpus(workdir / "c").published_dir()
    tables = {name: pl.DataFrame(pq.read_table(snapshot / f"{name}.parquet")) for name in TABLES}
    tables["nodes"] = tables["nodes"].drop("created_by_run")
    return {name: frame.sort(SORT[name]) for name, frame in tables.items()}


def record(workdir: Path) -> None:
    """Rebuild and write the fixtures and the environment they were recorded in."""
    from arborag.env import numeric_environment

    tables = build_tables(workdir)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        pq.write_table(frame.to_arrow(), FIXTURES / f"{name}.parquet", compression="zstd")
    (FIXTURES / "environment.json").write_text(json.dumps(numeric_environment(), indent=1, sort_keys=True) + "\n", encoding="utf-8")


def leaves(nodes: pl.DataFrame) -> pl.DataFrame:
    return nodes.filter(pl.col("level") == 0)


def saved(name: str) -> pl.DataFrame:
    path = FIXTURES / f"{name}.parquet"
    assert path.exists(), f"no fixture {path}; {HOW}"
    return pl.DataFrame(pq.read_table(path))


def environment_difference() -> str:
    """What differs between this machine's numeric environment and the recording's ("" if none)."""
    from arborag.env import numeric_environment

    recorded = json.loads((FIXTURES / "environment.json").read_text(encoding="utf-8"))
    here = json.loads(json.dumps(numeric_environment()))
    return "; ".join(f"{key}: recorded {recorded.get(key)!r}, here {here.get(key)!r}"
                     for key in sorted(set(recorded) | set(here)) if recorded.get(key) != here.get(key))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pl.DataFrame]:
    return build_tables(tmp_path_factory.mktemp("tree-fixtures"))


def test_leaves_and_links_match_their_saved_fixtures(fresh: dict[str, pl.DataFrame]) -> None:
    from helpers.tables import first_difference

    assert leaves(fresh["nodes"]).height > 0 and fresh["links"].height > 0, "the tiny corpus gave no leaves or no links"
    problem = first_difference("nodes (leaves)", leaves(fresh["nodes"]), leaves(saved("nodes")))
    assert not problem, f"the leaves changed — {problem}; {HOW}"
    problem = first_difference("links", fresh["links"], saved("links"))
    assert not problem, f"the links changed — {problem}; {HOW}"


def test_whole_tree_matches_its_saved_fixtures_on_the_recording_environment(fresh: dict[str, pl.DataFrame]) -> None:
    from helpers.tables import first_difference

    differs = environment_difference()
    if differs:
        pytest.skip(f"the fixtures' summary nodes and edges were recorded in another numeric environment ({differs})")
    assert fresh["nodes"]["level"].max() >= 1, "the tiny corpus gave no summary level"
    for name in ("nodes", "edges"):
        problem = first_difference(name, fresh[name], saved(name))
        assert not problem, f"the {name} table changed — {problem}; {HOW}"


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--record"]:
        sys.exit(f"usage: python {Path(__file__).relative_to(TESTS.parent)} --record   (re-records {FIXTURES.relative_to(TESTS.parent)}/)")
    sys.path.insert(0, str(TESTS))
    from arborag.env import offline_env

    offline_env()
    with tempfile.TemporaryDirectory() as tmp:
        record(Path(tmp))
    print(f"recorded {', '.join(TABLES)} and environment.json in {FIXTURES}")
