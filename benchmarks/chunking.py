"""Chunking throughput: arborag's five segmenters vs LangChain's RecursiveCharacterTextSplitter.

Not a test. Run from the repo root::

    python benchmarks/chunking.py            # full run (~50 MB English, ~10 MB Chinese); writes
                                             # benchmarks/results/chunking.md
    python benchmarks/chunking.py --quick    # a small run; prints only (unless --out is given)
    python benchmarks/chunking.py --smoke    # a tiny check run; prints only (unless --out is given)

What is measured (one process, wall clock ``time.perf_counter``, best of ``--repeat`` runs taken
in interleaved rounds, so a change of the machine's load during the run affects all alike):

* ``segment_text(text)`` is exactly ``Tokenizer.offsets(text)`` (the one tokenization) followed
  by ``segment_offsets(...)`` (array work). Both parts are timed separately on the same text —
  tokenization best of N, each segmenter best of N — and *end-to-end* is their sum. This keeps
  the full run affordable on a shared 2-core machine (the tokenization would otherwise be
  repeated five times per round) and shows where the time goes. The DDS scaling section times
  ``segment_text`` end to end, as one call, which cross-checks the sum.
* LangChain, token lengths: ``RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
  PreTrainedTokenizerFast(tokenizer_file=<our tokenizer.json>), chunk_size=100,
  chunk_overlap=20)`` — the same tokenizer and sizes as our ``rcs`` defaults. It re-tokenizes
  every piece (~0.1 MB/s), so it is timed on a prefix of a few MB, cut at a paragraph break.
* LangChain, character lengths: ``RecursiveCharacterTextSplitter(chunk_size=400,
  chunk_overlap=80)`` (``len``), on the full text.
* DDS (w=1024, s=3) on 1×, 2× and 4× a base text: a linear algorithm takes ≈ 2× and 4× the
  time. Each of ``--scaling-repeat`` rounds does equal work per size (the 1× text four times,
  2× twice, 4× once; order alternating), ratios are taken within a round and the median is
  reported — taking the *best* of a few runs would favour the short 1× runs, which are more
  likely to fit into a quiet moment of a shared machine. Wall and process CPU time are reported.

MB = 10^6 bytes of UTF-8; MB/s = input MB / seconds.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # offline, as scripts/env.sh sets it
    os.environ.setdefault(_name, "1")

from arborag.config import SegmentConfig  # noqa: E402
from arborag.tokenizer import Tokenizer, get_tokenizer  # noqa: E402
from arborag.tasks.stages.chunks import STRATEGIES, segment_offsets, segment_text  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_commit  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "chunking.md"
MB = 1_000_000
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")

# Sentences written for this benchmark (common vocabulary, everyday topics); the shared data has
# almost no Chinese, see chinese_text().
CHINESE_SENTENCES: tuple[str, ...] = (
    "今天天气很好，我们一起去公园散步。",
    "公园里有很多人，有的在跑步，有的在打太极拳。",
    "中午我们在湖边的小饭馆吃了午饭。",
    "下午突然下起了大雨，我们只好回家。",
    "这本书讲的是一个普通家庭几十年的故事。",
    "作者用简单的语言描写了复杂的感情。",
    "很多读者说，看完以后想起了自己的父母。",
    "北京是中国的首都，也是一座历史悠久的城市。",
    "每年春天，很多游客来这里看花。",
    "长城很长，从东到西有几千公里。",
    "学习一门外语需要时间，也需要耐心。",
    "老师常说，每天练习半个小时比一周练习一次更有效。",
    "你今天晚上有空吗？",
    "我们想请你一起吃饭！",
    "科学家发现，适量运动可以改善睡眠。",
    "研究人员调查了三千多名成年人的生活习惯。",
    "结果表明，经常运动的人更少失眠。",
    "城市的交通越来越拥挤，所以很多人选择坐地铁上班。",
    "新的地铁线路明年就会开通。",
    "市政府还计划修建更多的自行车道。",
    "他从小就喜欢画画，后来成了一名设计师。",
    "他的作品在很多国家展出过。",
    "这家公司成立于二十年前，现在有五千多名员工。",
    "公司的主要产品是家用电器和电子设备。",
    "去年的销售额比前年增长了百分之十五。",
    "妈妈在厨房里做饭，爸爸在客厅看报纸。",
    "孩子们在院子里玩游戏，笑声传得很远。",
    "晚饭以后，一家人坐在一起聊天。",
    "图书馆早上八点开门，晚上十点关门。",
    "借书的时候要带学生证。",
    "这条河从山里流出来，经过好几个村子。",
    "河边种满了柳树，夏天特别凉快。",
    "医生建议他多喝水，少吃油腻的东西。",
    "经过一个月的治疗，他的身体好多了。",
    "比赛开始以前，运动员们都很紧张。",
    "最后，我们的球队以二比一赢得了比赛！",
    "为什么天空是蓝色的？",
    "因为空气会把蓝色的光散射到各个方向。",
    "这个问题看起来简单，其实并不容易回答。",
    "时间过得真快，转眼又是一年。",
)


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def english_paragraphs(data: Path) -> list[str]:
    """HotpotQA corpus paragraphs (title line + sentences), NarrativeQA passages, Cinderella."""
    corpus = json.loads((data / "hotpotqa" / "hotpotqa_train_corpus.json").read_text(encoding="utf-8"))
    paragraphs = [title + "\n" + "".join(sentences) for title, sentences in corpus.items()]
    with (data / "narrativeqa" / "test-tiny.jsonl").open(encoding="utf-8") as fh:
        seen: set[str] = set()
        for line in fh:
            passage = json.loads(line)["passage"]
            if passage not in seen:  # several questions share a passage
                seen.add(passage)
                paragraphs.append(passage)
    paragraphs.append((data / "raptor" / "cinderella.txt").read_text(encoding="utf-8"))
    return paragraphs


def repeat_to(unit: str, mb: float) -> tuple[str, int]:
    """``unit`` repeated (joined by a blank line) until the text has >= ``mb`` MB of UTF-8."""
    size = len(unit.encode("utf-8")) + 2
    copies = max(1, -(-int(mb * MB) // size))
    return "\n\n".join([unit] * copies), copies


def count_cjk(data: Path) -> int:
    """CJK characters in the shared data's text files (JSON, JSONL, TXT)."""
    total = 0
    for path in data.rglob("*"):
        if path.suffix in {".json", ".jsonl", ".txt", ".md"}:
            total += len(CJK.findall(path.read_text(encoding="utf-8", errors="replace")))
    return total


