"""Sparse index benchmark: the embedded engine (tantivy) beside bm25s, on HotpotQA.

    python benchmarks/sparse.py                       # HotpotQA paragraphs -> <=100-token level-0 nodes
    python benchmarks/sparse.py --corpus DIR          # every node of a built corpus (published snapshot)
    python benchmarks/sparse.py --repeat 5 --queries 500 --out benchmarks/results/sparse.md
    python benchmarks/sparse.py --smoke --out /tmp/sparse.md     # a tiny check run

Prints (and writes as Markdown) indexing docs/s and per-query latency p50/p95 for 500 queries
(the 100 HotpotQA questions, cycled through 5 forms: the plain question, keywords, quoted
entities, +required/boosted entities, and an AND/OR form), for both engines, with the ratio.
Each engine runs ``--repeat`` times; the best run is reported (the 2 cores are shared).
Latency includes parsing and analysing the query in both engines (bm25s gets the words of each
form: it has no query syntax). A syntax check shows why LanceDB's FTS cannot serve as the
embedded engine: it ignores ``+``/``-``/``^`` in query strings.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from arborag.config import SparseConfig  # noqa: E402
from arborag.hashing import short_id  # noqa: E402
from arborag.storage.lucene import plain_query, quote_phrase  # noqa: E402
from arborag.storage.schemas import NODES  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "hotpotqa"
STOPWORDS = frozenset(
    """a an and are as at be by did do does for from had has have he her his how in is it its of on or
    she that the their them they this to was were what when where which who whom whose why with would
    which""".split()
)


# ------------------------------------------------------------------------------------------------
# Nodes
# ------------------------------------------------------------------------------------------------
def hotpot_nodes(corpus_json: Path, *, max_tokens: int = 100) -> pa.Table:
    """Level-0 nodes from the HotpotQA corpus (title -> sentences): each paragraph's sentences
    packed greedily into chunks of <= ``max_tokens`` tokens (the arborag tokenizer), like the
    sentence segmenter does. A sentence longer than the limit becomes its own chunk.
    """
    from arborag.tokenizer import get_tokenizer

    corpus: dict[str, list[str]] = json.loads(corpus_json.read_text(encoding="utf-8"))
    tok = get_tokenizer()
    rows = []
    for title, sentences in corpus.items():
        sentences = [s for s in sentences if s.strip()]
        counts = tok.count_many(sentences)
        chunk: list[str] = []
        size = 0
        ordinal = 0

        def flush(title: str = title) -> None:
            nonlocal chunk, size, ordinal
            if chunk:
                text = "".join(chunk).strip()
                rows.append({"node_id": short_id("hotpot", title, ordinal), "level": 0, "text": text,
                             "n_tokens": size, "doc_ids": [title], "summary_of": None, "summarizer": "leaf",
                             "summary_status": "leaf", "created_by_run": "benchmark"})
                ordinal += 1
            chunk, size = [], 0

        for sentence, n in zip(sentences, counts):
            if chunk and size + n > max_tokens:
                flush()
            chunk.append(sentence)
            size += n
        flush()
    return pa.Table.from_pylist(rows, schema=NODES)


def corpus_nodes(corpus_dir: Path) -> pa.Table:
    """Every node of the published snapshot of a built corpus."""
    from arborag.storage.corpus import Corpus

    corpus = Corpus(corpus_dir)
    return corpus.read_snapshot("nodes")


# ------------------------------------------------------------------------------------------------
# Queries
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BenchQuery:
    text: str  # what the embedded engine gets
    lucene: bool
    words: list[str]  # what bm25s gets (no syntax)
    form: str


_ENTITY = re.compile(r"\b(?:[A-Z][\w'’.-]*)(?:\s+(?:of|the|de|and|[A-Z][\w'’.-]*))*(?<![\s])")


_WORD = re.compile(r"[^\W_][\w'’.-]*[^\W_.]|[^\W_]")


def _keywords(question: str) -> list[str]:
    return [w for w in _WORD.findall(question) if w.lower() not in STOPWORDS]


def _plain_words(text: str) -> list[str]:
    """The words of a query without any syntax (what bm25s gets)."""
    return plain_query(re.sub(r"\^\d+(?:\.\d+)?", " ", text)).replace("\\", "").split()


def _entities(question: str) -> list[str]:
    found = []
    for m in _ENTITY.finditer(question):
        phrase = re.sub(r"\s+(?:of|the|de|and)$", "", m.group()).strip(" .?'")
        if m.start() == 0 and " " not in phrase:  # a capitalised first word is not an entity
            continue
        if phrase and phrase.lower() not in STOPWORDS:
            found.append(phrase)
    return found


def make_queries(questions: list[str], n: int) -> list[BenchQuery]:
    """``n`` queries: the questions cycled through five forms (plain + four Lucene forms)."""
    out: list[BenchQuery] = []
    forms = ("plain", "keywords", "phrases", "required+boost", "and/or")
    i = 0
    while len(out) < n:
        question = questions[i % len(questions)]
        form = forms[(i // len(questions)) % len(forms)]
        i += 1
        kws = _keywords(question) or ["question"]
        ents = _entities(question)
        words = _plain_words(question)
        if form == "plain":
            out.append(BenchQuery(question, False, words, form))
            continue
        if form == "keywords":
            text = " ".join(plain_query(k) for k in kws)
        elif form == "phrases":
            rest = [plain_query(k) for k in kws if not any(k in e.split() for e in ents)]
            text = " ".join([quote_phrase(e) for e in ents] + rest)
        elif form == "required+boost":
            head = f"+{quote_phrase(ents[0])}" if ents else f"+{plain_query(kws[0])}"
            text = " ".join([head] + [f"{plain_query(k)}^2" if j == 0 else plain_query(k) for j, k in enumerate(kws[1:])])
        else:
            left = " OR ".join(plain_query(k) for k in kws[:3])
            text = f"({left}) AND {plain_query(kws[-1])}" if len(kws) > 1 else plain_query(kws[0])
        out.append(BenchQuery(text, True, _plain_words(text), form))
    return out


# ------------------------------------------------------------------------------------------------
# Engines
# ------------------------------------------------------------------------------------------------
def _percentiles(latencies_s: list[float]) -> dict[str, float]:
    arr = np.asarray(latencies_s) * 1000.0
    return {"p50_ms": float(np.percentile(arr, 50)), "p95_ms": float(np.percentile(arr, 95)),
            "mean_ms": float(arr.mean()), "qps": float(len(arr) / arr.sum() * 1000.0)}


class Embedded:
    """The embedded engine: build (timed) into ``workdir``, open, search."""

    name = "embedded (tantivy)"

    def __init__(self, nodes: pa.Table, *, k: int, workdir: Path) -> None:
        from arborag.storage.sparse import build_sparse_index, open_sparse_index

        cfg = SparseConfig()
        directory = workdir / "embedded" / "sparse"
        gc.collect()
        t0 = time.perf_counter()
        build_sparse_index(nodes, directory, cfg, snapshot_id="bench")
        self.index_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.index = open_sparse_index(directory, cfg)
        self.open_ms = (time.perf_counter() - t0) * 1000
        self.k = k

    def search(self, q: BenchQuery) -> int:
        return len(self.index.search(q.text, k=self.k, lucene=q.lucene))


class BM25S:
    """bm25s: its tokenizer (English stop words, no stemmer), index + save (timed), search."""

    name = "bm25s"

    def __init__(self, nodes: pa.Table, *, k: int, workdir: Path) -> None:
        import bm25s
        from bm25s.tokenization import Tokenizer

        texts = nodes.column("text").to_pylist()
        gc.collect()
        t0 = time.perf_counter()
        self.tokenizer = Tokenizer(stopwords="en", stemmer=None)
        corpus_ids = self.tokenizer.tokenize(texts, return_as="tuple", show_progress=False)
        self.retriever = bm25s.BM25()
        self.retriever.index(corpus_ids, show_progress=False)
        self.retriever.save(str(workdir / "bm25s"))  # the embedded build persists its index too
        self.index_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.retriever = bm25s.BM25.load(str(workdir / "bm25s"), mmap=True)
        self.open_ms = (time.perf_counter() - t0) * 1000
        self.k = min(k, len(texts))

    def search(self, q: BenchQuery) -> int:
        ids = self.tokenizer.tokenize([" ".join(q.words)], update_vocab=False, return_as="ids", show_progress=False)
        if not ids or not ids[0]:
            return 0
        _docs, scores = self.retriever.retrieve(ids, k=self.k, show_progress=False, n_threads=1)
        return int((scores[0] > 0).sum())  # bm25s always returns k rows; count real matches


def run_once(nodes: pa.Table, queries: list[BenchQuery], *, k: int, workdir: Path) -> dict[str, dict]:
    """Index with both engines, then time every query on both, interleaved (alternating which
    goes first), so load from other processes on the shared cores hits both alike.
    """
    engines = [Embedded(nodes, k=k, workdir=workdir), BM25S(nodes, k=k, workdir=workdir)]
    for engine in engines:
        for q in queries[:20]:  # warm-up
            engine.search(q)
    latencies: dict[str, list[float]] = {e.name: [] for e in engines}
    answered = {e.name: 0 for e in engines}
    gc.disable()
    try:
        for i, q in enumerate(queries):
            for engine in engines if i % 2 == 0 else engines[::-1]:
                t = time.perf_counter()
                found = engine.search(q)
                latencies[engine.name].append(time.perf_counter() - t)
                answered[engine.name] += bool(found)
    finally:
        gc.enable()
    return {
        e.name: {"index_s": e.index_s, "docs_per_s": nodes.num_rows / e.index_s, "open_ms": e.open_ms,
                 "answered": answered[e.name], **_percentiles(latencies[e.name])}
        for e in engines
    }


def syntax_check(nodes: pa.Table, *, workdir: Path, n: int = 50) -> dict:
    """Does ``+A -B`` / ``A^5 B`` / ``"A B"`` reach the engine? LanceDB FTS vs the embedded engine.

    For ``n`` node pairs (A = a word of node i, B = a word of another node that also contains A),
    counts results that break the query: a hit containing B for ``+A -B``, a hit without A.
    """
    import lancedb
    from lancedb.index import FTS

    from arborag.storage.sparse import analyze, build_sparse_index, open_sparse_index

    texts = nodes.column("text").to_pylist()
    node_ids = nodes.column("node_id").to_pylist()
    tokens = [set(analyze(t)) for t in texts]
    surface = [[w for w in dict.fromkeys(re.findall(r"[A-Za-z]{5,}", t)) if len(analyze(w)) == 1] for t in texts]
    rng = np.random.default_rng(7)
    pairs = []  # (a, b, a's token, b's token): surface words are queried, tokens are checked
    for i in rng.permutation(len(texts)):
        if not surface[i]:
            continue
        a = surface[i][0]
        ta = analyze(a)[0]
        others = [j for j in range(len(texts)) if j != i and ta in tokens[j]]
        for j in others:
            b = next((w for w in surface[j] if analyze(w)[0] not in tokens[i] and analyze(w)[0] != ta), None)
            if b:
                pairs.append((a, b, ta, analyze(b)[0]))
                break
        if len(pairs) >= n:
            break
    db = lancedb.connect(str(workdir / "lance"))
    table = db.create_table("nodes", data=pa.table({"node_id": node_ids, "text": texts}))
    table.create_index("text", config=FTS(with_position=True))
    cfg = SparseConfig()
    build_sparse_index(nodes, workdir / "syntax" / "sparse", cfg, snapshot_id="syntax")
    embedded = open_sparse_index(workdir / "syntax" / "sparse", cfg)
    by_id = dict(zip(node_ids, tokens))

    def lance(q: str) -> list[str]:
        return table.search(q, query_type="fts").limit(10).to_arrow().column("node_id").to_pylist()

    def ours(q: str) -> list[str]:
        return [h.node_id for h in embedded.search(q, k=10)]

    report = {}
    for name, search in (("lancedb_fts", lance), ("embedded", ours)):
        violations = hits = 0
        for a, b, ta, tb in pairs:
            for nid in search(f"+{a} -{b}"):
                hits += 1
                violations += (tb in by_id[nid]) or (ta not in by_id[nid])
        boost_first = sum(bool(r) and tb in by_id[r[0]] for a, b, ta, tb in pairs if (r := search(f"{a} {b}^20")))
        report[name] = {"queries": len(pairs), "hits": hits, "violations": violations, "b_first_with_boost": boost_first}
    return report


def _commit() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import git_commit

    return git_commit()


# ------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, help="a built corpus directory (reads the published nodes.parquet)")
    ap.add_argument("--hotpot-corpus", type=Path, default=DATA / "hotpotqa_train_corpus.json")
    ap.add_argument("--questions", type=Path, default=DATA / "hotpotqa_train.json")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="runs per engine; the best is reported")
    ap.add_argument("--max-tokens", type=int, default=100, help="chunk size for HotpotQA paragraphs")
    ap.add_argument("--no-syntax-check", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "sparse.md")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (20 queries, one run each)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.queries, args.repeat = 20, 1

    if args.corpus:
        nodes, source = corpus_nodes(args.corpus), f"corpus {args.corpus} (published snapshot, all levels)"
    else:
        nodes = hotpot_nodes(args.hotpot_corpus, max_tokens=args.max_tokens)
        source = f"{args.hotpot_corpus.name}: paragraphs packed into <= {args.max_tokens}-token level-0 nodes"
    questions = [q["question"] for q in json.loads(args.questions.read_text(encoding="utf-8"))]
    queries = make_queries(questions, args.queries)
    chars = sum(len(t) for t in nodes.column("text").to_pylist())

    runs: dict[str, list[dict]] = {Embedded.name: [], BM25S.name: []}
    with tempfile.TemporaryDirectory(prefix="arborag-sparse-bench-") as tmp:
        for r in range(args.repeat):
            for name, result in run_once(nodes, queries, k=args.k, workdir=Path(tmp) / f"run{r}").items():
                runs[name].append(result)
        syntax = None if args.no_syntax_check else syntax_check(nodes, workdir=Path(tmp))

    best = {name: {"docs_per_s": max(r["docs_per_s"] for r in rs), "p50_ms": min(r["p50_ms"] for r in rs),
                   "p95_ms": min(r["p95_ms"] for r in rs), "qps": max(r["qps"] for r in rs),
                   "open_ms": min(r["open_ms"] for r in rs), "answered": rs[0]["answered"],
                   "p50_runs": [round(r["p50_ms"], 4) for r in rs]}
            for name, rs in runs.items()}
    emb, ref = best["embedded (tantivy)"], best["bm25s"]
    import bm25s
    import tantivy

    lines = [
        "# Sparse index benchmark",
        "",
        "- command: `python benchmarks/sparse.py " + " ".join(sys.argv[1:] if argv is None else argv) + "`; commit " + _commit(),
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; host: {platform.machine()}, "
        f"{os.cpu_count()} cores, load average at end {', '.join(f'{x:.2f}' for x in os.getloadavg())} (shared machine)",
        f"- nodes: {nodes.num_rows:,} ({chars / 1e6:.2f} M chars) from {source}",
        f"- queries: {len(queries)} = {len(questions)} HotpotQA questions x forms "
        f"(plain, keywords, \"phrases\", +required^boost, (a OR b) AND c); k = {args.k}; "
        "latency per query includes parsing/analysis; engines timed interleaved, query by query; best of "
        f"{args.repeat} runs (p50 per run: embedded {emb['p50_runs']}, bm25s {ref['p50_runs']})",
        f"- versions: {getattr(tantivy, '__version__', 'tantivy ?')}, bm25s {bm25s.__version__} "
        "(bm25s: its own tokenizer, English stop words, no stemmer — PyStemmer is not installed; "
        "index time includes saving to disk for both)",
        "",
        "| engine | index docs/s | open ms | query p50 ms | query p95 ms | queries/s | queries with hits |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, b in best.items():
        open_ms = "—" if np.isnan(b["open_ms"]) else f"{b['open_ms']:.1f}"
        lines.append(f"| {name} | {b['docs_per_s']:,.0f} | {open_ms} | {b['p50_ms']:.3f} | {b['p95_ms']:.3f} | "
                     f"{b['qps']:,.0f} | {b['answered']}/{len(queries)} |")
    ratio50, ratio95 = emb["p50_ms"] / ref["p50_ms"], emb["p95_ms"] / ref["p95_ms"]
    lines.append(f"| **ratio embedded / bm25s** | {emb['docs_per_s'] / ref['docs_per_s']:.2f}x | | "
                 f"**{ratio50:.2f}x** | **{ratio95:.2f}x** | {emb['qps'] / ref['qps']:.2f}x | |")
    lines.append("")
    lines.append("\"Queries with hits\": the Lucene forms have required clauses (`+\"entity\"`, `(a OR b) AND c`) that "
                 "some questions' words cannot satisfy; bm25s only ever gets optional words.")
    lines.append("")
    lines.append(f"Target: embedded query latency within 3x of bm25s — p50 {ratio50:.2f}x, p95 {ratio95:.2f}x: "
                 f"{'met' if max(ratio50, ratio95) <= 3 else 'NOT met'}.")
    if syntax:
        lines += [
            "",
            "## Does the query syntax reach the engine? (LanceDB FTS vs embedded)",
            "",
            "For node word pairs (a, b) where some node holds both: `+a -b` must never return a node with b or "
            "without a; `a b^20` should rank a node with b first.",
            "",
            "| engine | `+a -b` queries | hits | hits breaking `+a -b` | `a b^20`: b-node first |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for name, s in syntax.items():
            lines.append(f"| {name} | {s['queries']} | {s['hits']} | {s['violations']} | {s['b_first_with_boost']}/{s['queries']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
