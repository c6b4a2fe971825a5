"""What a small update no longer repeats: the code fingerprint's import parse (kept on
disk by file stats), a second walk of the sources (the quick no-op check hands its discovery on)
and the plan's re-discovery of files already discovered. Each gives the same result as before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from arborag.config import IngestConfig, load_config
from arborag.flows import fingerprints, noop
from arborag.flows.pipelines import UPDATE_PIPELINE
from arborag.flows.fingerprints import module_closure, pipeline_fingerprint
from arborag.tasks.stages.documents import build_documents, discover_sources


def _fresh_process_caches(monkeypatch: pytest.MonkeyPatch, cache_home: Path) -> None:
    """What a new process starts with: no in-memory import lists, the disk cache under ``cache_home``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    monkeypatch.setattr(fingerprints, "_disk", None)
    monkeypatch.setattr(fingerprints, "_disk_dirty", False)
    fingerprints._imports.cache_clear()


def test_import_lists_on_disk_give_the_same_fingerprint_without_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARBORAG_CODE_CACHE", "0")
    _fresh_process_caches(monkeypatch, tmp_path / "off")
    parsed = pipeline_fingerprint(UPDATE_PIPELINE)  # every module parsed with ast, nothing written
    assert not (tmp_path / "off" / "arborag").exists()

    monkeypatch.delenv("ARBORAG_CODE_CACHE")
    _fresh_process_caches(monkeypatch, tmp_path)
    assert pipeline_fingerprint(UPDATE_PIPELINE) == parsed
    disk = json.loads((tmp_path / "arborag" / fingerprints._DISK_NAME).read_text(encoding="utf-8"))
    closure = module_closure(m for s in UPDATE_PIPELINE for m in s.modules)
    assert {k.split("|")[0] for k in disk} == set(closure)  # one entry per module of the closure

    # a new process reads the lists instead of parsing: no ast.parse at all, same fingerprint
    _fresh_process_caches(monkeypatch, tmp_path)

    def no_parse(path: Path) -> None:
        raise AssertionError(f"parsed {path} although its import list is on disk")

    monkeypatch.setattr(fingerprints, "_parse", no_parse)
    assert pipeline_fingerprint(UPDATE_PIPELINE) == parsed


def test_an_edited_module_is_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is (module, path, mtime, size): a stale entry for an older version of the file is not used."""
    _fresh_process_caches(monkeypatch, tmp_path)
    path = Path(fingerprints.__file__)
    st = path.stat()
    key = f"arborag.flows.fingerprints|{path}|{st.st_mtime_ns - 1}|{st.st_size}"
    fingerprints._disk_cache()[key] = ["arborag.not_a_module"]  # what the file imported "before an edit"
    assert "arborag.not_a_module" not in fingerprints._imports("arborag.flows.fingerprints", path, st.st_mtime_ns, st.st_size)
    assert "arborag.hashing" in fingerprints._imports("arborag.flows.fingerprints", path, st.st_mtime_ns, st.st_size)


def _sources(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("Alpha text one.\n", encoding="utf-8")
    (src / "sub" / "b.md").write_text("# Beta\n\nBeta text two.\n", encoding="utf-8")
    (src / "c.txt").write_text("Alpha text one.\n", encoding="utf-8")  # a duplicate of a.txt
    (src / "bad.txt").write_bytes(b"\x00\x01\x02binary")
    return src


def test_discovered_files_read_as_given_make_the_same_documents(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    src = _sources(tmp_path)
    cfg = IngestConfig()
    files = [s.uri for s in discover_sources([src], cfg)]
    walked, r1 = build_documents(files, cfg, now=now)
    given, r2 = build_documents(files, cfg, now=now, discovered=True)
    assert given.equals(walked) and walked.num_rows == 3  # two documents (one duplicate uri) and one error row
    assert r2.as_dict() == r1.as_dict()
    # and over an existing table (an update's plan): unchanged files are recognised as before
    (src / "a.txt").write_text("Alpha text, revised.\n", encoding="utf-8")
    again, r3 = build_documents(files, cfg, existing=walked, now=now)
    again_given, r4 = build_documents(files, cfg, existing=walked, now=now, discovered=True)
    assert again_given.equals(again) and r4.as_dict() == r3.as_dict()


def test_the_quick_check_hands_its_discovery_on_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """quick_noop's walk serves the update that follows (same sources, corpus, ingest config), once."""
    from arborag.flows.update import _files
    from arborag.storage.corpus import Corpus
    from arborag.tasks.stage_context import StageContext

    src = _sources(tmp_path)
    corpus = Corpus(tmp_path / "corpus").ensure()
    cfg = load_config(None)
    # a record that makes quick_noop walk the sources (then find they changed: not a no-op)
    (corpus.root / "manifest.json").write_text(json.dumps({"snapshot": "snap-x"}), encoding="utf-8")
    (corpus.cache_dir / noop.RECORD).write_text(json.dumps({"snapshot": "snap-x", "files": "other"}), encoding="utf-8")
    assert noop.quick_noop([str(src)], corpus.root, cfg) is None

    walks: list[object] = []
    import arborag.flows.update as upd

    real = upd.discover
    monkeypatch.setattr(upd, "discover", lambda ctx, sources: walks.append(sources) or real(ctx, sources))
    ctx = StageContext(corpus, cfg, "run-1")
    first = _files(ctx, [str(src)])
    assert walks == []  # the quick check's discovery, not a second walk
    assert first == [s.uri for s in discover_sources([src], cfg.ingest, skip=[corpus.root])]
    assert _files(ctx, [str(src)]) == first and len(walks) == 1  # handed on once; the next caller walks
    # another source list (or corpus) never takes it
    assert noop.quick_noop([str(src)], corpus.root, cfg) is None
    assert _files(ctx, [str(src / "sub")]) == [os.path.join(str(src), "sub", "b.md")] and len(walks) == 2
    assert noop.discovered([str(src)], corpus.root, cfg) is None  # taken by the call above (asked once)


