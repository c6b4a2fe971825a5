"""A cold incremental update loads lancedb in a low-priority helper process and writes its vector
table there (arborag/embed/worker.py ``preimport``/``holding``, tasks/stages/vectors.py): the
same table as written here, this process never imports lancedb, and a helper that fails hands
the write back.

The helper is a real process (``python -m arborag.embed.worker_serve`` without a model). What the
console script does is driven in fresh subprocesses with ``ARBORAG_EMBED_WORKER=1`` (the test
process has lancedb loaded already, and then no helper is started: nothing to gain).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arborag.embed import worker as embed_worker
from arborag.flows.build import run_build
from tests.helpers.reliability import Proc, cli_env, python
from tests.helpers.update import CONFIG, copy_corpus, make_sources, published

#: Writes the same small vector table through tasks/stages/vectors._write with a helper (argv[1])
#: and in this process (argv[2]); prints what happened as JSON.
_WRITE_BOTH = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    import numpy as np, pyarrow as pa
    from arborag.embed import worker as embed_worker
    from arborag.tasks.stages import vectors as stage
    n = 40
    nodes = pa.table({"node_id": [f"n{i:03d}" for i in range(n)], "level": [i % 3 for i in range(n)],
                      "doc_ids": [[f"d{i % 7}"] for i in range(n)], "n_tokens": list(range(n)),
                      "text": [f"text number {i}" for i in range(n)]})
    vectors = np.random.default_rng(7).standard_normal((n, 8)).astype(np.float32)
    helper = embed_worker.preimport("arborag.storage.lancedb_import")
    out = {"helper": helper is not None, "nice": os.getpriority(os.PRIO_PROCESS, helper.proc.pid) if helper else None}
    if sys.argv[3] == "fail":  # the helper is reachable but its call breaks
        def broken(*args):
            raise embed_worker.WorkerGone("the helper went away")
        helper.call = broken
    out["helped"] = stage._write(Path(sys.argv[1]), nodes, vectors)
    out["lancedb_here_after_helper"] = "lancedb" in sys.modules
    embed_worker.stop_all()
    out["here"] = stage._write(Path(sys.argv[2]), nodes, vectors)
    print(json.dumps(out))
""")


def _run(code: str, *args: str, worker: str = "1", timeout: float = 300) -> Proc:
    return python(code, *args, env=cli_env(ARBORAG_EMBED_WORKER=worker), timeout=timeout)


def _lance_rows(directory: Path) -> pa.Table:
    import lancedb

    table = lancedb.connect(str(directory)).open_table("nodes").to_arrow()
    return table.sort_by("node_id")


def test_the_helper_writes_the_table_this_process_would_without_lancedb_here(tmp_path: Path) -> None:
    done = _run(_WRITE_BOTH, str(tmp_path / "helped"), str(tmp_path / "here"), "ok")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["helper"] and got["nice"] == embed_worker.HELPER_NICE
    assert got["helped"]["writer"] == "helper process" and got["here"]["writer"] == "this process"
    assert got["lancedb_here_after_helper"] is False  # the run's process never paid for the import
    assert {k: v for k, v in got["helped"].items() if k != "writer"} == {k: v for k, v in got["here"].items() if k != "writer"}
    assert _lance_rows(tmp_path / "helped").equals(_lance_rows(tmp_path / "here"))
    # the memory-mapped copy the query path reads is byte for byte the same
    assert (tmp_path / "helped" / "nodes.arrow").read_bytes() == (tmp_path / "here" / "nodes.arrow").read_bytes()


def test_a_helper_that_fails_hands_the_write_back(tmp_path: Path) -> None:
    done = _run(_WRITE_BOTH, str(tmp_path / "helped"), str(tmp_path / "here"), "fail")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["helped"]["writer"] == "this process" and got["helped"]["rows"] == 40
    assert "could not write the vector table" in done.stderr and "the helper went away" in done.stderr
    assert _lance_rows(tmp_path / "helped").equals(_lance_rows(tmp_path / "here"))


def test_no_helper_where_the_modules_are_loaded_or_processes_are_not_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARBORAG_EMBED_WORKER", "1")
    assert embed_worker.preimport("json") is None  # loaded here already: a warm process imports nothing
    monkeypatch.setenv("ARBORAG_EMBED_WORKER", "0")
    assert embed_worker.preimport("tabnanny") is None and embed_worker.holding("tabnanny") is None


def test_a_helper_has_no_model_and_says_so() -> None:
    helper = embed_worker.EmbedWorker(None)
    try:
        with pytest.raises(RuntimeError, match="no model to embed with"):
            helper.embed(["x"])
        assert helper.info()["embedder"] is None
        assert helper.call(os.getpid) == helper.proc.pid  # calls it answers
    finally:
        helper.close()


_UPDATE = textwrap.dedent("""
    import json, sys
    from arborag.flows.update import run_update
    from tests.helpers.update import CONFIG
    out = run_update([sys.argv[1]], sys.argv[2], CONFIG, progress=False)
    print(json.dumps({"mode": out["mode"], "lancedb_here": "lancedb" in sys.modules}))
""")


@pytest.mark.slow
def test_an_incremental_update_with_the_helper_publishes_the_same_snapshot(tmp_path: Path, examples_dir: Path) -> None:
    src = make_sources(tmp_path / "base", examples_dir)
    corpus = tmp_path / "base" / "c"
    assert run_build([src], corpus, CONFIG, use_prefect=False, progress=False)["status"] == "ok"
    got = {}
    for switch in ("1", "0"):
        c, s = copy_corpus(corpus, src, tmp_path / f"w{switch}")
        (s / "added.txt").write_text("A lantern maker in the valley sold glass lanterns to the royal court every spring.\n", encoding="utf-8")
        done = _run(_UPDATE, str(s), str(c), worker=switch, timeout=600)
        assert done.returncode == 0, done.stderr
        said = json.loads(done.stdout.strip().splitlines()[-1])
        runs = pq.read_table(c / "tables" / "runs.parquet").to_pylist()
        got[switch] = (said, json.loads(runs[-1]["counts"])["vectors"], pq.read_table(published(c) / "nodes.parquet").sort_by("node_id"),
                       pa.ipc.open_file(published(c) / "vectors.lance" / "nodes.arrow").read_all().sort_by("node_id"))
    (said1, stats1, nodes1, rows1), (said0, stats0, nodes0, rows0) = got["1"], got["0"]
    assert said1["mode"] == said0["mode"] == "incremental"
    assert stats1["writer"] == "helper process" and said1["lancedb_here"] is False
    assert stats0["writer"] == "this process"
    assert nodes1.column("node_id").equals(nodes0.column("node_id")) and nodes1.column("text").equals(nodes0.column("text"))
    assert rows1.column("node_id").equals(rows0.column("node_id"))
    v1 = np.stack(rows1.column("vector").to_numpy(zero_copy_only=False))
    v0 = np.stack(rows0.column("vector").to_numpy(zero_copy_only=False))
    assert np.allclose(v1, v0, atol=1e-5)
