"""Hostile input: >= 25 bad or odd files, one symlink out of the root, and good files beside them.

``arborag ingest --segment`` must index every good document with the right text, record every
bad one with a reason, exit with 3, say what it skipped, not leave the root it was given, and
change nothing when run again. ``arborag build --dry-run`` prints the cost before spending.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.reliability import Expect, cli, cli_env, make_hostile_corpus, read_documents

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

EXIT_PARTIAL = 3


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("hostile")
    src, outside, corpus = base / "src", base / "outside", base / "corpus"
    expect = make_hostile_corpus(src, outside)
    first = cli("ingest", str(src), "--corpus", str(corpus), "--segment", "--no-prefect", env=cli_env(), timeout=600)
    tables = {name: (corpus / "tables" / f"{name}.parquet").read_bytes() for name in ("documents", "chunks")}
    return {"src": src, "outside": outside, "corpus": corpus, "expect": expect, "first": first, "tables": tables}


def _rows_by_uri(corpus: Path, src: Path) -> dict[str, dict]:
    root = os.path.abspath(src)
    out = {}
    for row in read_documents(corpus):
        uri = row["uri"]
        out[os.path.relpath(uri, root) if uri.startswith(root + os.sep) else uri] = row
    return out


def test_hostile_corpus_counts(hostile) -> None:
    expect = hostile["expect"]
    odd = [k for k, e in expect.items() if not (e.kind == "ok" and k.startswith(("good", "x.txt")))]
    assert len(odd) >= 25, f"only {len(odd)} bad or odd entries"
    first = hostile["first"]
    assert "Traceback" not in first.output, first.output[-3000:]
    assert first.returncode == EXIT_PARTIAL, first.output[-3000:]


@pytest.mark.parametrize("kind", ["ok", "error", "recorded", "absent"])
def test_hostile_corpus_rows(hostile, kind: str) -> None:
    rows = _rows_by_uri(hostile["corpus"], hostile["src"])
    problems = []
    for name, exp in hostile["expect"].items():
        if exp.kind != kind:
            continue
        row = rows.get(name)
        problems += _check(name, exp, row)
    assert not problems, "\n".join(problems)


def _check(name: str, exp: Expect, row: dict | None) -> list[str]:
    if exp.kind == "absent":
        return [] if row is None else [f"{name!r}: must not be ingested, got status={row['status']} text={str(row['text'])[:60]!r}"]
    if exp.kind == "recorded" and row is None:
        return []  # e.g. a link inside the root whose content is another file's document
    if row is None:
        return [f"{name!r}: no row in the documents table"]
    if row["status"] == "ok":
        if exp.kind == "error":
            return [f"{name!r}: expected an error row ({exp.reasons}), got a document {str(row['text'])[:60]!r}"]
        missing = [n for n in exp.needles if n not in (row["text"] or "")]
        return [f"{name!r}: text lacks {missing!r}: {str(row['text'])[:80]!r}"] if missing else []
    if exp.kind == "ok":
        return [f"{name!r}: expected a document, got error {row['error']!r}"]
    reason = row["error"] or ""
    if not reason.strip():
        return [f"{name!r}: error row without a reason"]
    if exp.reasons and not any(r.lower() in reason.lower() for r in exp.reasons):
        return [f"{name!r}: reason {reason!r} mentions none of {exp.reasons}"]
    return []


def test_hostile_run_says_what_it_skipped(hostile) -> None:
    out = hostile["first"].output
    assert "escape.txt" in out and "outside" in out, out[-3000:]
    for bad in ("encrypted.pdf", "fifo.txt", "huge_line.txt", "loop_a.txt"):
        assert bad in out, f"{bad} not reported:\n{out[-3000:]}"


def test_hostile_rerun_changes_nothing(hostile) -> None:
    again = cli("ingest", str(hostile["src"]), "--corpus", str(hostile["corpus"]), "--segment", "--no-prefect", env=cli_env())
    assert again.returncode == EXIT_PARTIAL, again.output[-3000:]
    assert "Traceback" not in again.output
    for name, before in hostile["tables"].items():
        assert (hostile["corpus"] / "tables" / f"{name}.parquet").read_bytes() == before, f"{name}.parquet changed on rerun"


def test_dry_run_shows_cost_before_spending(hostile) -> None:
    corpus = hostile["corpus"]
    dry = cli("build", "--corpus", str(corpus), "--dry-run", "--no-prefect", env=cli_env())
    assert dry.returncode == 0, dry.output[-3000:]
    assert "input tokens" in dry.stdout and "price" in dry.stdout, dry.stdout
    assert not (corpus / "manifest.json").exists()
    assert not any((corpus / "cache").glob("embeddings/*.parquet")), "a dry run embedded texts"


def test_external_symlink_only_with_flag(tmp_path) -> None:
    src, outside = tmp_path / "src", tmp_path / "outside"
    src.mkdir()
    outside.mkdir()
    (src / "inside.txt").write_text("Words inside the root.\n", encoding="utf-8")
    (outside / "target.txt").write_text("Words beyond the root.\n", encoding="utf-8")
    os.symlink(outside / "target.txt", src / "link.txt")
    os.symlink(outside, src / "linkdir")
    plain = cli("ingest", str(src), "--corpus", str(tmp_path / "c1"), "--no-prefect", env=cli_env())
    assert plain.returncode in (0, EXIT_PARTIAL) and "Traceback" not in plain.output, plain.output
    texts = [r["text"] for r in read_documents(tmp_path / "c1") if r["status"] == "ok"]
    assert texts == ["Words inside the root."], texts
    assert "link.txt" in plain.output and "linkdir" in plain.output and "--follow-external-symlinks" in plain.output, plain.output
    follow = cli("ingest", str(src), "--corpus", str(tmp_path / "c2"), "--no-prefect", "--follow-external-symlinks", env=cli_env())
    assert follow.returncode == 0, follow.output
    texts = sorted(r["text"] for r in read_documents(tmp_path / "c2") if r["status"] == "ok")
    assert texts == ["Words beyond the root.", "Words inside the root."], texts


def test_file_vanishing_between_discovery_and_read(tmp_path, monkeypatch) -> None:
    """Deterministic: the discovery step is wrapped so the file is deleted right after it is found."""
    from arborag.config import IngestConfig
    from arborag.tasks.stages.documents import build_documents

    (tmp_path / "stays.txt").write_text("This file stays put.\n", encoding="utf-8")
    (tmp_path / "vanishes.txt").write_text("This file is gone before it is read.\n", encoding="utf-8")
    globs = build_documents.__globals__
    discover = globs["discover_sources"]

    def discover_then_delete(*args, **kwargs):
        found = discover(*args, **kwargs)
        (tmp_path / "vanishes.txt").unlink()
        return found

    monkeypatch.setitem(globs, "discover_sources", discover_then_delete)
    table, report = build_documents([tmp_path], IngestConfig())
    rows = {Path(r["uri"]).name: r for r in table.to_pylist()}
    assert rows["stays.txt"]["status"] == "ok"
    assert rows["vanishes.txt"]["status"] == "error"
    assert "no such file" in rows["vanishes.txt"]["error"].lower() or "cannot" in rows["vanishes.txt"]["error"].lower()
    assert [f.uri for f in report.failed] == [str(tmp_path / "vanishes.txt")]


@pytest.mark.parametrize("oversize", ["error", "truncate"])
def test_size_limits_chars_and_tokens(tmp_path, oversize: str) -> None:
    from arborag.config import IngestConfig
    from arborag.tasks.stages.documents import build_documents

    (tmp_path / "long.md").write_text("word " * 3000, encoding="utf-8")  # 15k chars, 3k tokens
    (tmp_path / "many_tokens.txt").write_text("a-b-c-d " * 500, encoding="utf-8")  # 4k chars, 3.5k tokens
    (tmp_path / "short.txt").write_text("Short and fine.\n", encoding="utf-8")
    (tmp_path / "recs.jsonl").write_text('{"text": "' + "z " * 6000 + '"}\n{"text": "small record"}\n', encoding="utf-8")
    cfg = IngestConfig(max_chars=10_000, max_tokens=2_000, oversize=oversize)
    table, report = build_documents([tmp_path], cfg)
    rows = {Path(r["uri"]).name: r for r in table.to_pylist()}
    assert rows["short.txt"]["status"] == "ok" and rows["recs.jsonl#L2"]["status"] == "ok"
    if oversize == "error":
        assert "ingest.max_chars=10,000" in rows["long.md"]["error"] and rows["long.md"]["status"] == "error"
        assert "ingest.max_tokens=2,000" in rows["many_tokens.txt"]["error"]
        assert "ingest.max_chars" in rows["recs.jsonl#L1"]["error"]
        assert len(report.failed) == 3
    else:
        from arborag.tokenizer import get_tokenizer

        for name in ("long.md", "many_tokens.txt", "recs.jsonl#L1"):
            row = rows[name]
            assert row["status"] == "ok" and "truncated to ingest.max_" in row["error"], row
            assert len(row["text"]) <= 10_000 and get_tokenizer().count(row["text"]) <= 2_000


def test_huge_text_file_refused_before_reading(tmp_path) -> None:
    from arborag.config import IngestConfig
    from arborag.tasks.stages.documents import build_documents

    with open(tmp_path / "big.txt", "wb") as fh:
        fh.truncate(41 * 1024 * 1024)  # sparse: 41 MB of NULs that are never read
    table, _ = build_documents([tmp_path], IngestConfig(max_chars=10_000_000))
    row = table.to_pylist()[0]
    assert row["status"] == "error" and "too large" in row["error"] and "ingest.max_chars" in row["error"], row
