"""arborag.storage.lancedb_import: lancedb imported without its REST namespace client's API modules,
which load — whole — the first time anything asks the client package for a name."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from helpers.reliability import python

_FRESH = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np, pyarrow as pa
    API = "lance_namespace_urllib3_client.api.table_api"
    from arborag.storage import lancedb_import
    out = {"api_after_import": API in sys.modules, "lancedb": "lancedb" in sys.modules}
    # the build's and the update's use: write a snapshot's table, open it, search it
    from arborag.storage.vectors import VectorStore, write_vectors, _open_lance
    n = 30
    nodes = pa.table({"node_id": [f"n{i:02d}" for i in range(n)], "level": [i % 2 for i in range(n)],
                      "doc_ids": [[f"d{i % 4}"] for i in range(n)], "n_tokens": list(range(n)),
                      "text": [f"text {i}" for i in range(n)]})
    vectors = np.random.default_rng(3).standard_normal((n, 8)).astype(np.float32)
    out["written"] = write_vectors(Path(sys.argv[1]), nodes, vectors)
    store = VectorStore.open(Path(sys.argv[1]))
    out["nearest"] = store.node_ids[store.search(vectors[7], k=1)[0][0]]
    out["lance_rows"] = _open_lance(Path(sys.argv[1])).count_rows()
    out["api_after_use"] = API in sys.modules
    # the package's own names are all there once asked for
    import lance_namespace_urllib3_client as client
    out["version"] = client.__version__
    from lance_namespace_urllib3_client import ApiClient, TableApi
    out["names"] = [ApiClient.__name__, TableApi.__name__]
    out["api_after_names"] = API in sys.modules
    out["absent"] = hasattr(client, "no_such_name")
    print(json.dumps(out))
""")

_BEFORE = textwrap.dedent("""
    import json, sys
    import lancedb  # imported the plain way first: this module changes nothing
    from arborag.storage import lancedb_import
    print(json.dumps({"api": "lance_namespace_urllib3_client.api.table_api" in sys.modules,
                      "same": lancedb_import.lancedb is lancedb, "stub": lancedb_import.deferred_client() is None}))
""")


def test_lancedb_works_and_the_rest_client_loads_only_when_asked_for(tmp_path: Path) -> None:
    done = python(_FRESH, str(tmp_path / "v.lance"))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["lancedb"] and not got["api_after_import"] and not got["api_after_use"]
    assert got["written"]["rows"] == 30 and got["lance_rows"] == 30 and got["nearest"] == "n07"
    assert got["version"] and got["names"] == ["ApiClient", "TableApi"] and got["api_after_names"]
    assert got["absent"] is False


def test_an_earlier_plain_import_is_left_as_it_is() -> None:
    done = python(_BEFORE)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"api": True, "same": True, "stub": True}
