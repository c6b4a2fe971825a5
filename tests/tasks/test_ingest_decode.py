"""tasks/ingest/decode.py: whitespace normalization, decoding, binary sniffing."""

from __future__ import annotations

from arborag.tasks.stages.documents import decode_bytes, looks_binary, normalize_text


def test_normalize_keeps_line_breaks_and_collapses_whitespace() -> None:
    raw = "  Title\r\n\r\n\r\n\r\nFirst\tline\u00a0with   spaces  \rsecond\u200b line\n\n\n"
    assert normalize_text(raw) == "Title\n\nFirst line with spaces\nsecond line"


def test_normalize_is_idempotent_and_keeps_cjk_punctuation() -> None:
    raw = "灰姑娘，参加了舞会。\u3000她 跑了！\r\n\r\n\r\nCafe\u0301  ok"
    once = normalize_text(raw)
    assert normalize_text(once) == once
    assert "，" in once and "。" in once and "！" in once
    assert "Café" in once  # NFC composed


def test_decode_utf8_with_invalid_bytes_replaces_and_counts() -> None:
    raw = "naïve café ".encode() + b"\xff\xfe" + " façade".encode()
    dec = decode_bytes(raw)
    assert dec.encoding == "utf-8"
    assert dec.replaced == 2
    assert "naïve café" in dec.text and "\ufffd" in dec.text


def test_decode_legacy_encoding_and_bom() -> None:
    text = "Le cœur a ses raisons que la raison ne connaît point. Ça, c'est l'été à Noël, très français."
    dec = decode_bytes(text.encode("cp1252"))
    assert dec.text == text and dec.replaced == 0
    utf16 = decode_bytes("hello wörld".encode("utf-16"))  # the codec writes a BOM
    assert utf16.text == "hello wörld" and utf16.encoding.startswith("utf-16")


def test_looks_binary() -> None:
    assert looks_binary(bytes(range(256)) * 4)
    assert not looks_binary("plain text\n".encode())
    assert not looks_binary("\ufeffwide".encode("utf-16"))
