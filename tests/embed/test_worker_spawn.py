"""arborag/embed/spawn.py and arborag/launch.py: the console script starts a cold build's or
update's embedding worker before its own imports; the command adopts it, or ends it when the
guess was wrong. Real processes throughout (the worker imports torch: a few seconds each)."""

from __future__ import annotations

import json
import textwrap

import pytest

from arborag.embed import spawn as worker_spawn
from tests.helpers.reliability import cli_env, python


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["arborag", "update", "src", "--corpus", "c"], True),
        (["arborag", "build", "src", "--corpus", "c", "--seed", "3"], True),
        (["arborag", "update", "src", "--corpus", "c", "--dry-run"], False),
        (["arborag", "build", "--help"], False),
        (["arborag", "build", "src", "-c", "c", "--runner", "dask"], False),
        (["arborag", "build", "src", "-c", "c", "--runner=dask"], False),
        (["arborag", "query", "what?", "--corpus", "c"], False),
        (["arborag"], False),
    ],
)
def test_which_command_lines_start_the_worker_early(argv: list[str], expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARBORAG_EMBED_WORKER", raising=False)
    assert worker_spawn.will_embed(argv) is expected


def test_the_switch_that_turns_workers_off_turns_this_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARBORAG_EMBED_WORKER", "0")
    assert worker_spawn.will_embed(["arborag", "update", "src", "--corpus", "c"]) is False
    assert worker_spawn.start_early(["arborag", "update", "src", "--corpus", "c"]) is False


def _run(code: str) -> dict:
    done = python(textwrap.dedent(code), env=cli_env(ARBORAG_EMBED_WORKER=""), timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_command_adopts_the_early_worker_and_embeds_through_it() -> None:
    """What a cold `arborag update` does: the launcher spawns, the command's worker is that process."""
    got = _run("""
        import json, sys
        sys.argv[0] = "arborag"
        from arborag.embed import spawn as worker_spawn
        assert worker_spawn.start_early(["arborag", "update", "src", "--corpus", "c"])
        early_pid = worker_spawn._EARLY[0][0].pid
        from arborag.embed import worker as embed_worker
        from arborag.config import EmbedConfig
        from arborag.embed.model import Embedder
        cfg = EmbedConfig()
        worker = embed_worker.start(cfg)
        v = Embedder(cfg).embed(["The Eiffel Tower is in Paris.", "x"])
        ready = worker.info()
        embed_worker.stop_all()
        print(json.dumps({"same": worker.proc.pid == early_pid, "left": len(worker_spawn._EARLY), "shape": list(v.shape),
                          "torch_here": "torch" in sys.modules, "embedder": ready["embedder"],
                          "phases": sorted(ready["phases"])}))
    """)
    assert got["same"] and got["left"] == 0
    assert got["shape"] == [2, 384] and got["torch_here"] is False and got["embedder"] == "LightEmbedder"
    assert "import torch + tokenizers" in got["phases"]  # imported before the config arrived, timed all the same


def test_a_command_that_embeds_elsewhere_ends_the_early_worker() -> None:
    got = _run("""
        import json, sys
        sys.argv[0] = "arborag"
        from arborag.embed import spawn as worker_spawn
        assert worker_spawn.start_early(["arborag", "build", "src", "--corpus", "c"])
        proc = worker_spawn._EARLY[0][0]
        from arborag.embed import worker as embed_worker
        from arborag.config import EmbedConfig
        started = embed_worker.start(EmbedConfig(backend="openai"))  # the config said: a remote embedder
        print(json.dumps({"started": started is not None, "code": proc.wait(timeout=60), "left": len(worker_spawn._EARLY)}))
    """)
    assert got == {"started": False, "code": -9, "left": 0}


def test_an_unadopted_worker_ends_with_the_process() -> None:
    """The launcher guessed, the command failed before it embedded (a bad option): nothing is left running."""
    got = _run("""
        import json, subprocess, sys
        code = ("import sys; from arborag.embed import spawn as worker_spawn; "
                "worker_spawn.start_early(['arborag', 'update', 'src', '--corpus', 'c']); "
                "print(worker_spawn._EARLY[0][0].pid, flush=True); sys.exit(2)")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        pid = int(done.stdout.split()[0])
        import os, time
        for _ in range(600):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            raise SystemExit(f"worker {pid} still running")
        print(json.dumps({"exit": done.returncode}))
    """)
    assert got == {"exit": 2}
