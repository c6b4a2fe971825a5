"""The ``semantic`` sectioner (dsRAG semantic sectioning, docs/METHODS.md §3) over any completion function.

1. **Display lines.** The text's lines; a line longer than ``max_line_chars`` (**200**) is split
   at word boundaries (hard cut for a longer word). Every display line keeps its character span,
   so sections map back to exact offsets of the document text.
2. **Windows.** Consecutive display lines shown as ``[i] text`` (global numbering) in windows of
   at most ``window_chars`` (**18,000**) characters of prompt text.
3. **The call.** The LLM answers JSON ``{"sections": [{"title", "start", "end"}, ...]}``,
   validated with pydantic; an answer that does not validate is asked again up to ``retries``
   times. A window whose call still fails (an arborag error or no valid answer) becomes **one
   section titled by its line range** (``"Lines a–b"``).
4. **Repair**, per window ``[w0, w1]`` (:func:`repair_window`): sort by start; drop duplicate
   starts (the first kept); clamp starts into the window (dropping starts that clamping makes
   duplicate); force full coverage with no gaps or overlaps — the first section starts at
   ``w0``, each section ends just before the next one starts, the last ends at ``w1`` (the
   model's ``end`` values are therefore only advisory).
5. **Collapse**: a window whose sections average fewer than ``min_avg_chars`` (**500**)
   characters becomes one section (the first title).
6. **Merge across windows**: each window's trailing section and the next window's first
   section become one section (the trailing one's title), since a window border is rarely a
   topic border.

Rows come out as :class:`~arborag.tasks.segment.sections.Section`; ``start_line``/``end_line`` are the
document lines holding the section's first and last character (a split long line can be shared
by two sections; ``start_char``/``end_char`` are exact and tile the text).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field, ValidationError

from arborag.errors import ArboragError
from arborag.tasks.segment.sections import DocInput, Section, line_starts, short_title

__all__ = [
    "PROMPT",
    "PROMPT_VERSION",
    "Complete",
    "DisplayLine",
    "LLMSection",
    "LLMSections",
    "SemanticSectioner",
    "SemanticStats",
    "WindowSection",
    "collapse_small",
    "display_lines",
    "merge_across_windows",
    "parse_sections",
    "repair_window",
    "window_ranges",
]

PROMPT_VERSION = "semantic-sections-v1"
PROMPT = """Split the document excerpt below into sections, each about a single concept or topic. \
Match the document's natural sections where possible; a section is usually a few paragraphs to \
a few pages long. Each line starts with its line number in square brackets. The first section \
must start at line {first}, the last must end at line {last}, and the sections must cover every \
line in order. Give every section a descriptive title in the document's language.

Answer with JSON only, in this form:
{{"sections": [{{"title": "...", "start": {first}, "end": ...}}, ...]}}

Document excerpt:
{lines}"""


@runtime_checkable
class Complete(Protocol):
    """One prompt in, the model's text out; raises an ``ArboragError`` (e.g. ``LLMError``) on failure."""

    def __call__(self, prompt: str, /, *, max_tokens: int) -> str: ...


class LLMSection(BaseModel):
    title: str = Field(min_length=1, description="descriptive title of the section")
    start: int = Field(description="first line number (inclusive)")
    end: int | None = Field(None, description="last line number (inclusive); advisory")


class LLMSections(BaseModel):
    sections: list[LLMSection] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class DisplayLine:
    text: str
    start_char: int  # span in the document text; consecutive display lines tile it
    end_char: int


@dataclass(frozen=True, slots=True)
class WindowSection:
    title: str
    start: int  # display line numbers, inclusive
    end: int


@dataclass
class SemanticStats:
    calls: int = 0
    invalid_answers: int = 0
    failed_windows: int = 0
    collapsed_windows: int = 0
    windows: int = 0
    failures: list[str] = field(default_factory=list)


# -- lines and windows ------------------------------------------------------------------------
def _split_long(line: str, limit: int) -> list[int]:
    """Cut points (relative starts) of ``line`` into pieces of at most ``limit`` chars, at spaces."""
    cuts, pos = [0], 0
    while len(line) - pos > limit:
        space = line.rfind(" ", pos + 1, pos + limit + 1)
        pos = space + 1 if space > pos else pos + limit
        cuts.append(pos)
    return cuts


def display_lines(text: str, max_line_chars: int = 200) -> list[DisplayLine]:
    out: list[DisplayLine] = []
    starts = line_starts(text)
    for k, line in enumerate(text.split("\n")):
        base = starts[k]
        line_end = starts[k + 1] if k + 1 < len(starts) else len(text)  # includes the newline
        cuts = _split_long(line, max_line_chars)
        for j, c in enumerate(cuts):
            end = base + cuts[j + 1] if j + 1 < len(cuts) else line_end
            out.append(DisplayLine(text[base + c : min(end, base + len(line))].strip(), base + c, end))
    return out


def _shown(i: int, line: DisplayLine) -> str:
    return f"[{i}] {line.text}\n"


def window_ranges(lines: Sequence[DisplayLine], window_chars: int = 18_000) -> list[tuple[int, int]]:
    """Inclusive ``(first, last)`` display-line ranges whose ``[i] text`` fits ``window_chars``."""
    out: list[tuple[int, int]] = []
    first, size = 0, 0
    for i, line in enumerate(lines):
        n = len(_shown(i, line))
        if size + n > window_chars and i > first:
            out.append((first, i - 1))
            first, size = i, 0
        size += n
    if lines:
        out.append((first, len(lines) - 1))
    return out


