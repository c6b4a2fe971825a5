"""The LLM paths of the sections and context stages, against the FAKE OpenAI-compatible server
(tests/fake_llm_server.py: a scripted test double on 127.0.0.1, not a model).

- ``sections.strategy = semantic``: the stage shows the LLM numbered lines and keeps its JSON
  sections (repaired); a window whose answer never validates becomes one section titled by
  its line range.
- ``context.llm``: document titles (when the source has none) and summaries come from the LLM; a
  failed call falls back to the offline path.
- No endpoint configured: a clear ConfigError, nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_llm_server import error, reply
from helpers.llm import KEY_ENV, api_key, server  # noqa: F401  (fixtures)

from arborag.config import ArboragConfig
from arborag.errors import ConfigError
from arborag.flows.ingest import run_ingest_and_segment
from arborag.storage.corpus import Corpus

TEXT = "\n".join(
    [f"Line {i} about the royal ball and the dancing guests." for i in range(30)]
    + [f"Line {i} about the kitchen, the lentils and the ashes." for i in range(30, 60)]
)


def _config(server, **sections) -> ArboragConfig:  # noqa: F811
    return ArboragConfig().with_overrides(
        summarize={"base_url": server.base_url, "llm_model": "fake-model", "api_key_env": KEY_ENV, "retries": 0, "timeout_s": 5},
        **sections,
    )


def _write(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "story.txt").write_text(TEXT, encoding="utf-8")
    return src


def test_semantic_sections_through_the_stage(tmp_path: Path, server) -> None:  # noqa: F811
    answer = {"sections": [{"title": "The ball", "start": 0, "end": 29}, {"title": "The kitchen", "start": 30, "end": 59}]}
    server.script("Split the document excerpt", reply(json.dumps(answer)))
    config = _config(server, sections={"strategy": "semantic", "min_avg_chars": 0})
    out = run_ingest_and_segment([_write(tmp_path)], tmp_path / "c", config, use_prefect=False)
    corpus = Corpus(tmp_path / "c")
    secs = sorted(corpus.read("sections").to_pylist(), key=lambda s: s["ordinal"])
    assert [(s["title"], s["start_line"], s["end_line"], s["strategy"]) for s in secs] == [
        ("The ball", 0, 29, "semantic"), ("The kitchen", 30, 59, "semantic")]
    prompt = server.requests[0].body["messages"][-1]["content"]
    assert "[0] Line 0 about the royal ball" in prompt and "[59] Line 59" in prompt
    chunks = corpus.read("chunks").to_pylist()
    kitchen = {s["section_id"] for s in secs if s["title"] == "The kitchen"}
    assert all(("kitchen" in c["text"]) == (c["section_id"] in kitchen) for c in chunks)
    assert all("section titled 'The kitchen'" in c["header"] for c in chunks if c["section_id"] in kitchen)
    assert out["sections"]["sections"] == 2


def test_a_window_that_never_validates_is_one_section(tmp_path: Path, server) -> None:  # noqa: F811
    server.script("Split the document excerpt", reply("no JSON here, sorry"))
    config = _config(server, sections={"strategy": "semantic"})
    out = run_ingest_and_segment([_write(tmp_path)], tmp_path / "c", config, use_prefect=False)
    secs = Corpus(tmp_path / "c").read("sections").to_pylist()
    assert [(s["title"], s["start_line"], s["end_line"]) for s in secs] == [("Lines 0–59", 0, 59)]
    assert (out["sections"]["failed_windows"], out["sections"]["invalid_answers"]) == (1, 3)  # asked 1 + 2 retries


def test_llm_titles_and_summaries_and_their_fallback(tmp_path: Path, server) -> None:  # noqa: F811
    server.script("What is the title", reply("Title: An Evening at the Palace"))
    server.script("Say in one short sentence what the document", reply("This document is about: a ball and a kitchen."))
    config = _config(server, sections={"strategy": "structural"}, context={"llm": True})
    run_ingest_and_segment([_write(tmp_path)], tmp_path / "c", config, use_prefect=False)
    corpus = Corpus(tmp_path / "c")
    ctx = corpus.read("doc_context").to_pylist()
    assert [(c["title"], c["title_source"], c["summary"]) for c in ctx] == [
        ("An Evening at the Palace", "llm", "This document is about: a ball and a kitchen.")]
    assert all(c["header"].startswith("Document context: the following excerpt is from a document titled 'An Evening at the "
                                      "Palace'. This document is about: a ball and a kitchen.") for c in corpus.read("chunks").to_pylist())


def test_failed_llm_calls_fall_back_to_the_offline_context(tmp_path: Path, server) -> None:  # noqa: F811
    # the endpoint fails: the offline title (file stem) and lead-sentence summary, the run goes on
    config = _config(server, sections={"strategy": "structural"}, context={"llm": True})
    server.script("What is the title", error(500))
    server.script("Say in one short sentence what the document", error(500))
    again = run_ingest_and_segment([_write(tmp_path / "b")], tmp_path / "c2", config, use_prefect=False)
    row = Corpus(tmp_path / "c2").read("doc_context").to_pylist()[0]
    assert (row["title"], row["title_source"]) == ("story", "fallback")
    assert row["summary"].startswith("This document is about: Line 0 about the royal ball")
    assert again["context"]["llm_failures"] == 2


def test_semantic_without_an_endpoint_is_a_config_error(tmp_path: Path) -> None:
    config = ArboragConfig().with_overrides(sections={"strategy": "semantic"})
    with pytest.raises(ConfigError, match="summarize.base_url"):
        run_ingest_and_segment([_write(tmp_path)], tmp_path / "c", config, use_prefect=False)
    assert not Corpus(tmp_path / "c").table_path("sections").exists()
