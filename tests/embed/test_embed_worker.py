"""arborag/embed/worker.py: the model in a helper process gives the vectors the run's own process would."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from arborag.embed import worker as embed_worker
from arborag.config import EmbedConfig
from arborag.embed.model import Embedder

TEXTS = [
    "The Eiffel Tower is in Paris.",
    "x",
    "A long text about rivers and the towns along them. " * 60,  # over the model's 256 tokens: windows
    "Marie Curie won two Nobel prizes.",
]
PREFIX = [0, 0, 20, 0]


@pytest.fixture()
def worker(monkeypatch):
    """A real worker process routed to like a console-script run's (start() refuses here: torch is loaded)."""
    cfg = EmbedConfig()
    w = embed_worker.EmbedWorker(cfg)
    monkeypatch.setitem(embed_worker._ACTIVE, embed_worker._key(cfg), w)
    yield cfg, w
    w.close()


def test_worker_vectors_are_the_in_process_vectors_bit_for_bit(worker):
    cfg, w = worker
    local = Embedder(cfg)
    local._worker = lambda: None  # this one embeds in the test process
    want = local.embed(TEXTS, prefix_chars=PREFIX)
    seen: list[int] = []
    routed = Embedder(cfg)
    got = routed.embed(TEXTS, progress=seen.append, prefix_chars=PREFIX)
    assert not routed.loaded  # the model stayed in the worker
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert sum(seen) == len(TEXTS)
    assert w.info()["dim"] == routed.dim == 384
    assert w.info()["embedder"] == "LightEmbedder"  # the packaged model: no sentence-transformers import there
    again = routed.embed(TEXTS[:2])  # the same worker answers the next call (a batch of its own: compare like with like)
    assert np.array_equal(again, local.embed(TEXTS[:2]))


def test_a_killed_worker_falls_back_to_this_process_with_the_same_vectors(worker, caplog):
    cfg, w = worker
    e = Embedder(cfg)
    first = e.embed(TEXTS[:2])
    w.proc.kill()
    w.proc.wait()
    with caplog.at_level(logging.WARNING, logger="arborag.embed.model"):
        after = e.embed(TEXTS[:2])
    assert np.array_equal(after, first)
    assert "embedding worker" in caplog.text and "in this process from now on" in caplog.text
    assert embed_worker.active(cfg) is None and e.loaded


def test_a_model_that_fails_to_load_fails_the_run_with_the_loaders_error(tmp_path, monkeypatch):
    bad = tmp_path / "broken-model"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"hidden_size": 8, "model_type": "bert"}), encoding="utf-8")
    (bad / "modules.json").write_text("not json", encoding="utf-8")
    cfg = EmbedConfig(model=str(bad))
    with pytest.raises(Exception) as in_process:
        Embedder(cfg).load()
    w = embed_worker.EmbedWorker(cfg)
    monkeypatch.setitem(embed_worker._ACTIVE, embed_worker._key(cfg), w)
    try:
        e = Embedder(cfg)
        with pytest.raises(Exception) as routed:
            e.embed(["a text"])
        assert type(routed.value) is type(in_process.value)
    finally:
        w.close()


def test_only_a_cold_console_script_starts_one(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/arborag", "build"])
    assert not embed_worker.wanted()  # torch is imported in this test process
    assert embed_worker.start(EmbedConfig()) is None
    script = textwrap.dedent("""
        import os, sys
        sys.argv = ["/venv/bin/arborag", "build"]
        from arborag.embed import worker as embed_worker
        from arborag.config import EmbedConfig
        print(embed_worker.wanted())
        os.environ["ARBORAG_EMBED_WORKER"] = "0"
        print(embed_worker.wanted())
        print(embed_worker.start(EmbedConfig(backend="openai", base_url="http://127.0.0.1:9/v1")) is None)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "ARBORAG_EMBED_WORKER": ""}).stdout.split()
    assert out == ["True", "False", "True"]


def test_a_cold_process_embeds_without_importing_torch():
    """What a cold `arborag build` does: start the worker, embed through it; torch never loads here."""
    script = textwrap.dedent("""
        import json, sys
        from arborag.embed import worker as embed_worker
        from arborag.config import EmbedConfig
        from arborag.embed.model import Embedder, preload
        cfg = EmbedConfig()
        thread = preload(cfg)
        v = Embedder(cfg).embed(["The Eiffel Tower is in Paris.", "x"])
        thread.join()
        embed_worker.stop_all()
        print(json.dumps({"torch": "torch" in sys.modules, "shape": list(v.shape), "norm": float((v ** 2).sum())}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "ARBORAG_EMBED_WORKER": "1"}, timeout=300)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["torch"] is False and got["shape"] == [2, 384]
    assert got["norm"] == pytest.approx(2.0, abs=1e-3)  # two L2-normalised rows


def test_a_run_that_ends_before_the_model_is_loaded_leaves_the_worker_silent():
    """The run's process is gone (a no-op, an error) before the worker has loaded: it ends without a traceback."""
    cfg = EmbedConfig()
    w = embed_worker.EmbedWorker(cfg)
    w.conn.close()  # the run went away at once
    assert w.proc.wait(timeout=120) == 0


def test_the_worker_quietly_ends_when_the_run_is_gone_mid_load():
    script = textwrap.dedent("""
        import os, sys, time
        from arborag.embed import worker as embed_worker
        from arborag.config import EmbedConfig
        w = embed_worker.EmbedWorker(EmbedConfig())
        print(w.proc.pid, flush=True)
        os._exit(0)  # the run dies while the worker imports torch
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    pid = int(out.stdout.split()[0])
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the worker outlived its run by 120 s")
    assert "Traceback" not in out.stderr


def test_the_worker_loads_sentence_transformers_when_told_to(monkeypatch):
    """``ARBORAG_EMBED_LIGHT=0``: the worker runs the sentence-transformers model — the same vectors."""
    monkeypatch.setenv("ARBORAG_EMBED_LIGHT", "0")
    cfg = EmbedConfig()
    w = embed_worker.EmbedWorker(cfg)
    try:
        assert w.info()["embedder"] == "Embedder"
        local = Embedder(cfg)
        local._worker = lambda: None
        assert np.array_equal(w.embed(TEXTS[:2]), local.embed(TEXTS[:2]))
    finally:
        w.close()
