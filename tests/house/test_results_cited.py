"""Every number has its artifact: what README.md and docs/ cite exists, and carries its provenance.

- Every relative link in README.md and docs/*.md resolves to a file or folder of the checkout
  (a results file that is cited but missing fails here).
- A measured number in README.md (seconds, ×, %, MB/s, req/s ...) sits in a paragraph, list item
  or table that links the results file it comes from.
- Every results file under ``benchmarks/results/`` that a page cites records the command, the
  date, the load average and the commit (a cited plot: the results report that shows it does) — except the files listed in ``INCOMPLETE``, written
  before that rule, whose missing fields are said in docs/BENCHMARKS.md. A new file cannot join
  that list silently: the list must match what is actually missing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RESULTS = REPO / "benchmarks" / "results"

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# a measured quantity: a number followed by a unit of time, speed, size or a ratio
_MEASURED = re.compile(r"\d(?:[\d,.]*\d)?\s?(?:×|x\b|ms\b|s\b|min\b|%|MB/s|GB|GiB|MiB|MB\b|req/s|texts/s|docs/s|tokens/s)")

#: results files older than the provenance rule -> the fields they lack (see docs/BENCHMARKS.md)
INCOMPLETE: dict[str, set[str]] = {
    "chunking.md": {"command", "commit"},
    "serve.md": {"command"},
    "sparse.md": {"command", "commit"},
    "update.json": {"command"},
}

_FIELDS = {
    "command": re.compile(r"command|python benchmarks/|arborag eval", re.I),
    "date": re.compile(r"20\d\d-\d\d-\d\d"),
    "load": re.compile(r"load", re.I),
    "commit": re.compile(r"commit", re.I),
}


#: plots in benchmarks/results/: a page may cite one; the report beside it (which shows it) carries the provenance
_IMAGES = {".png", ".svg"}


def _links(page: Path) -> list[str]:
    return [m.group(1) for m in _LINK.finditer(page.read_text(encoding="utf-8"))]


def _target(page: Path, link: str) -> Path | None:
    if re.match(r"^[a-z]+:", link) or link.startswith("#"):
        return None
    target = (page.parent / link.split("#", 1)[0]).resolve()
    return target if target.is_relative_to(REPO) else None  # a path outside the checkout: not part of a clone


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    missing = []
    for link in _links(page):
        target = _target(page, link)
        if target is not None and not target.exists():
            missing.append(link)
    assert not missing, f"{page.relative_to(REPO)} links to missing files: {missing}"


def _blocks(text: str) -> list[str]:
    """Paragraphs, list items and tables (a table is one block), code fences removed."""
    text = _FENCE.sub("", text)
    blocks: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        if para.lstrip().startswith("|"):
            blocks.append(para)
        else:
            blocks.extend(b for b in re.split(r"\n(?=- )", para) if b.strip())
    return blocks


def test_readme_numbers_link_their_results_file() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    bare = [b.strip()[:120] for b in _blocks(text) if _MEASURED.search(b) and "benchmarks/results/" not in b]
    assert not bare, f"README.md states measured numbers without linking their results file: {bare}"


def _cited_results() -> set[str]:
    cited = set()
    for page in PAGES:
        for link in _links(page):
            target = _target(page, link)
            if target is not None and target.parent == RESULTS.resolve():
                cited.add(target.name)
    return cited


def test_cited_results_files_exist_and_say_where_they_come_from() -> None:
    cited = _cited_results()
    assert cited, "no page cites a results file"
    for name in sorted(cited):
        path = RESULTS / name
        assert path.is_file(), f"{name} is cited but missing"
        if path.suffix in _IMAGES:  # a plot: its provenance is the report that shows it
            reports = [r for r in sorted(RESULTS.glob("*.md")) if f"]({name})" in r.read_text(encoding="utf-8")]
            assert reports, f"{name} is cited but no results report in benchmarks/results/ shows it"
            path = reports[0]
        text = path.read_text(encoding="utf-8")
        lacking = {field for field, rx in _FIELDS.items() if not rx.search(text)}
        assert lacking == INCOMPLETE.get(name, set()), (
            f"{name}: lacks {sorted(lacking) or 'nothing'}; expected {sorted(INCOMPLETE.get(name, set())) or 'nothing'} "
            "(a results file records command, date, load average and commit; update INCOMPLETE only when a file improves)")


def test_the_incomplete_list_is_stated_in_the_docs() -> None:
    doc = (REPO / "docs" / "BENCHMARKS.md").read_text(encoding="utf-8")
    for name in INCOMPLETE:
        assert name in doc, f"docs/BENCHMARKS.md does not say what {name} lacks"