# -- what an update no longer imports: scikit-learn (it pulls scipy.stats: ~1 s of a small update) --
def test_gmm_memberships_equal_sklearn_to_the_bit() -> None:
    """The numpy predict_proba of an update is sklearn's GaussianMixture.predict_proba, bit for bit,
    on real fits (full covariance, several k) and on points away from the training data."""
    import numpy as np
    from sklearn.mixture import GaussianMixture

    from arborag.tasks.cluster.fitted import FitRecord
    from arborag.tasks.tree.model import predict_proba

    rng = np.random.default_rng(26)
    compared = 0
    for k, dims, n in ((2, 2, 60), (5, 10, 300), (9, 10, 500), (3, 4, 40)):
        centers = rng.normal(0, 4, (k, dims))
        x = np.concatenate([c + rng.normal(0, 1, (n // k, dims)) for c in centers]).astype(np.float32)
        gmm = GaussianMixture(k, covariance_type="full", random_state=0).fit(x)
        fit = FitRecord.of(np.arange(len(x)), x, 15, gmm)
        for pts in (x, x[:7] + rng.normal(0, 3, (7, dims)).astype(np.float32), rng.normal(0, 40, (5, dims)).astype(np.float32)):
            assert np.array_equal(predict_proba(fit, pts), fit.predict_proba(pts))
            compared += 1
    one = FitRecord.of(np.arange(3), np.zeros((3, 2), np.float32), 15, None)
    assert np.array_equal(predict_proba(one, np.zeros((4, 2))), np.ones((4, 1)))
    assert compared == 12


def test_stop_words_are_sklearns_without_importing_sklearn() -> None:
    import subprocess
    import sys

    code = ("import sys; from arborag.tasks.summarize.extractive import _stop_words; w = _stop_words(); "
            "import arborag.tasks.tree.model, arborag.tasks.stages.tree_update; "
            "print(len(w), 'sklearn' in sys.modules, 'scipy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["318", "False", "False"]
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    from arborag.tasks.summarize.extractive import _stop_words

    assert _stop_words() == frozenset(ENGLISH_STOP_WORDS)


def test_vector_imports_are_warmed_on_a_thread_and_a_failure_is_left_to_the_stage() -> None:
    """flows.update warms what the vectors stage imports once the plan is made (not during it)."""
    import subprocess
    import sys

    code = (
        "import sys, threading; import arborag.flows.update as u; from arborag.flows.common import warm_imports\n"
        "assert 'tabnanny' not in sys.modules\n"
        "called = []\n"
        "warm_imports('tabnanny', 'arborag_no_such_module', lambda: called.append(1))\n"
        "[t.join() for t in threading.enumerate() if t.name == 'arborag-warm-imports']\n"
        "print('tabnanny' in sys.modules, u._VECTOR_IMPORTS, called)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "True ('arborag.storage.lancedb_import',) [1]"


def test_entries_of_edited_or_removed_files_are_dropped_when_the_cache_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fresh_process_caches(monkeypatch, tmp_path)
    import arborag.tasks.stages.tree_update as module  # in the update pipeline's closure

    path = Path(module.__file__)
    st = path.stat()
    disk = fingerprints._disk_cache()
    disk[f"arborag.tasks.stages.tree_update|{path}|{st.st_mtime_ns - 1}|{st.st_size}"] = []  # an older version of the file
    disk[f"arborag.gone|{tmp_path / 'gone.py'}|1|1"] = []  # a file that is no more
    pipeline_fingerprint(UPDATE_PIPELINE)  # learns the current files' lists and writes the cache
    saved = json.loads((tmp_path / "arborag" / fingerprints._DISK_NAME).read_text(encoding="utf-8"))
    assert f"arborag.tasks.stages.tree_update|{path}|{st.st_mtime_ns}|{st.st_size}" in saved
    assert not any(k.startswith("arborag.gone|") for k in saved)
    assert f"arborag.tasks.stages.tree_update|{path}|{st.st_mtime_ns - 1}|{st.st_size}" not in saved
