"""The semantic sectioner (docs/METHODS.md §3) with ``ScriptedFakeLLM``, a fake completion function that
returns crafted answers in order (or raises), one test per repair rule."""

from __future__ import annotations

import json
import re

import pytest

from arborag.errors import LLMError
from arborag.tasks.segment.sections import DocInput, build_sections
from arborag.tasks.segment.semantic import (
    Complete,
    LLMSection,
    SemanticSectioner,
    WindowSection,
    collapse_small,
    display_lines,
    merge_across_windows,
    parse_sections,
    repair_window,
    window_ranges,
)
from helpers.llm import ScriptedFakeLLM


def _js(*secs: tuple[str, int, int]) -> str:
    return json.dumps({"sections": [{"title": t, "start": a, "end": b} for t, a, b in secs]})


def S(title: str, start: int, end: int | None = None) -> LLMSection:
    return LLMSection(title=title, start=start, end=end)


def W(secs: list[WindowSection]) -> list[tuple[str, int, int]]:
    return [(s.title, s.start, s.end) for s in secs]


def test_long_lines_are_split_at_words_and_spans_tile_the_text() -> None:
    long = " ".join(f"w{i:03d}" for i in range(100))  # 499 chars
    text = f"short\n{long}\n\nend"
    lines = display_lines(text, 200)
    assert [len(ln.text) <= 200 for ln in lines] == [True] * len(lines)
    assert len(lines) == 1 + 3 + 1 + 1  # 499 chars -> 3 pieces of <= 200 (cut at spaces)
    assert lines[1].text.startswith("w000") and lines[2].text.startswith("w040")
    assert lines[0].start_char == 0 and lines[-1].end_char == len(text)
    assert all(a.end_char == b.start_char for a, b in zip(lines, lines[1:]))
    assert " ".join(ln.text for ln in lines[1:4]) == long


def test_windows_hold_at_most_window_chars_of_numbered_lines() -> None:
    text = "\n".join(f"line number {i} " + "x" * 30 for i in range(40))
    lines = display_lines(text)
    wins = window_ranges(lines, 500)
    assert wins[0][0] == 0 and wins[-1][1] == 39
    assert all(b[0] == a[1] + 1 for a, b in zip(wins, wins[1:]))
    for a, b in wins:
        assert len("".join(f"[{i}] {lines[i].text}\n" for i in range(a, b + 1))) <= 500


def test_parse_accepts_fenced_json_and_bare_lists_and_rejects_the_rest() -> None:
    fenced = "Here you go:\n```json\n" + _js(("Intro", 0, 3)) + "\n```"
    assert [(s.title, s.start, s.end) for s in parse_sections(fenced)] == [("Intro", 0, 3)]
    assert parse_sections('[{"title": "A", "start": 2}]')[0].end is None
    for bad in ["no json at all", '{"sections": []}', '{"sections": [{"start": 1}]}', '{"sections": [{"title": "A", "start": "x"}]}', "{oops}"]:
        with pytest.raises(ValueError):
            parse_sections(bad)


def test_repair_sorts_sections() -> None:
    got = repair_window([S("B", 5, 9), S("A", 0, 4)], 0, 9)
    assert W(got) == [("A", 0, 4), ("B", 5, 9)]


def test_repair_drops_duplicate_starts_keeping_the_first() -> None:
    got = repair_window([S("A", 0, 4), S("A again", 0, 6), S("B", 5, 9)], 0, 9)
    assert W(got) == [("A", 0, 4), ("B", 5, 9)]


def test_repair_clamps_to_the_window() -> None:
    # window 10..19: a start before the window clamps to 10, one after it to 19; the section
    # that clamping moves onto another's start (25 -> 19 twice) is dropped
    got = repair_window([S("early", 3, 12), S("mid", 14, 30), S("late", 25, 40), S("later", 27, 41)], 10, 19)
    assert W(got) == [("early", 10, 13), ("mid", 14, 18), ("late", 19, 19)]


def test_repair_forces_full_coverage_without_gaps_or_overlaps() -> None:
    # first starts late (gap before it), a gap 4..5, an overlap (end 12 > next start 9), last ends early
    got = repair_window([S("A", 2, 3), S("B", 6, 12), S("C", 9, 10)], 0, 14)
    assert W(got) == [("A", 0, 5), ("B", 6, 8), ("C", 9, 14)]