def chinese_text(mb: float, seed: int = 0) -> str:
    """Synthetic Chinese: CHINESE_SENTENCES shuffled into paragraphs of 3–8 sentences (seeded)."""
    rng = random.Random(seed)
    paragraphs: list[str] = []
    size = 0
    while size < mb * MB:
        paragraph = "".join(rng.choice(CHINESE_SENTENCES) for _ in range(rng.randint(3, 8)))
        paragraphs.append(paragraph)
        size += len(paragraph.encode("utf-8")) + 2
    return "\n\n".join(paragraphs)


def prefix(text: str, mb: float) -> str:
    """The first ~``mb`` MB of ``text``, cut at a paragraph break."""
    cut = text.find("\n\n", int(mb * MB / max(1.0, len(text.encode("utf-8")) / len(text))))
    return text if cut < 0 else text[:cut]


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


class BestOf:
    """Keeps the fastest wall-clock time of each measurement."""

    def __init__(self) -> None:
        self.seconds: dict[tuple[str, str], float] = {}

    def __call__(self, key: tuple[str, str], fn: Callable[[], Any]) -> Any:
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - t0
        self.seconds[key] = min(self.seconds.get(key, float("inf")), elapsed)
        return result


@dataclass
class Row:
    """One table row: seconds and input MB per language ("en", "zh")."""

    name: str
    seconds: dict[str, float]  # end to end (ours: tokenization + segmentation)
    mb: dict[str, float]
    chunks: dict[str, int]
    seg_seconds: dict[str, float] | None = None  # ours: segmentation only

    def mbps(self, lang: str) -> float:
        return self.mb[lang] / self.seconds[lang]


