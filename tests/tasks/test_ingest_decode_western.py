"""Text that is not UTF-8: Western (Latin-1 / cp1252) bytes decode as cp1252, other code pages
stay recognised, and a guessed encoding is recorded on the document and shown by ``arborag ingest``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arborag.cli import app
from arborag.tasks.ingest.decode import decode_bytes, decode_text

WESTERN = [
    b"A na\xefve caf\xe9 costs 5 \x80 today.\n",  # Latin-1 letters and the cp1252 euro, as raw bytes
    "A naïve café, a résumé and a façade; it costs 5 € at the Brücke in Zürich.\n".encode("cp1252"),
    ("Plain English text, line after line.\n" * 20).encode() + "naïve café €5 déjà vu\n".encode("cp1252"),
    "Le cœur a ses raisons que la raison ne connaît point. À bientôt, ça va très bien.\n".encode("cp1252"),
    "Ein naïve Mädchen aß Käse für 5 € im Café.".encode("cp1252"),
    "He said “don’t” – twice… for 5 €".encode("cp1252"),
    "Øl og smørrebrød på Nørrebro, blåbær.".encode("cp1252"),
]


@pytest.mark.parametrize("raw", WESTERN)
def test_western_bytes_decode_as_cp1252(raw: bytes) -> None:
    dec = decode_bytes(raw)
    assert dec.encoding == "cp1252"
    assert dec.text == raw.decode("cp1252") and dec.replaced == 0
    assert dec.guessed


@pytest.mark.parametrize(("text", "encoding"), [
    ("Příliš žluťoučký kůň úpěl ďábelské ódy. Zažółć gęślą jaźń.\n", "cp1250"),
    ("Pchnąć w tę łódź jeża lub ośm skrzyń fig.", "cp1250"),
    ("Съешь же ещё этих мягких французских булок, да выпей чаю.\n", "cp1251"),
    ("Lietuvių kalba yra gražiausia pasaulyje, ačiū labai.", "cp1257"),
])
def test_other_code_pages_are_not_taken_for_cp1252(text: str, encoding: str) -> None:
    dec = decode_bytes(text.encode(encoding))
    assert dec.text == text and dec.guessed


def test_utf8_is_not_a_guess() -> None:
    dec = decode_bytes("naïve café €".encode())
    assert (dec.text, dec.encoding, dec.guessed) == ("naïve café €", "utf-8", False)
    _, meta, warnings = decode_text("naïve".encode(), "file:///x.txt")
    assert "encoding_guessed" not in meta and warnings == []


def test_a_guess_is_recorded_with_a_warning() -> None:
    text, meta, warnings = decode_text("A naïve café for 5 €.".encode("cp1252"), "file:///x.txt")
    assert text == "A naïve café for 5 €."
    assert meta == {"encoding": "cp1252", "encoding_guessed": True}
    assert len(warnings) == 1 and "guessed as cp1252" in warnings[0] and "UTF-8" in warnings[0]


def test_ingest_cli_shows_the_guess_and_keeps_the_text(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "latin.txt").write_bytes("Notes\n\nA naïve café, a résumé; 5 € each.\n".encode("cp1252"))
    (src / "plain.txt").write_bytes("Notes\n\nA naïve café in UTF-8.\n".encode())
    corpus = tmp_path / "corpus"
    result = CliRunner().invoke(app, ["ingest", str(src), "--corpus", str(corpus), "--no-prefect"])
    out = " ".join(result.output.split())
    assert "guessed as cp1252" in out and "latin.txt" in out
    assert "plain.txt" not in out  # no warning for the UTF-8 file
    rows = CliRunner().invoke(app, ["sql", "SELECT uri, text, error FROM documents ORDER BY uri", "--corpus", str(corpus),
                                    "--format", "json"])
    docs = json.loads(rows.output)
    latin = next(d for d in docs if d["uri"].endswith("latin.txt"))
    assert "naïve café, a résumé; 5 € each" in latin["text"]
    assert "guessed as cp1252" in (latin["error"] or "")