def test_a_window_averaging_under_500_chars_per_section_collapses() -> None:
    text = "\n".join(["a" * 100] * 10)  # 10 lines, 1,000 chars
    lines = display_lines(text)
    three = [WindowSection("one", 0, 2), WindowSection("two", 3, 5), WindowSection("three", 6, 9)]
    assert collapse_small(three, lines, 500) == ([WindowSection("one", 0, 9)], True)  # 333 < 500
    two = three[:1] + [WindowSection("two", 3, 9)]
    assert collapse_small(two, lines, 500) == (two, False)  # 500 >= 500


def test_trailing_section_merges_with_the_next_windows_first() -> None:
    w1 = [WindowSection("A", 0, 4), WindowSection("B", 5, 9)]
    w2 = [WindowSection("B cont.", 10, 12), WindowSection("C", 13, 19)]
    w3 = [WindowSection("D", 20, 25)]
    assert W(merge_across_windows([w1, w2, w3])) == [("A", 0, 4), ("B", 5, 12), ("C", 13, 25)]


def _doc(n_lines: int = 12, width: int = 150) -> str:
    return "\n".join(f"{i:02d} " + "lorem ipsum " * (width // 12) for i in range(n_lines))


def test_failed_window_becomes_one_section_titled_by_its_line_range() -> None:
    text = _doc()
    fake = ScriptedFakeLLM(LLMError("fake-model", "HTTP 500 after 3 retries"))
    assert isinstance(fake, Complete)
    sectioner = SemanticSectioner(fake, min_avg_chars=1)
    secs = sectioner(DocInput("d", text))
    assert [(s.title, s.start_line, s.end_line) for s in secs] == [("Lines 0–11", 0, 11)]
    assert sectioner.stats.failed_windows == 1 and len(fake.prompts) == 1  # transport errors: no re-ask


def test_invalid_answers_are_asked_again_then_fall_back() -> None:
    text = _doc()
    ok = ScriptedFakeLLM("not json", _js(("First", 0, 5), ("Second", 6, 11)))
    secs = SemanticSectioner(ok, retries=2, min_avg_chars=1)(DocInput("d", text))
    assert [(s.title, s.start_line, s.end_line) for s in secs] == [("First", 0, 5), ("Second", 6, 11)]
    bad = ScriptedFakeLLM("nope", '{"sections": []}', "[oops]")
    sectioner = SemanticSectioner(bad, retries=2, min_avg_chars=1)
    assert [s.title for s in sectioner(DocInput("d", text))] == ["Lines 0–11"]
    assert sectioner.stats.invalid_answers == 3 and sectioner.stats.failed_windows == 1


def test_end_to_end_two_windows_with_every_repair() -> None:
    text = _doc(12, 150)  # 12 lines of ~147 chars
    lines = display_lines(text)
    wins = window_ranges(lines, 1000)
    assert wins == [(0, 5), (6, 11)]
    fake = ScriptedFakeLLM(
        # window 0..5: unsorted, a duplicate start, an overlap -> Intro 0..2, Body 3..5
        _js(("Body", 3, 5), ("Intro", 0, 3), ("Intro dup", 0, 1)),
        # window 6..11: a start past the window clamps to 11; Body continues 6..8
        _js(("Body continued", 6, 8), ("Results", 9, 10), ("Tail", 40, 50)),
    )
    sectioner = SemanticSectioner(fake, window_chars=1000, min_avg_chars=100)
    secs = sectioner(DocInput("d", text))
    # Body (3..5) merges with Body continued (6..8) across the window border
    assert [(s.title, s.start_line, s.end_line) for s in secs] == [
        ("Intro", 0, 2), ("Body", 3, 8), ("Results", 9, 10), ("Tail", 11, 11)
    ]
    assert "".join(text[s.start_char : s.end_char] for s in secs) == text
    assert re.search(r"^\[6\] 06 lorem", fake.prompts[1], flags=re.MULTILINE)
    table = build_sections([DocInput("d", text)], strategy="semantic",
                           sectioner=SemanticSectioner(ScriptedFakeLLM(_js(("All", 0, 11))), min_avg_chars=1))
    assert table.column("title").to_pylist() == ["All"] and table.column("strategy").to_pylist() == ["semantic"]


def test_sections_split_inside_a_long_line_keep_exact_offsets() -> None:
    long = " ".join(f"w{i:03d}" for i in range(100))  # one 499-char line -> display lines 1, 2, 3
    text = f"title\n{long}\ntail"
    fake = ScriptedFakeLLM(_js(("Head", 0, 1), ("Middle", 2, 4)))
    secs = SemanticSectioner(fake, min_avg_chars=1)(DocInput("d", text))
    assert [(s.title, s.start_line, s.end_line) for s in secs] == [("Head", 0, 1), ("Middle", 1, 2)]
    assert text[secs[1].start_char :].startswith("w040") and secs[0].end_char == secs[1].start_char