# -- answers and repairs ----------------------------------------------------------------------
def parse_sections(answer: str) -> list[LLMSection]:
    """The sections of an answer (JSON object, optionally in a code fence, or a bare list).

    Raises ``ValueError`` (pydantic's ``ValidationError`` or ``json.JSONDecodeError``) when the
    answer does not validate.
    """
    m = re.search(r"[\[{].*[\]}]", answer, flags=re.DOTALL)
    if m is None:
        raise ValueError("no JSON in the answer")
    data = json.loads(m.group())
    if isinstance(data, list):
        data = {"sections": data}
    return LLMSections.model_validate(data).sections


def repair_window(sections: Sequence[LLMSection], first: int, last: int) -> list[WindowSection]:
    """Sort, drop duplicate starts, clamp, force full coverage of ``[first, last]`` (module docs)."""
    ordered = sorted(sections, key=lambda s: s.start)  # stable: the first of equal starts stays first
    seen: set[int] = set()
    kept: list[LLMSection] = []
    for s in ordered:
        start = min(max(s.start, first), last)
        if start in seen:
            continue
        seen.add(start)
        kept.append(s.model_copy(update={"start": start}))
    if not kept:
        return [WindowSection(f"Lines {first}–{last}", first, last)]
    starts = [first] + [s.start for s in kept[1:]]
    ends = [s - 1 for s in starts[1:]] + [last]
    return [WindowSection(s.title.strip(), a, b) for s, a, b in zip(kept, starts, ends)]


def collapse_small(
    secs: list[WindowSection], lines: Sequence[DisplayLine], min_avg_chars: int = 500
) -> tuple[list[WindowSection], bool]:
    """One section for the window when its sections average < ``min_avg_chars`` characters."""
    if len(secs) <= 1:
        return secs, False
    chars = sum(len(lines[i].text) for i in range(secs[0].start, secs[-1].end + 1))
    if chars / len(secs) >= min_avg_chars:
        return secs, False
    return [WindowSection(secs[0].title, secs[0].start, secs[-1].end)], True


def merge_across_windows(per_window: Sequence[Sequence[WindowSection]]) -> list[WindowSection]:
    """Concatenate windows, merging each window's trailing section with the next one's first."""
    out: list[WindowSection] = []
    for secs in per_window:
        if not secs:
            continue
        if out:
            tail = out.pop()
            out.append(WindowSection(tail.title, tail.start, secs[0].end))
            out.extend(secs[1:])
        else:
            out.extend(secs)
    return out


# -- the sectioner ----------------------------------------------------------------------------
class SemanticSectioner:
    """``sectioner(doc) -> list[Section]``; pass it to :func:`arborag.tasks.segment.sections.build_sections`."""

    def __init__(
        self,
        complete: Complete,
        *,
        max_line_chars: int = 200,
        window_chars: int = 18_000,
        min_avg_chars: int = 500,
        retries: int = 2,
        max_tokens: int = 2000,
    ) -> None:
        self._complete = complete
        self.max_line_chars = max_line_chars
        self.window_chars = window_chars
        self.min_avg_chars = min_avg_chars
        self.retries = retries
        self.max_tokens = max_tokens
        self.stats = SemanticStats()

    def _ask(self, lines: Sequence[DisplayLine], first: int, last: int) -> list[LLMSection] | None:
        prompt = PROMPT.format(first=first, last=last, lines="".join(_shown(i, lines[i]) for i in range(first, last + 1)))
        for _ in range(self.retries + 1):
            self.stats.calls += 1
            try:
                return parse_sections(self._complete(prompt, max_tokens=self.max_tokens))
            except ArboragError as exc:
                self.stats.failures.append(f"lines {first}-{last}: {exc}")
                return None  # the client has already retried the transport
            except (ValueError, ValidationError):
                self.stats.invalid_answers += 1
        self.stats.failures.append(f"lines {first}-{last}: no valid JSON sections after {self.retries + 1} answers")
        return None

    def window_sections(self, lines: Sequence[DisplayLine], first: int, last: int) -> list[WindowSection]:
        self.stats.windows += 1
        answer = self._ask(lines, first, last)
        if answer is None:
            self.stats.failed_windows += 1
            return [WindowSection(f"Lines {first}–{last}", first, last)]
        secs, collapsed = collapse_small(repair_window(answer, first, last), lines, self.min_avg_chars)
        self.stats.collapsed_windows += collapsed
        return secs

    def __call__(self, doc: DocInput) -> list[Section]:
        text = doc.text
        lines = display_lines(text, self.max_line_chars)
        per_window = [self.window_sections(lines, a, b) for a, b in window_ranges(lines, self.window_chars)]
        starts = line_starts(text)
        out: list[Section] = []
        for s in merge_across_windows(per_window):
            a, b = lines[s.start].start_char, lines[s.end].end_char
            first_line = bisect_right(starts, a) - 1
            last_line = bisect_right(starts, max(a, b - 1)) - 1
            out.append(Section(first_line, last_line, a, b, short_title(s.title)))
        return out
