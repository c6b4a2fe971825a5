"""How many leaves end after an abbreviation or an initial: every pattern end vs the house rule.

Usage: python benchmarks/abbreviations.py [--max-tokens 100] [--out benchmarks/results/abbreviations.md]

The ``sentence`` chunker packs sentences into leaves of <= ``--max-tokens`` tokens. Cut at every
end of :data:`arborag.text.SENTENCE_PATTERN` (the RAPTOR reference code's rule, and the chunker's
before session 14), a leaf can end "... Merian C." and the next begin "Cooper, the co-directors".
The chunker now cuts at :func:`arborag.text.sentence_ends` (no end after a common abbreviation or
an initial). This counts, on the shared corpora (HotpotQA paragraphs, NarrativeQA passages, the
RAPTOR Cinderella text, the FinanceBench PDFs' text through pypdf and the reading-order view the
segment stage cuts; each text segmented on its own, no sections or headers), the leaves
whose end is right after such a word under both rules, with examples. Writes ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, cinderella_text, financebench_texts, hotpot_paragraphs, machine_line, md_table, narrativeqa_passages, run_header, setup_env  # noqa: E402

setup_env()


def _leaves(text: str, starts: np.ndarray, ends: np.ndarray, max_tokens: int, every_end: bool) -> list[tuple[int, int]]:
    """Character spans of the sentence chunker's leaves; ``every_end``: cut at every pattern end."""
    from arborag.tasks import segmenters
    from arborag.text import SENTENCE_PATTERN

    house = segmenters.sentence_ends
    if every_end:  # the rule before: every end of the pattern
        segmenters.sentence_ends = lambda t: [m.end() for m in SENTENCE_PATTERN.finditer(t)]  # type: ignore[assignment]
    try:
        a, b = segmenters.sentence_windows(text, starts, ends, max_tokens)
    finally:
        segmenters.sentence_ends = house
    return [(int(starts[i]), int(ends[j - 1])) for i, j in zip(a.tolist(), b.tolist())]


def _after_abbreviation(text: str, end: int) -> bool:
    from arborag.text import _ends_with_abbreviation

    return _ends_with_abbreviation(text[max(0, end - 64) : end])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=100, help="the chunker's leaf size (segment.sentence_max_tokens)")
    ap.add_argument("--out", type=Path, default=RESULTS / "abbreviations.md")
    args = ap.parse_args()
    from arborag.tasks.ingest.reading import reading_view
    from arborag.tokenizer import get_tokenizer

    t0 = time.perf_counter()
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    m_start = machine_line()
    tok = get_tokenizer()
    corpora = {
        "HotpotQA paragraphs": [f"{title}\n{' '.join(s)}" for title, s in hotpot_paragraphs()],
        "NarrativeQA passages": narrativeqa_passages(),
        "Cinderella (RAPTOR)": [cinderella_text()],
        "FinanceBench PDFs (reading view)": [reading_view(t).text for _, t in financebench_texts()],
    }
    rows, examples = [], []
    for name, texts in corpora.items():
        counts = {True: [0, 0], False: [0, 0]}  # every_end -> [leaves, ending after an abbreviation]
        for text in texts:
            starts, ends = tok.offsets(text)
            for every_end in (True, False):
                spans = _leaves(text, starts, ends, args.max_tokens, every_end)
                bad = [e for _, e in spans[:-1] if _after_abbreviation(text, e)]
                counts[every_end][0] += len(spans)
                counts[every_end][1] += len(bad)
                if every_end and sum(e.startswith(name) for e in examples) < 4:
                    examples += [f"{name}: “…{text[max(0, e - 45):e]}” | “{text[e:e + 35].strip()}…”".replace("\n", " ") for e in bad[:2]]
        rows.append([name, len(texts), counts[True][0], counts[True][1], counts[False][0], counts[False][1]])
    lines = run_header("Leaves that end after an abbreviation or an initial", date=date, machine_start=m_start, started=t0)
    lines += [
        "",
        f"The `sentence` chunker at {args.max_tokens} tokens over each text on its own. *Every end*: cut at every end of "
        "`SENTENCE_PATTERN` (the RAPTOR reference rule; the chunker's before session 14). *House rule*: "
        "`arborag.text.sentence_ends` (no end after a common abbreviation or an initial). A leaf counts when the text "
        "right before its end is such a word (the last leaf of a text is not counted).",
        "",
        md_table(["corpus", "texts", "leaves (every end)", "ending after one", "leaves (house rule)", "ending after one"], rows),
        "",
        "Examples under *every end* (leaf end | next leaf's start):",
        "",
        *[f"- {e}" for e in examples],
        "",
    ]
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
