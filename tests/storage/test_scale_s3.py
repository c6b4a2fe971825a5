"""A corpus on S3: built and published to a real S3-compatible server (moto in server mode on
127.0.0.1, started and stopped here; the client is the real s3fs/botocore), opened from a fresh
machine's mirror, the manifest switched with conditional writes, the snapshot's LanceDB table
read in place over S3."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.s3 import moto_s3

from arborag.config import ArboragConfig
from arborag.flows.build import run_build
from arborag.storage.corpus import Corpus
from arborag.storage.objectstore import ManifestConflict, ObjectStore, is_remote, lance_storage_options, mirror_dir

pytestmark = pytest.mark.slow

pytest.importorskip("moto.server")

URI = "s3://arborag-test/corpora/cinderella"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 (a free port) with one bucket; AWS_* point at it."""
    with moto_s3("arborag-test", str(tmp_path_factory.mktemp("mirror-a"))) as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def built(s3: str, examples_dir: Path) -> dict:
    return run_build([examples_dir / "corpus" / "cinderella.txt"], URI, ArboragConfig(), use_prefect=False, progress=False)


def test_scale_s3_uri_is_remote() -> None:
    assert is_remote("s3://b/p") and is_remote("memory://x") and not is_remote("/tmp/x") and not is_remote("file:///tmp/x")
    assert is_remote(Path("s3://b/p"))  # a CLI path option collapses '//': the URI is restored


def test_scale_s3_build_publishes_snapshot_and_manifest_to_the_bucket(built: dict) -> None:
    assert built["status"] == "ok" and built["corpus"] == URI
    store = ObjectStore(URI)
    man, etag = store.get_json("manifest.json")
    assert man is not None and man["snapshot"] == built["snapshot"] and etag
    for name in ("info.json", "nodes.parquet", "edges.parquet", "chunks.parquet", "vectors.lance/nodes.arrow"):
        assert store.exists(f"snapshots/{built['snapshot']}/{name}"), name
    assert store.exists("tables/chunks.parquet")


def test_scale_s3_open_index_from_a_fresh_mirror(built: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.query import open_index

    monkeypatch.setenv("ARBORAG_OBJECT_CACHE", str(tmp_path / "mirror-b"))  # another machine
    assert not mirror_dir(URI).exists()
    index = open_index(URI)
    assert index.snapshot == built["snapshot"]
    assert str(index.snapshot_dir).startswith(str(tmp_path / "mirror-b"))
    dense = index.search("How did Cinderella go to the ball?", mode="collapsed", k=3)
    sparse = index.search("glass slipper", mode="sparse", k=3)
    assert dense and sparse and any("slipper" in h.text.lower() for h in sparse)
    index.close()
    # a rebuild from that machine with the same inputs is a no-op (working tables came along)
    again = run_build([], URI, ArboragConfig(), use_prefect=False, progress=False)
    assert again["noop"] is True and again["calls"]["embedded_texts"] == 0


def test_scale_s3_manifest_switch_is_conditional(built: dict) -> None:
    first, second = Corpus(URI), Corpus(URI)
    assert first.manifest() == second.manifest()  # both read the same version
    first.publish_existing(built["snapshot"], {"build_key": "k"})
    with pytest.raises(ManifestConflict, match="another writer published"):
        second.publish_existing(built["snapshot"], {"build_key": "k"})
    assert Corpus(URI).manifest()["snapshot"] == built["snapshot"]  # readers still see a sealed snapshot


def test_scale_s3_lancedb_reads_the_snapshot_vectors_in_place(built: dict) -> None:
    import lancedb
    import pyarrow.parquet as pq

    db = lancedb.connect(f"{URI}/snapshots/{built['snapshot']}/vectors.lance", storage_options=lance_storage_options(URI))
    table = db.open_table("nodes")
    nodes = pq.read_table(Corpus(URI).published_dir() / "nodes.parquet", columns=["node_id"])
    assert table.count_rows() == nodes.num_rows > 0