def timed(fn: Callable[[], list[Any]]) -> tuple[float, float, int]:
    """(wall seconds, process CPU seconds, number of chunks) of one call of ``fn``."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    n = len(fn())
    return time.perf_counter() - t0, time.process_time() - c0, n


def langchain_token_splitter(tok: Tokenizer) -> Any:
    from langchain_text_splitters import RecursiveCharacterTextSplitter
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_file=str(tok.path))
    return RecursiveCharacterTextSplitter.from_huggingface_tokenizer(hf, chunk_size=100, chunk_overlap=20)


def langchain_char_splitter() -> Any:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    return RecursiveCharacterTextSplitter(chunk_size=400, chunk_overlap=80)


def load_average() -> str:
    try:
        return " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> str:
    logging.getLogger("transformers").setLevel(logging.ERROR)
    logging.getLogger("langchain_text_splitters").setLevel(logging.ERROR)
    out: list[str] = []

    def say(line: str = "") -> None:
        print(line, flush=True)
        out.append(line)

    data: Path = args.data
    if not data.is_dir():
        raise SystemExit(f"shared data not found at {data}; pass --data PATH")
    tok = get_tokenizer()
    cfg = SegmentConfig()
    load_before = load_average()
    started = time.perf_counter()

    en_unit = "\n\n".join(english_paragraphs(data))
    texts = {}
    texts["en"], en_copies = repeat_to(en_unit, args.english_mb)
    texts["zh"] = chinese_text(args.chinese_mb)
    mb = {lang: len(t.encode("utf-8")) / MB for lang, t in texts.items()}
    cjk_found = count_cjk(data)

    lc_sample = {"en": prefix(texts["en"], args.lc_token_mb), "zh": prefix(texts["zh"], args.lc_token_zh_mb)}
    token_splitter = langchain_token_splitter(tok)
    char_splitter = langchain_char_splitter()
    base, _ = repeat_to(en_unit, args.scaling_mb)
    factors = ("1", "2", "4")
    scaled = {f: "\n\n".join([base] * int(f)) for f in factors}
    scaled_offsets = {f: tok.offsets(t) for f, t in scaled.items()}

    # Rounds interleave every measurement, so a change in the machine's load during the run
    # affects all of them alike; each keeps its best time over the rounds.
    best = BestOf()
    counts: dict[tuple[str, str], int] = {}
    for round_no in range(1, args.repeat + 1):
        for lang, text in texts.items():
            print(f"round {round_no}/{args.repeat}: {lang} ({mb[lang]:.1f} MB) …", file=sys.stderr, flush=True)
            starts, ends = best(("tokenize", lang), partial(tok.offsets, text))
            counts[("tokenize", lang)] = len(starts)
            for strategy in STRATEGIES:
                spans = best((strategy, lang), partial(segment_offsets, text, starts, ends, strategy, cfg))
                counts[(strategy, lang)] = len(spans)
                del spans
            del starts, ends
            counts[("lc_token", lang)] = len(best(("lc_token", lang), partial(token_splitter.split_text, lc_sample[lang])))
            counts[("lc_char", lang)] = len(best(("lc_char", lang), partial(char_splitter.split_text, text)))
    # DDS scaling with equal work per size: each round processes 4 units of the base text at
    # every size (1x four times, 2x twice, 4x once), in alternating order, so the load of the
    # shared machine falls alike on all sizes; ratios are per round, the median is reported.
    scale_runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for round_no in range(1, args.scaling_repeat + 1):
        print(f"round {round_no}/{args.scaling_repeat}: dds scaling …", file=sys.stderr, flush=True)
        for f in factors if round_no % 2 else factors[::-1]:
            calls = {
                "e2e": partial(segment_text, scaled[f], "dds", cfg, tokenizer=tok),
                "seg": partial(segment_offsets, scaled[f], *scaled_offsets[f], "dds", cfg),
            }
            for kind, fn in calls.items():
                times = [timed(fn) for _ in range(4 // int(f))]
                counts[(f"dds_{kind}", f)] = times[0][2]
                wall, cpu_s = sum(t[0] for t in times) / len(times), sum(t[1] for t in times) / len(times)
                scale_runs.setdefault((kind, f), []).append((wall, cpu_s))
    load_after = load_average()
    sec = best.seconds

    def make_row(name: str, key: str, sizes: dict[str, float] = mb) -> Row:
        own = key in STRATEGIES
        return Row(
            name,
            {lang: sec[("tokenize", lang)] + sec[(key, lang)] if own else sec[(key, lang)] for lang in texts},
            sizes,
            {lang: counts[(key, lang)] for lang in texts},
            {lang: sec[(key, lang)] for lang in texts} if own else None,
        )

    lc_mb = {lang: len(t.encode("utf-8")) / MB for lang, t in lc_sample.items()}
    lc_token = make_row("LangChain, token lengths (chunk_size=100, overlap=20)", "lc_token", lc_mb)
    lc_char = make_row("LangChain, character lengths (chunk_size=400, overlap=80)", "lc_char")
    ours = {strategy: make_row(f"arborag `{strategy}`", strategy) for strategy in STRATEGIES}
    rows = [make_row("tokenizer only (`Tokenizer.offsets`, the floor)", "tokenize"), *ours.values(), lc_token, lc_char]
    scaled_mb = {f: len(t.encode("utf-8")) / MB for f, t in scaled.items()}

    # ------------------------------------------------------------------ report
    say(f"# Chunking throughput ({'quick run' if args.quick else 'full run'})")
    say()
    say(f"Command: `python benchmarks/chunking.py {' '.join(sys.argv[1:])}`; commit {git_commit()}.")
    say()
    say(
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}), shared with other work: load average "
        f"(1/5/15 min) {load_before} before, {load_after} after. Python {platform.python_version()}, "
        f"tokenizers {version('tokenizers')}, langchain-text-splitters {version('langchain-text-splitters')}, "
        f"transformers {version('transformers')}. Total wall time {time.perf_counter() - started:.0f} s."
    )
    say()
    say(
        f"How: one process; wall clock, **best of {args.repeat}** runs of each measurement, taken in "
        f"{args.repeat} interleaved rounds (every measurement once per round, so load changes hit all alike). "
        f"Ours end-to-end "
        f"= best tokenization (`Tokenizer.offsets`, the one tokenization of the text) + best segmentation "
        f"(`segment_offsets` on those offsets) — `segment_text` is exactly these two calls; the DDS scaling "
        f"rows below time `segment_text` as one call. Default `SegmentConfig` (sentence ≤ 100; ffs/dfs "
        f"w=1024 s=256; dds w=1024 s=3 units; rcs 100/20 tokens). Each text is one document. "
        f"MB = 10^6 bytes of UTF-8."
    )
    say()
    say("Inputs:")
    say(
        f"- English: {mb['en']:.1f} MB — HotpotQA corpus paragraphs (title line + sentences), the distinct "
        f"NarrativeQA passages and cinderella.txt from {data.name}/ ({len(en_unit.encode('utf-8')) / MB:.2f} MB), "
        f"joined by blank lines and repeated {en_copies}×."
    )
    say(
        f"- Chinese: {mb['zh']:.1f} MB — **synthetic**: the shared data holds only {cjk_found} CJK characters "
        f"(chapter titles of *The Art of War* in one NarrativeQA passage), so the text is "
        f"{len(CHINESE_SENTENCES)} everyday sentences written in Chinese for this benchmark (benchmarks/chunking.py), "
        f"shuffled (seed 0) into paragraphs of 3–8 sentences separated by blank lines."
    )
    say(
        f"- LangChain with token lengths re-tokenizes every piece, so it ran on a prefix: "
        f"{lc_token.mb['en']:.2f} MB English, {lc_token.mb['zh']:.2f} MB Chinese. Everything else ran on the full texts."
    )
    say()
    say(
        "| segmenter | EN MB/s | EN × LC-token | EN × LC-char | ZH MB/s | ZH × LC-token | ZH × LC-char "
        "| EN segmentation only MB/s | EN chunks | ZH chunks |"
    )
    say("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        cells = [row.name]
        for lang in ("en", "zh"):
            cells += [
                f"{row.mbps(lang):.2f}",
                f"{row.mbps(lang) / lc_token.mbps(lang):.1f}×",
                f"{row.mbps(lang) / lc_char.mbps(lang):.2f}×",
            ]
        cells.append(f"{mb['en'] / row.seg_seconds['en']:.1f}" if row.seg_seconds else "")
        cells += [f"{row.chunks['en']:,}", f"{row.chunks['zh']:,}"]
        say("| " + " | ".join(cells) + " |")
    say()
    say("(Tokenizer row: the chunk columns give the number of tokens.)")
    say()
    misses = [
        f"{row.name} ({lang})"
        for row in ours.values()
        for lang in ("en", "zh")
        if row.mbps(lang) < 3 * lc_token.mbps(lang)
    ]
    say(
        "Target each segmenter ≥ 3× LangChain-token throughput: "
        + ("**met** for all five, English and Chinese." if not misses else "**missed** by " + ", ".join(misses) + ".")
    )
    say()
    def ratios(kind: str, f: str, col: int) -> list[float]:
        return [r[col] / one[col] for r, one in zip(scale_runs[(kind, f)], scale_runs[(kind, "1")], strict=True)]

    say(
        f"DDS (w=1024, s=3) on 1×, 2×, 4× a {scaled_mb['1']:.1f} MB English base (`--scaling-mb`). Equal work per "
        f"size: each of {args.scaling_repeat} rounds runs the 1× text four times, the 2× text twice and the 4× text "
        f"once (order alternating between rounds), so the shared machine's load falls alike on every size; a "
        f"ratio is the time per call over the 1× time per call *in the same round*; the table gives the median "
        f"over rounds (min–max in brackets). CPU = process CPU time of all threads (`time.process_time`)."
    )
    say()
    say("| input | MB | `segment_text` wall s | wall ratio | CPU ratio | segmentation only s | ratio | windows |")
    say("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    summary: dict[str, float] = {}
    for f in factors:
        cells = [f"{f}×", f"{scaled_mb[f]:.1f}", f"{statistics.median(r[0] for r in scale_runs[('e2e', f)]):.2f}"]
        for kind, col in (("e2e", 0), ("e2e", 1)):
            rs = ratios(kind, f, col)
            summary[f"{kind}{col}{f}"] = statistics.median(rs)
            cells.append(f"{statistics.median(rs):.2f} ({min(rs):.2f}–{max(rs):.2f})")
        cells.append(f"{statistics.median(r[0] for r in scale_runs[('seg', f)]):.3f}")
        rs = ratios("seg", f, 0)
        cells.append(f"{statistics.median(rs):.2f} ({min(rs):.2f}–{max(rs):.2f})")
        cells.append(f"{counts[('dds_e2e', f)]:,}")
        say("| " + " | ".join(cells) + " |")
    wall4, cpu4 = summary["e2e04"], summary["e2e14"]
    seg4 = statistics.median(ratios("seg", "4", 0))
    say()
    say(
        f"Cross-check: `segment_text(..., \"dds\")` as one call on the 4× input ran at "
        f"{scaled_mb['4'] / min(r[0] for r in scale_runs[('e2e', '4')]):.2f} MB/s (best round); the table's "
        f"tokenize + segment sum for dds gives {ours['dds'].mbps('en'):.2f} MB/s on the {mb['en']:.1f} MB English text."
    )
    say()
    say(
        f"Target 4× input ≤ 4.6× time (DDS end to end, median wall ratio): **{'met' if wall4 <= 4.6 else 'missed'}** "
        f"({wall4:.2f}×; CPU {cpu4:.2f}×; segmentation alone {seg4:.2f}×)."
    )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help=f"shared data folder (default {DEFAULT_DATA})")
    parser.add_argument("--quick", action="store_true", help="small inputs, one run each; prints only unless --out")
    parser.add_argument("--smoke", action="store_true", help="tiny inputs, one run each (checks the script works); prints only unless --out")
    parser.add_argument("--english-mb", type=float, default=50.0, help="English text size (default 50)")
    parser.add_argument("--chinese-mb", type=float, default=10.0, help="Chinese text size (default 10)")
    parser.add_argument("--lc-token-mb", type=float, default=2.0, help="English prefix for LangChain-token (default 2)")
    parser.add_argument("--lc-token-zh-mb", type=float, default=0.5, help="Chinese prefix for LangChain-token (default 0.5)")
    parser.add_argument(
        "--scaling-mb", type=float, default=12.5,
        help="DDS scaling base; 4x of it is timed (default 12.5, so 4x = the 50 MB English input)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is reported (default 3)")
    parser.add_argument("--scaling-repeat", type=int, default=3, help="rounds of the DDS scaling runs (default 3)")
    parser.add_argument("--out", type=Path, default=None, help=f"markdown output (full run default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    if args.quick:
        args.english_mb, args.chinese_mb, args.lc_token_mb, args.lc_token_zh_mb = 2.0, 0.5, 0.2, 0.05
        args.scaling_mb, args.repeat, args.scaling_repeat = 0.5, 1, 2
    if args.smoke:
        args.quick = True
        args.english_mb, args.chinese_mb, args.lc_token_mb, args.lc_token_zh_mb = 0.3, 0.1, 0.03, 0.01
        args.scaling_mb, args.repeat, args.scaling_repeat = 0.05, 1, 1
    if not args.quick and args.out is None:
        args.out = DEFAULT_OUT
    report = run(args)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report, encoding="utf-8")
        print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
