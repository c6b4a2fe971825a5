"""Are the summaries prose? Empty summaries, heading/row lists and sentence fragments among the
summaries of the demo corpus and the FinanceBench PDFs, built with the default config.

    python benchmarks/summary_quality.py                          # build both, measure, write results
    python benchmarks/summary_quality.py --measure NAME=DIR       # also measure a corpus built elsewhere
    python benchmarks/summary_quality.py --smoke --out /tmp/q.md  # a tiny check run (the demo corpus only)

Each corpus is built with the real CLI (``arborag build SOURCES --corpus WORK/NAME --no-prefect``)
(into an emptied WORK/NAME: a cold build) and every summary node (level >= 1) of its published snapshot is classified:

- **empty**: nothing but white space.
- **list** (a heading/row list): the old "Table and heading lines: …" form; or at least half of its
  word tokens are numbers; or it splits (at line breaks and "; ") into at least three items of
  which at least 60% are *label items* — at most eight words, no closing sentence punctuation,
  and every word capitalised or a number (small words aside). A summary at least half of whose
  characters are in prose sentences (whole, six words or more, three of them lower-case) is not a
  list, whatever its semicolons.
- **table description**: the summarizer's one sentence about a cluster without a whole sentence
  ("Table 'X' with columns …", "Figures are given for …"); prose by the rules above, counted
  apart so that a reader sees how many summaries are such descriptions.
- **fragment**: a line break in it, or a sentence (``arborag.text.split_sentences``) that does not
  start with a capital letter or a digit (opening quotes and brackets aside) or does not end with
  closing punctuation (``arborag.tasks.evaluation.readability.fragmented``).

Writes ``benchmarks/results/summary_quality.md`` (command, date, load average, commit).
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA, REPO, RESULTS, cli_build, machine_line, provenance_lines, setup_env  # noqa: E402

CORPORA = {
    "demo": [REPO / "examples" / "corpus"],
    "financebench": [DATA / "financebench" / "pdfs"],
}
#: how the extractive summarizer's one-sentence description of a cluster without a whole sentence
#: begins (tasks/summarize/extractive.py ``table_sentence``): prose by the definitions above, counted apart
DESCRIPTIONS = ("Table '", "A table ", "Figures are given for ", "This part covers ")
_SMALL = frozenset("a an and as at by for in of on or the to vs with per from".split())
_TOKEN = re.compile(r"\S+")
_NUMBER = re.compile(r"^[(\-–$€£]*[\d.,]+[)%]*[.,;:]?$")
_END = re.compile(r"[.!?…][\"'”’)\]]*$")


def is_label_item(item: str) -> bool:
    """A short title-case or numeric line: a heading, a row name, a cell (module docs)."""
    s = item.strip().rstrip(";,:")
    words = s.split()
    if not words or len(words) > 8 or _END.search(s):
        return False
    return all(w[:1].isupper() or w[:1].isdigit() or not w[:1].isalpha() or w.lower() in _SMALL for w in words)


def is_list(summary: str) -> bool:
    """A heading/row list rather than prose (module docs)."""
    text = summary.strip()
    if not text:
        return False
    if text.startswith("Table and heading lines:"):
        return True
    if _prose_share(text) >= 0.5:
        return False
    tokens = _TOKEN.findall(text)
    if tokens and sum(1 for t in tokens if _NUMBER.match(t)) >= 0.5 * len(tokens):
        return True
    items = [i for i in re.split(r"\n|; ", text) if i.strip()]
    return len(items) >= 3 and sum(map(is_label_item, items)) >= 0.6 * len(items)


def _prose_share(text: str) -> float:
    """The share of ``text``'s characters in prose sentences: whole, at least six words, at least
    three of them lower-case (a sentence that lists places is still prose)."""
    from arborag.tasks.evaluation.readability import whole
    from arborag.text import split_sentences

    prose = sum(len(s) for s in split_sentences(text)
                if whole(s) and len(s.split()) >= 6 and sum(1 for w in s.split() if w[:1].islower()) >= 3)
    return prose / len(text)


def classify(summaries: list[str]) -> dict[str, Any]:
    from arborag.tasks.evaluation.readability import fragmented

    n = len(summaries)
    empty = sum(1 for s in summaries if not s.strip())
    lists = sum(1 for s in summaries if is_list(s))
    frags = sum(1 for s in summaries if fragmented(s))
    described = sum(1 for s in summaries if s.startswith(DESCRIPTIONS))
    share = (lambda k: round(k / n, 3) if n else 0.0)
    return {"summaries": n, "empty": empty, "lists": lists, "list_share": share(lists),
            "fragments": frags, "fragment_share": share(frags), "described": described,
            "list_examples": [s for s in summaries if is_list(s)][:2],
            "fragment_examples": [s for s in summaries if fragmented(s)][:2],
            "description_examples": [s for s in summaries if s.startswith(DESCRIPTIONS)][:3]}


def summaries_of(corpus: Path) -> list[str]:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from arborag.storage.corpus import Corpus

    nodes = pq.read_table(Corpus(corpus).snapshot_table_path("nodes"), columns=["level", "text"])
    return [t or "" for t in nodes.filter(pc.greater_equal(nodes.column("level"), 1)).column("text").to_pylist()]




def table(rows: dict[str, dict[str, Any]]) -> str:
    out = ["| corpus | summaries | empty | heading/row lists | share | fragments | share | table descriptions |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in rows.items():
        out.append(f"| {name} | {r['summaries']} | {r['empty']} | {r['lists']} | {r['list_share']:.3f} | "
                   f"{r['fragments']} | {r['fragment_share']:.3f} | {r['described']} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", default="demo,financebench", help="which of demo, financebench to build and measure")
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-bench-summary-quality"))
    ap.add_argument("--measure", action="append", default=[], metavar="NAME=DIR", help="also measure a built corpus")
    ap.add_argument("--out", type=Path, default=RESULTS / "summary_quality.md")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (the demo corpus only)")
    args = ap.parse_args()
    if args.smoke:
        args.corpora = "demo"
    setup_env()
    command = "python " + " ".join(["benchmarks/summary_quality.py", *sys.argv[1:]])
    started = datetime.now(timezone.utc)
    load_before = machine_line()
    rows: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    for item in args.measure:
        name, _, path = item.partition("=")
        rows[name] = classify(summaries_of(Path(path)))
    for name in [c for c in args.corpora.split(",") if c]:
        if name not in CORPORA:
            raise SystemExit(f"unknown corpus {name!r}: choose from {', '.join(CORPORA)}")
        corpus, seconds[name] = cli_build(name, CORPORA[name], args.work, cold=True)
        rows[name] = classify(summaries_of(corpus))
        print(f"{name}: {rows[name]['summaries']} summaries, {rows[name]['empty']} empty, "
              f"{rows[name]['lists']} lists, {rows[name]['fragments']} fragments", flush=True)
    md = [
        "# Summary quality: empty summaries, heading/row lists, sentence fragments",
        "",
        *provenance_lines(command, started, load_before),
        "- definitions: the docstring of `benchmarks/summary_quality.py`",
        "",
        table(rows),
        "",
        "Build seconds (`arborag build … --no-prefect`): " + (", ".join(f"{k} {v:.0f}" for k, v in seconds.items()) or "none"),
        "",
    ]
    for name, r in rows.items():
        for kind in ("list", "fragment"):
            for ex in r[f"{kind}_examples"]:
                md.append(f"- {name}, a {kind}: {' '.join(ex.split())[:300]!r}")
        for ex in r["description_examples"]:
            md.append(f"- {name}, a table description: {' '.join(ex.split())[:300]!r}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(md) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
