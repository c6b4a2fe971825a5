"""Text from bytes: whitespace normalization (what ``doc_id`` hashes), decoding, binary sniffing, titles."""

from __future__ import annotations

import codecs
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from arborag.errors import IngestError

__all__ = ["DecodedText", "decode_bytes", "decode_text", "good_title", "looks_binary", "normalize_text"]

_LINEBREAKS = {ord(c): "\n" for c in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}
# Invisible characters that only break hashing and matching: zero-width space, BOM / zero-width
# no-break space, soft hyphen, word joiner. (ZWJ/ZWNJ carry meaning in some scripts: kept.)
_DROP = {ord(c): None for c in "\u200b\ufeff\u00ad\u2060"}
# Other C0/C1 control characters (tab and newline are whitespace, handled below).
_DROP.update({c: None for c in range(0x00, 0x20) if c not in (0x09, 0x0A)})
_DROP.update({c: None for c in range(0x7F, 0xA0) if c != 0x85})
_HSPACE = re.compile(r"[^\S\n]+")
_BLANKS = re.compile(r"\n{3,}")


def normalize_text(text: str) -> str:
    """Normalize whitespace, keeping line breaks; the result is what ``doc_id`` hashes.

    Unicode NFC; every line-break convention becomes ``\\n``; control and zero-width characters
    go; runs of other whitespace (tabs, NBSP, ideographic space) become one space; lines are
    stripped; at most one blank line in a row; no leading/trailing blank lines. Idempotent.
    NFKC is deliberately not used: it would turn CJK full-width punctuation (``，``) into ASCII,
    which the segmenters treat as different delimiters.
    """
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n"))
    text = text.translate(_LINEBREAKS).translate(_DROP)
    text = _HSPACE.sub(" ", text)
    text = "\n".join(line.strip(" ") for line in text.split("\n"))
    return _BLANKS.sub("\n\n", text).strip("\n")


@dataclass(frozen=True, slots=True)
class DecodedText:
    """Decoded text, the encoding used, how many characters were replaced by U+FFFD, and whether
    the encoding is a guess (no byte order mark, no declared charset, not valid UTF-8)."""

    text: str
    encoding: str
    replaced: int
    guessed: bool = False


_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 12, 13, 27)) + b"\x7f"


def _bom(raw: bytes) -> tuple[str, int] | None:
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            return enc, len(bom)
    return None


def looks_binary(raw: bytes) -> bool:
    """True for bytes that are not text: NUL bytes or > 5% control bytes in the first 8 KiB.

    Text with a UTF-16/32 byte order mark is never binary (its NULs are part of the encoding).
    """
    if _bom(raw) is not None:
        return False
    sample = raw[:8192]
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return controls / len(sample) > 0.05


def decode_bytes(raw: bytes, *, declared: str | None = None) -> DecodedText:
    """Decode bytes to text; never raises. Invalid bytes become U+FFFD and are counted.

    Order: a byte order mark; ``declared`` (e.g. an HTML ``<meta charset>``) when Python knows
    it; strict UTF-8; UTF-8 with replacement when the bytes are mostly valid UTF-8 (real
    multi-byte sequences outnumber the invalid bytes: a UTF-8 file with a few corrupt bytes,
    not a legacy encoding); cp1252 when it reads as Western text and about as well as
    charset-normalizer's best guess (:func:`_western_1252`); that best guess; UTF-8 with
    replacement. After strict UTF-8, the result is marked ``guessed``.
    """
    bom = _bom(raw)
    if bom is not None:
        enc, skip = bom
        text = raw[skip:].decode(enc, errors="replace")
        return DecodedText(text, enc, text.count("\ufffd"))
    if declared:
        try:
            codec = codecs.lookup(declared).name
        except LookupError:
            codec = None
        if codec is not None:
            text = raw.decode(codec, errors="replace")
            return DecodedText(text, codec, text.count("\ufffd"))
    try:
        return DecodedText(raw.decode("utf-8"), "utf-8", 0)
    except UnicodeDecodeError:
        pass
    lenient = raw.decode("utf-8", errors="replace")
    replaced = lenient.count("\ufffd") - raw.count(b"\xef\xbf\xbd")
    multibyte_ok = sum(1 for ch in lenient if ord(ch) > 127 and ch != "\ufffd")
    if multibyte_ok > 0 and multibyte_ok >= replaced:
        return DecodedText(lenient, "utf-8", replaced, guessed=True)
    from charset_normalizer import from_bytes

    matches = list(from_bytes(raw))
    best = min(matches, key=lambda m: (m.chaos, -m.coherence)) if matches else None
    if best is not None:
        # Western text (Latin-1 / cp1252) reads as plausible text in many single-byte code pages
        # (cp1250 turns "naïve" into "naďve", cp775 "café" into "cafķ"), and the detector's
        # language coherence on a few accented words is noise. cp1252 wins when it reads as
        # cleanly as the best guess and every non-ASCII character it yields is a Western letter
        # or sign; text in another code page gives characters outside that set or reads worse.
        western = next((m for m in matches if m.encoding in ("cp1252", "windows-1252")), None)
        text_1252 = _western_1252(raw)
        if text_1252 is not None and western is not None and western.chaos <= best.chaos + _CHAOS_SLACK:
            return DecodedText(text_1252, "cp1252", 0, guessed=True)
        if text_1252 is not None and western is None and _decodes_as(raw, best.encoding) == text_1252:
            # the detector lists one of the code pages that read these bytes alike (cp1250 for
            # curly quotes and dashes): name the Western one
            return DecodedText(text_1252, "cp1252", 0, guessed=True)
        # Short Latin-1 text ties between code pages (cp1250 turns "très" into "trčs"); on a
        # tie, the most common Western one wins.
        if western is not None and (western.chaos, western.coherence) == (best.chaos, best.coherence):
            best = western
    if best is not None and best.encoding:
        try:
            text = raw.decode(best.encoding, errors="replace")
        except LookupError:  # a codec name Python does not know: fall through
            pass
        else:
            return DecodedText(text, codecs.lookup(best.encoding).name, text.count("\ufffd"), guessed=True)
    return DecodedText(lenient, "utf-8", replaced, guessed=True)


