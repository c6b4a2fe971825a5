"""PDF text extractors side by side: split and glued words per 1,000 words, and time per page.

Not a test. Run from the repo root::

    python benchmarks/pdf_extractors.py            # every FinanceBench PDF; writes
                                                   # benchmarks/results/pdf_extractors.md
    python benchmarks/pdf_extractors.py --smoke --out /tmp/pdf_extractors.md   # first 2 pages of one PDF

Extractors: pypdf (``PdfReader.pages[i].extract_text()``), pypdfium2 (``PdfPage.get_textpage()
.get_text_range()``) and pdfminer.six (``high_level.extract_text``, pages cut at form feeds); an
extractor that is not installed is listed as missing. Every output goes through the reader's
:func:`~arborag.tasks.ingest.decode.normalize_text`, as ingest does.

Metric (tasks/ingest/garble.py): words are runs of ASCII letters. A *split word* is two words
on one line, not both known, whose concatenation is known ("tota l"); a *glued word* is an
unknown word of 8+ letters made of two known words of 3+ letters ("membershipsaccounted"). The
word list is the embedder's WordPiece vocabulary (whole words) plus, per PDF, every word that
all available extractors produce for it (a word all of them agree on is what the file says,
e.g. "Ulta"): no outside data. Rates are per 1,000 words of that extractor's output. The page
columns score each page as ingest does (it has one extractor's output only): the vocabulary
plus the document's recurring words, the worst page's split + glued words per 1,000, and the
pages over the flagging threshold.

Lines: the non-blank lines of the output, and those with no letter or digit (a "$" or a "-"
torn off its number: pypdf puts "512", "-" and "2921" of one phone number on three lines, and
many table cells' "$" on a line of their own).

Time: wall clock of one file's whole extraction (open, every page), best of ``--repeat``,
divided by its pages. The 2 cores are shared, so the load is printed with the results.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks._common import DATA, RESULTS, machine_line, md_table, run_header, setup_env  # noqa: E402

setup_env()

from arborag.tasks.ingest.decode import normalize_text  # noqa: E402
from arborag.tasks.ingest.garble import (  # noqa: E402
    GARBLE_THRESHOLD,
    PAGE_MIN_DAMAGED,
    PAGE_MIN_WORDS,
    default_lexicon,
    document_lexicon,
    garble_counts,
    garbled_pages,
    words_of,
)


def pypdf_pages(raw: bytes, limit: int | None) -> list[str]:
    from pypdf import PdfReader

    pages = PdfReader(io.BytesIO(raw)).pages
    n = len(pages) if limit is None else min(limit, len(pages))
    return [pages[i].extract_text() or "" for i in range(n)]


def pdfium_pages(raw: bytes, limit: int | None) -> list[str]:
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument(raw)
    try:
        n = len(pdf) if limit is None else min(limit, len(pdf))
        return [pdf[i].get_textpage().get_text_range() for i in range(n)]
    finally:
        pdf.close()


def pdfminer_pages(raw: bytes, limit: int | None) -> list[str]:
    from pdfminer.high_level import extract_text

    text = extract_text(io.BytesIO(raw), maxpages=limit or 0)
    pages = text.split("\f")
    return pages[:-1] if pages and not pages[-1].strip() else pages


EXTRACTORS: dict[str, tuple[str, Callable[[bytes, int | None], list[str]]]] = {
    "pypdf": ("pypdf", pypdf_pages),
    "pypdfium2": ("pypdfium2", pdfium_pages),
    "pdfminer.six": ("pdfminer", pdfminer_pages),
}


def available() -> list[str]:
    import importlib.util

    return [name for name, (module, _) in EXTRACTORS.items() if importlib.util.find_spec(module) is not None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="one PDF, its first 2 pages, one repeat")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS / "pdf_extractors.md")
    args = ap.parse_args()
    started = time.perf_counter()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine_start = machine_line()
    pdfs = sorted((DATA / "financebench" / "pdfs").glob("*.pdf"))
    if not pdfs:
        raise SystemExit(f"no PDFs under {DATA / 'financebench' / 'pdfs'}: set ARBORAG_DATA_DIR to the evaluation data folder")
    limit = 2 if args.smoke else None
    repeat = 1 if args.smoke else max(1, args.repeat)
    if args.smoke:
        pdfs = pdfs[:1]
    names = available()
    vocab = default_lexicon()
    rows = []
    totals: dict[str, list[float]] = {n: [0, 0, 0, 0.0, 0, 0, 0] for n in names}  # words, split, glued, seconds, pages, lines, bare lines
    for pdf in pdfs:
        raw = pdf.read_bytes()
        out: dict[str, list[str]] = {}
        secs: dict[str, float] = {}
        for name in names:
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                pages = EXTRACTORS[name][1](raw, limit)
                best = min(best, time.perf_counter() - t0)
            out[name] = [normalize_text(p) for p in pages]
            secs[name] = best
        common = set.intersection(*({w.lower() for w in words_of("\n".join(p))} for p in out.values()))
        lex = vocab.extended(common)
        for name in names:
            g = garble_counts("\n\n".join(out[name]), lex)
            doc_lex = document_lexicon(out[name], vocab)
            scored = [c for c in (garble_counts(p, doc_lex) for p in out[name]) if c.words >= PAGE_MIN_WORDS and c.split + c.glued >= PAGE_MIN_DAMAGED]
            worst = max((c.score for c in scored), default=0.0)
            flagged = len(garbled_pages(out[name], vocab))
            lines = [ln for p in out[name] for ln in p.split("\n") if ln.strip()]
            bare = sum(1 for ln in lines if not any(c.isalnum() for c in ln))
            n_pages = len(out[name])
            rows.append([pdf.name, name, n_pages, g.words, f"{g.split_rate:.2f}", f"{g.glued_rate:.2f}", f"{worst:.1f}", flagged, len(lines), bare,
                         f"{1000 * secs[name] / max(1, n_pages):.1f}"])
            t = totals[name]
            t[0] += g.words
            t[1] += g.split
            t[2] += g.glued
            t[3] += secs[name]
            t[4] += n_pages
            t[5] += len(lines)
            t[6] += bare
            print(" | ".join(str(c) for c in rows[-1]), flush=True)
    summary = [[name, int(t[4]), int(t[0]), f"{1000 * t[1] / max(1, t[0]):.2f}", f"{1000 * t[2] / max(1, t[0]):.2f}",
                int(t[5]), int(t[6]), f"{1000 * t[3] / max(1, t[4]):.1f}"] for name, t in totals.items()]
    missing = [n for n in EXTRACTORS if n not in names]
    lines = run_header("PDF text extractors: split and glued words, time per page", date=date, machine_start=machine_start, started=started)
    lines += [
        "",
        "Words: runs of ASCII letters. Split: two words on one line, not both known, whose join is known (\"tota l\").",
        "Glued: an unknown word of 8+ letters made of two known words of 3+ letters. Known: the WordPiece vocabulary's",
        "whole words (one inflection ending dropped) plus every word all extractors produce for that PDF.",
        "Lines: non-blank lines of the output; no letter/digit: those without a letter or digit (a \"$\" torn off its number).",
        "Rates per 1,000 words. Worst page: the highest per-page split+glued per 1,000 words as ingest scores a page",
        f"(the vocabulary plus the document's recurring 8+ letter words; pages of {PAGE_MIN_WORDS}+ words and {PAGE_MIN_DAMAGED}+ split or glued words);",
        f"flagged: pages over the threshold ({GARBLE_THRESHOLD:g}); ms/page: one file's extraction, best of {repeat}, over its pages.",
        "",
        "## All PDFs",
        "",
        md_table(["extractor", "pages", "words", "split /1k", "glued /1k", "lines", "no letter/digit", "ms/page"], summary),
        "",
        "## Per PDF",
        "",
        md_table(["PDF", "extractor", "pages", "words", "split /1k", "glued /1k", "worst page", "flagged", "lines", "no letter/digit", "ms/page"], rows),
    ]
    if missing:
        lines += ["", f"Not installed, not measured: {', '.join(missing)}."]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
