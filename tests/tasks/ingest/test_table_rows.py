"""Tables of HTML and DOCX files become rows that carry their column names
(tasks/ingest/formats_doc.py ``table_row_lines``)."""

from __future__ import annotations

import io
from pathlib import Path

from arborag.tasks.ingest.formats_doc import read_docx, read_html, table_row_lines
from arborag.tasks.ingest.records import SourceFile


def _src(name: str) -> SourceFile:
    return SourceFile(Path(name), f"file:///{name}")


def test_row_lines_carry_column_names_and_drop_empty_and_currency_cells() -> None:
    assert table_row_lines(["", "2023", "2023", "2022"], [["Net sales", "$", "3,226", "2,900"]]) == [
        "Net sales; 2023: 3,226; 2022: 2,900"]
    assert table_row_lines(None, [["Footwear", "", "1,200"]]) == ["Footwear | 1,200"]


def test_html_table_with_th_header_gives_self_describing_rows() -> None:
    html = (b"<html><body><h2>Voting results</h2><table><caption>Election of directors</caption>"
            b"<tr><th>Nominee</th><th>For</th><th>Against</th></tr>"
            b"<tr><td>Jane Doe</td><td>1,234</td><td>56</td></tr>"
            b"<tr><td>John Roe</td><td>999</td><td>12</td></tr></table></body></html>")
    text = read_html(_src("v.html"), html).text
    assert "Election of directors\nNominee: Jane Doe; For: 1,234; Against: 56\nNominee: John Roe; For: 999; Against: 12" in text


def test_html_financial_table_years_spanning_columns_name_the_figures() -> None:
    html = (b"<table><tr><td></td><td colspan=3>2023</td><td colspan=3>2022</td></tr>"
            b"<tr><td>Net sales</td><td>$</td><td>3,226</td><td></td><td>$</td><td>2,900</td><td></td></tr></table>")
    assert read_html(_src("f.html"), html).text.strip() == "Net sales; 2023: 3,226; 2022: 2,900"


def test_html_table_without_a_header_row_keeps_its_cells_and_layout_tables_are_left_alone() -> None:
    html = b"<table><tr><td>Address</td><td>Main Street 1.</td></tr><tr><td>City</td><td>Springfield</td></tr></table>"
    assert read_html(_src("n.html"), html).text.strip() == "Address | Main Street 1.\nCity | Springfield"
    nested = b"<table><tr><td><table><tr><th>A</th><th>B</th></tr><tr><td>x</td><td>1</td></tr></table></td></tr></table>"
    assert "A: x; B: 1" in read_html(_src("l.html"), nested).text  # the inner table is a table


def test_docx_table_first_row_of_names_is_its_header() -> None:
    from docx import Document

    doc = Document()
    doc.add_paragraph("Segment results")
    t = doc.add_table(rows=3, cols=3)
    for r, row in enumerate([["Segment", "Sales", "Margin"], ["Footwear", "1,200", "12%"], ["Apparel", "300", "9%"]]):
        for c, value in enumerate(row):
            t.cell(r, c).text = value
    buf = io.BytesIO()
    doc.save(buf)
    text = read_docx(_src("t.docx"), buf.getvalue()).text
    assert "Segment: Footwear; Sales: 1,200; Margin: 12%\nSegment: Apparel; Sales: 300; Margin: 9%" in text