#: How much worse (charset-normalizer's "chaos", 0..1) cp1252 may read than the best guess and still win.
_CHAOS_SLACK = 0.02
# Western European letters of Latin-1 (no × ÷; no Ð ð Þ þ Ý ý, which Icelandic alone uses and
# Baltic code pages' common letters turn into) and cp1252's extra letters, plus signs and
# punctuation Western text uses.
_WESTERN_LETTERS = frozenset(chr(c) for c in range(0xC0, 0x100) if c not in (0xD0, 0xD7, 0xDD, 0xDE, 0xF0, 0xF7, 0xFD, 0xFE)) | set("ŠšŒœŽžŸ")
_WESTERN = _WESTERN_LETTERS | set("€‚„…†‡‰‹›‘’“”•–—™¡¢£¥§©«®°±·»¿\u00a0")
# a sign between two letters: in cp1252 a Central European letter shows as one (Polish "łódź" as "³ódŸ")
_SIGN_IN_WORD = re.compile(r"(?<=[^\W\d_])[^\w\s’‘'\-.,;:!?()\[\]\"/&](?=[^\W\d_])")


def _decodes_as(raw: bytes, encoding: str | None) -> str | None:
    try:
        return raw.decode(encoding or "", errors="replace")
    except LookupError:
        return None


def _western_1252(raw: bytes) -> str | None:
    """``raw`` as cp1252 when every byte is defined there and each non-ASCII character is a
    Western letter or sign, with some of them inside words of ASCII letters (café, naïve);
    else None."""
    try:
        text = raw.decode("cp1252")
    except UnicodeDecodeError:
        return None
    high = [ch for ch in text if ord(ch) > 127]
    if not high or any(ch not in _WESTERN for ch in high) or _SIGN_IN_WORD.search(text):
        return None
    # in Western text most accented letters sit in words that also hold ASCII letters; a word
    # made of high characters only is another script in a single-byte code page (Cyrillic, Greek)
    words = re.findall(r"[^\W\d_]+", text)
    accented = [w for w in words if any(ord(ch) > 127 for ch in w)]
    if accented and sum(any(ch.isascii() for ch in w) for w in accented) * 2 < len(accented):
        return None
    return text


def decode_text(raw: bytes, uri: str, *, declared: str | None = None) -> tuple[str, dict[str, Any], list[str]]:
    if looks_binary(raw):
        raise IngestError(uri, "binary file: not text (NUL or control bytes); convert it to a supported format")
    dec = decode_bytes(raw, declared=declared)
    meta: dict[str, Any] = {"encoding": dec.encoding}
    warnings: list[str] = []
    if dec.guessed:
        meta["encoding_guessed"] = True
    if dec.replaced:
        meta["replaced_chars"] = dec.replaced
        warnings.append(f"{dec.replaced} invalid byte sequence(s) replaced with U+FFFD (decoded as {dec.encoding})")
    elif dec.guessed:
        warnings.append(f"not valid UTF-8: the encoding was guessed as {dec.encoding}; if the text reads wrong, "
                        "save the file as UTF-8 (or declare its charset)")
    return dec.text, meta, warnings


def good_title(candidate: object) -> str | None:
    """A metadata title worth keeping: has words, is not a file name or a tool's placeholder."""
    if not isinstance(candidate, str):
        return None
    title = " ".join(candidate.split())
    if len(re.findall(r"[^\W\d_]", title)) < 3 or len(title) > 300:
        return None
    low = title.lower()
    if low.startswith(("microsoft word", "untitled")) or re.search(r"\.(docx?|pdf|txt|html?)$", low):
        return None
    return title
