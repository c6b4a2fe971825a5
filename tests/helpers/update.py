"""Shared pieces of the update tests (tests/flows/update): a small multi-level corpus and probes.

The sources are the Cinderella text cut into six files plus one file of sentences found nowhere
else (``zebra.txt``), so a test can delete or change it and look for its words at every level.
``cluster.dims = 4`` makes 24-odd leaves grow several summary levels (the default stops at
dims + 1 = 11 nodes), so propagation upward is exercised on a tree that builds in seconds.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from arborag.config import ArboragConfig

UNIQUE = "seventeen purple owls"
ZEBRA = (
    "The zebra queen arrived at midnight in a carriage drawn by seventeen purple owls.\n\n"
    "Her seventeen purple owls sang of a glass lighthouse on the salt marsh of Quillon.\n"
)

CONFIG = ArboragConfig().with_overrides(cluster={"dims": 4})


def make_sources(root: Path, examples: Path) -> Path:
    """``root/src`` with part00..part05.txt (Cinderella) and zebra.txt."""
    src = root / "src"
    src.mkdir(parents=True)
    lines = (examples / "corpus" / "cinderella.txt").read_text(encoding="utf-8").splitlines()
    for i in range(6):
        (src / f"part{i:02d}.txt").write_text("\n".join(lines[i * 24 : (i + 1) * 24]) + "\n", encoding="utf-8")
    (src / "zebra.txt").write_text(ZEBRA, encoding="utf-8")
    return src


def copy_corpus(base: Path, sources: Path, dest: Path) -> tuple[Path, Path]:
    """A private copy of a built corpus and of its sources (tests change both)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from arborag.storage.tables import read_table, write_table

    shutil.copytree(sources, dest / "src")
    shutil.copytree(base, dest / "c")
    # the documents table names the sources by absolute uri: point it at the copy
    path = dest / "c" / "tables" / "documents.parquet"
    docs = read_table("documents", path)
    old, new = str(sources), str(dest / "src")
    for name in ("uri", "metadata"):
        col = pc.replace_substring(docs.column(name), old, new)
        docs = docs.set_column(docs.schema.get_field_index(name), name, col.cast(docs.schema.field(name).type))
    write_table("documents", pa.Table.from_arrays(docs.columns, schema=docs.schema), path)
    return dest / "c", dest / "src"


def write_sources(src: Path, sources: dict[str, str]) -> Path:
    """``src`` holding one file per ``name: text`` of ``sources``."""
    src.mkdir(parents=True, exist_ok=True)
    for name, text in sources.items():
        (src / name).write_text(text, encoding="utf-8")
    return src


def built_from(tmp_path: Path, sources: dict[str, str], config: ArboragConfig) -> tuple[Path, Path]:
    """(``tmp_path/src``, ``tmp_path/c``): the sources written and built cold in-process (asserted ok)."""
    from arborag.flows.build import run_build

    src = write_sources(tmp_path / "src", sources)
    corpus = tmp_path / "c"
    out = run_build([src], corpus, config, use_prefect=False, progress=False)
    assert out["status"] == "ok", out
    return src, corpus


def published(corpus: Path) -> Path:
    return corpus / "snapshots" / json.loads((corpus / "manifest.json").read_text())["snapshot"]


def nodes_of(corpus: Path) -> list[dict[str, Any]]:
    return pq.read_table(published(corpus) / "nodes.parquet").to_pylist()


def edges_of(corpus: Path) -> list[dict[str, Any]]:
    return pq.read_table(published(corpus) / "edges.parquet").to_pylist()


def vector_texts(corpus: Path) -> list[str]:
    """Every text held by the snapshot's LanceDB vector table."""
    import lancedb
    import pyarrow as pa

    from arborag.storage.vectors import ARROW_FILE

    folder = published(corpus) / "vectors.lance"
    db = lancedb.connect(str(folder))
    texts = [t for name in db.list_tables().tables for t in db.open_table(name).to_arrow().column("text").to_pylist()]
    if (folder / ARROW_FILE).exists():  # the memory-mapped copy the query side reads
        with pa.memory_map(str(folder / ARROW_FILE)) as src:
            texts += pa.ipc.open_file(src).read_all().column("text").to_pylist()
    return texts


def ancestors(edges: list[dict[str, Any]], node_id: str) -> set[str]:
    up: dict[str, list[str]] = {}
    for e in edges:
        up.setdefault(e["child_id"], []).append(e["parent_id"])
    seen: set[str] = set()
    todo = [node_id]
    while todo:
        for p in up.get(todo.pop(), []):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


class CountingSummaries:
    """Counts the clusters handed to the (real, extractive) summarizer."""

    def __init__(self) -> None:
        self.clusters = 0

    def install(self, monkeypatch: Any) -> "CountingSummaries":
        from arborag.tasks.summarize import extractive as summarize

        real = summarize.ExtractiveSummarizer.summarize_many
        me = self

        def counting(self_: Any, clusters: Any, **kw: Any) -> Any:
            me.clusters += len(clusters)
            return real(self_, clusters, **kw)

        monkeypatch.setattr(summarize.ExtractiveSummarizer, "summarize_many", counting)
        return self


def iter_texts(corpus: Path) -> Iterator[tuple[int, str]]:
    for r in nodes_of(corpus):
        yield int(r["level"]), r["text"]


#: Five small documents that name each other by title (links: titles and mentions).
LINKED_SOURCES = {
    "Lowmere_Ferry.txt": "Lowmere Ferry\nThe ferryman of Lowmere rowed the ashen barge to the Quillon Lighthouse every dawn.\n\n"
                         "He carried pears and a letter for Ada Brimble.\n",
    "Quillon_Lighthouse.txt": "Quillon Lighthouse\nThe Quillon Lighthouse stands on the salt marsh.\n\nIt was built by Ada Brimble in 1802.\n",
    "Ada_Brimble.txt": "Ada Brimble\nAda Brimble was an engineer who built lighthouses and mills.\n\nShe was born in Tern Harbour.\n",
    "Tern_Harbour.txt": "Tern Harbour\nTern Harbour is a fishing village.\n\nSeabirds nest on its cliffs all summer.\n",
    "Salt_Marsh.txt": "Salt Marsh\nThe marsh floods twice a day.\n\nHerons fish in its channels.\n",
}
