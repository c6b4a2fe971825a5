"""Boilerplate shares learned from the corpus (``tasks/boilerplate.py``) and written by the links stage."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arborag.config import ArboragConfig
from arborag.storage.corpus import Corpus
from arborag.storage.schemas import BOILERPLATE, CHUNKS
from arborag.tasks.boilerplate import boilerplate_shares
from arborag.tasks.stage_context import StageContext
from arborag.tasks.stages.chunks import run_chunks
from arborag.tasks.stages.documents import run_documents
from arborag.tasks.stages.links import run_links

CERT = ("I certify that this quarterly report fully complies with the requirements of section 13 of the "
        "Securities Exchange Act of 1934 and fairly presents the financial condition of the company.")
UNIQUE = {
    "d1": "Revenue of the camera division rose to 412 million dollars on strong holiday demand in Ohio.",
    "d2": "The brewery opened a second plant near the river and hired two hundred new workers this spring.",
    "d3": "Our shipping subsidiary retired four old vessels and ordered three efficient container ships.",
    "d4": "The software unit signed a ten year licence with a regional hospital network last autumn.",
}


def _leaves(rows: list[tuple[str, str, str | None, str]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"chunk_id": c, "doc_id": d, "section_id": s, "ordinal": i, "start_char": 0, "end_char": len(t),
          "n_tokens": len(t.split()), "text": t, "header": None, "strategy": "sentence"} for i, (c, d, s, t) in enumerate(rows)],
        schema=CHUNKS)


def _shares(table: pa.Table) -> dict[str, float]:
    return dict(zip(table.column("node_id").to_pylist(), table.column("share").to_pylist(), strict=True))


def test_a_certification_in_three_documents_scores_high_and_a_unique_paragraph_zero() -> None:
    rows = [(f"{d}-cert", d, None, CERT) for d in ("d1", "d2", "d3")]
    rows += [(f"{d}-own", d, None, t) for d, t in UNIQUE.items()]
    out = boilerplate_shares(_leaves(rows))
    assert out.schema == BOILERPLATE and out.num_rows == len(rows)
    shares = _shares(out)
    assert all(shares[f"{d}-cert"] == 1.0 for d in ("d1", "d2", "d3"))
    assert all(shares[f"{d}-own"] == 0.0 for d in UNIQUE)


def test_a_certification_in_two_documents_only_is_not_boilerplate() -> None:
    rows = [(f"{d}-cert", d, None, CERT) for d in ("d1", "d2")] + [(f"{d}-own", d, None, t) for d, t in UNIQUE.items()]
    assert _shares(boilerplate_shares(_leaves(rows)))["d1-cert"] == 0.0


def test_page_furniture_on_every_page_of_one_document_scores_high() -> None:
    header = "Acme Holdings annual report for the fiscal year ended December 31 page {}"
    bodies = list(UNIQUE.values())
    rows = [(f"p{i}", "d1", f"page-{i}", header.format(i + 1) + " " + bodies[i]) for i in range(4)]
    rows += [("h", "d1", "page-1", header.format(9))]  # the furniture alone (page numbers read alike)
    rows += [("o", "d2", None, "A different filing with its own words about grain silos and rail freight.")]
    shares = _shares(boilerplate_shares(_leaves(rows)))
    assert shares["h"] == 1.0
    assert all(0.2 < shares[f"p{i}"] < 0.5 for i in range(4))  # its header part, not its body
    assert shares["o"] == 0.0


def test_no_leaves_and_short_leaves() -> None:
    assert boilerplate_shares(CHUNKS.empty_table()).num_rows == 0
    out = _shares(boilerplate_shares(_leaves([("x", "d1", None, "Too short."), ("y", "d2", None, "Also short.")])))
    assert out == {"x": 0.0, "y": 0.0}
    with pytest.raises(ValueError, match="shingle length"):
        boilerplate_shares(_leaves([]), n=0)


def test_the_links_stage_writes_the_shares_beside_the_links(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for d, text in UNIQUE.items():
        (src / f"{d}.txt").write_text(f"{text}\n\n{CERT}\n" if d != "d4" else text)  # d4: no certification
    ctx = StageContext(Corpus(tmp_path / "c").ensure(), ArboragConfig(), "run-b")
    run_documents(ctx, sorted(str(p) for p in src.iterdir()))
    run_chunks(ctx, "sentence")
    stats = run_links(ctx, "key-b")
    table = pq.read_table(ctx.staging_dir("key-b") / "boilerplate.parquet")
    assert table.schema.equals(BOILERPLATE, check_metadata=False)
    texts = dict(zip(ctx.corpus.read("chunks").column("chunk_id").to_pylist(), ctx.corpus.read("chunks").column("text").to_pylist(), strict=True))
    shares = _shares(table)
    cert = [s for n, s in shares.items() if "certify" in texts[n]]
    own = [s for n, s in shares.items() if "certify" not in texts[n] and "Securities" not in texts[n]]
    assert len(cert) == 3 and min(cert) > 0.5 and own and max(own) == 0.0
    assert stats["boilerplate_leaves"] == 3
