"""Dataset adapters: benchmark files -> one internal format the normal build flow can ingest.

Every adapter produces, under a dataset folder::

    ROOT/
      queries.parquet    QUERIES schema (storage.schemas): qid, question, answers, gold_ids, gold_texts, type
      evidence.parquet   EVIDENCE schema (storage.schemas): gold_id -> corpus file (+ title, text)
      corpus/            the files `run_build` ingests (.txt written here, PDFs copied as they are)
      dataset.json       name, source paths, counts, fingerprint (content hash of all of the above)

Gold evidence is matched to retrieved nodes through the *built* corpus:
:func:`arborag.tasks.evaluation.gold.resolve_gold`
maps each gold id to the doc_ids (content hashes) of the ingested documents via the documents
table's ``uri`` (file name), then ``title``, then text containment as a last resort.

| dataset | corpus files | gold_ids | gold_texts | match |
| --- | --- | --- | --- | --- |
| hotpotqa | one .txt per paragraph: first line = title, then the sentences | supporting-fact titles | title + paragraph | doc |
| narrativeqa | one .txt per distinct passage (``nqa-<hash>.txt``) | the passage id | the passage | doc |
| financebench | the filings' PDFs, unchanged | ``<doc_name>#page=<n>`` | the evidence text | doc+text |
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

import pyarrow as pa
import pyarrow.parquet as pq

from arborag.errors import ArboragError, ConfigError
from arborag.hashing import hash_bytes, hash_json, hash_text
from arborag.storage.schemas import EVIDENCE, QUERIES
from arborag.storage.tables import atomic_path, atomic_write_bytes, read_table, write_table
from arborag.tasks.evaluation.metrics import MatchMode

__all__ = [
    "DATASETS",
    "EVIDENCE",
    "CorpusFile",
    "CorpusScope",
    "DatasetName",
    "LoadedDataset",
    "PreparedDataset",
    "corpus_scope",
    "default_data_dir",
    "load_dataset",
    "load_financebench",
    "load_hotpotqa",
    "load_narrativeqa",
    "load_thematic",
    "prepare_dataset",
    "read_prepared",
    "safe_filename",
]

DatasetName = Literal["hotpotqa", "narrativeqa", "financebench", "thematic"]
DATASETS: tuple[str, ...] = get_args(DatasetName)
CorpusScope = Literal["auto", "full", "questions"]

MATCH_MODE: dict[str, MatchMode] = {"hotpotqa": "doc", "narrativeqa": "doc", "financebench": "doc+text", "thematic": "doc"}

#: Hand-written thematic questions (tasks/evaluation/data/README.md says who wrote them and how).
THEMATIC_FILE = Path(__file__).resolve().parent / "data" / "thematic.jsonl"

_REPO = Path(__file__).resolve().parents[2]


def default_data_dir() -> Path:
    """``$ARBORAG_DATA_DIR`` or ``../shared/data`` beside the checkout."""
    env = os.environ.get("ARBORAG_DATA_DIR")
    return Path(env) if env else _REPO.parent / "shared" / "data"


@dataclass(frozen=True, slots=True)
class CorpusFile:
    """One file of the corpus folder: ``text`` is written as UTF-8, or ``source`` is copied."""

    name: str
    title: str
    text: str | None = None
    source: Path | None = None


@dataclass(frozen=True)
class LoadedDataset:
    name: str
    queries: pa.Table  # QUERIES
    evidence: pa.Table  # EVIDENCE
    files: list[CorpusFile]
    sources: list[str]
    match: MatchMode


@dataclass(frozen=True)
class PreparedDataset:
    name: str
    root: Path
    queries_path: Path
    evidence_path: Path
    corpus_dir: Path
    match: MatchMode
    fingerprint: str
    n_queries: int
    n_files: int
    sources: tuple[str, ...] = ()

    def queries(self) -> pa.Table:
        return read_table("queries", self.queries_path, missing_ok=False)

    def evidence(self) -> pa.Table:
        return _conform_evidence(pq.read_table(self.evidence_path))


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------
_UNSAFE = re.compile(r"[^A-Za-z0-9._()-]+")


def safe_filename(title: str, *, max_len: int = 80) -> str:
    """A portable file stem for ``title``: ASCII letters/digits/._()-, runs of others -> '_'."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    stem = _UNSAFE.sub("_", ascii_title).strip("._-")[:max_len].rstrip("._-")
    return stem or "untitled"


def _unique_names(titles: Sequence[str], suffix: str) -> list[str]:
    """File names for ``titles``; a case-insensitive collision gets a short hash of the title."""
    used: set[str] = set()
    out = []
    for title in titles:
        name = safe_filename(title) + suffix
        if name.lower() in used:
            name = f"{safe_filename(title, max_len=70)}-{hash_text(title, digest_size=4)}{suffix}"
        used.add(name.lower())
        out.append(name)
    return out


def _queries_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=QUERIES)


def _evidence_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=EVIDENCE)


def _conform_evidence(table: pa.Table) -> pa.Table:
    return table.select(EVIDENCE.names).cast(EVIDENCE)


def _need(path: Path) -> Path:
    if not path.exists():
        raise ConfigError(f"dataset file {path} does not exist; pass --data-dir or set ARBORAG_DATA_DIR")
    return path


def _limit(items: list, limit: int | None) -> list:
    return items if limit is None else items[: max(0, limit)]


# --------------------------------------------------------------------------------------------
# Adapters
# --------------------------------------------------------------------------------------------
def load_hotpotqa(data_dir: Path, *, limit: int | None = None, scope: CorpusScope = "auto") -> LoadedDataset:
    """HotpotQA sample: questions + the shared 994-paragraph corpus (title -> sentences)."""
    qpath = _need(data_dir / "hotpotqa" / "hotpotqa_train.json")
    cpath = _need(data_dir / "hotpotqa" / "hotpotqa_train_corpus.json")
    questions = _limit(json.loads(qpath.read_text(encoding="utf-8")), limit)
    corpus: dict[str, list[str]] = json.loads(cpath.read_text(encoding="utf-8"))
    if scope == "questions" or (scope == "auto" and limit is not None):
        keep = {title for q in questions for title, _ in q["context"]}
        titles = [t for t in corpus if t in keep]
    else:
        titles = list(corpus)
    names = _unique_names(titles, ".txt")
    texts = {t: f"{t}\n{''.join(corpus[t]).strip()}" for t in titles}
    file_of = dict(zip(titles, names))
    files = [CorpusFile(name=file_of[t], title=t, text=texts[t]) for t in titles]

    rows = []
    for q in questions:
        gold = list(dict.fromkeys(title for title, _ in q["supporting_facts"]))
        missing = [t for t in gold if t not in texts]
        if missing:
            raise ArboragError(f"hotpotqa question {q['_id']}: gold paragraphs {missing} are not in the corpus")
        rows.append(
            {
                "qid": q["_id"],
                "question": q["question"],
                "answers": [q["answer"]],
                "gold_ids": gold,
                "gold_texts": [texts[t] for t in gold],
                "type": q.get("type") or "hotpotqa",
            }
        )
    evidence = [{"gold_id": t, "file": file_of[t], "title": t, "text": texts[t]} for t in titles]
    return LoadedDataset(
        "hotpotqa", _queries_table(rows), _evidence_table(evidence), files, [str(qpath), str(cpath)], MATCH_MODE["hotpotqa"]
    )


def load_narrativeqa(data_dir: Path, *, limit: int | None = None, scope: CorpusScope = "auto") -> LoadedDataset:
    """NarrativeQA tiny: question, two reference answers, the plot-summary passage (the gold)."""
    path = _need(data_dir / "narrativeqa" / "test-tiny.jsonl")
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    selected = _limit(records, limit)
    pool = selected if (scope == "questions" or (scope == "auto" and limit is not None)) else records
    passages = list(dict.fromkeys(r["passage"] for r in pool))
    pid = {p: f"nqa-{hash_text(p, digest_size=6)}" for p in passages}
    files = [CorpusFile(name=f"{pid[p]}.txt", title=pid[p], text=p) for p in passages]
    rows = []
    for i, r in enumerate(selected):
        answers = r["answer"] if isinstance(r["answer"], list) else [r["answer"]]
        rows.append(
            {
                "qid": f"nqa-q{i:03d}",
                "question": r["question"],
                "answers": [str(a) for a in answers],
                "gold_ids": [pid[r["passage"]]],
                "gold_texts": [r["passage"]],
                "type": "narrativeqa",
            }
        )
    evidence = [{"gold_id": pid[p], "file": f"{pid[p]}.txt", "title": pid[p], "text": p} for p in passages]
    return LoadedDataset(
        "narrativeqa", _queries_table(rows), _evidence_table(evidence), files, [str(path)], MATCH_MODE["narrativeqa"]
    )


def load_financebench(data_dir: Path, *, limit: int | None = None, scope: CorpusScope = "auto") -> LoadedDataset:
    """FinanceBench sample: the filings' PDFs and questions with evidence text + page."""
    qpath = _need(data_dir / "financebench" / "questions.jsonl")
    pdf_dir = _need(data_dir / "financebench" / "pdfs")
    records = [json.loads(line) for line in qpath.read_text(encoding="utf-8").splitlines() if line.strip()]
    selected = _limit(records, limit)
    pool = selected if (scope == "questions" or (scope == "auto" and limit is not None)) else records
    doc_names = list(dict.fromkeys([r["doc_name"] for r in pool] + [e["doc_name"] for r in pool for e in r["evidence"]]))
    if scope == "full" or (scope == "auto" and limit is None):
        doc_names = sorted({p.stem for p in pdf_dir.glob("*.pdf")} | set(doc_names))
    files = []
    for name in doc_names:
        src = pdf_dir / f"{name}.pdf"
        if src.exists():
            files.append(CorpusFile(name=f"{name}.pdf", title=name, source=src))
    rows: list[dict[str, Any]] = []
    evidence: dict[str, dict[str, str]] = {}
    for r in selected:
        gold_ids, gold_texts = [], []
        for e in r["evidence"]:
            gid = f"{e['doc_name']}#page={e.get('evidence_page_num')}"
            if gid in gold_ids:
                continue
            gold_ids.append(gid)
            gold_texts.append(e["evidence_text"])
            evidence.setdefault(
                gid, {"gold_id": gid, "file": f"{e['doc_name']}.pdf", "title": e["doc_name"], "text": e["evidence_text"]}
            )
        rows.append(
            {
                "qid": r["financebench_id"],
                "question": r["question"],
                "answers": [str(r["answer"])],
                "gold_ids": gold_ids,
                "gold_texts": gold_texts,
                "type": r.get("question_type") or "financebench",
            }
        )
    return LoadedDataset(
        "financebench",
        _queries_table(rows),
        _evidence_table(list(evidence.values())),
        files,
        [str(qpath), str(pdf_dir)],
        MATCH_MODE["financebench"],
    )


def load_thematic(data_dir: Path, *, limit: int | None = None, scope: CorpusScope = "auto") -> LoadedDataset:
    """Hand-written thematic questions (``tasks/evaluation/data/thematic.jsonl``) over the
    NarrativeQA sample's 47 plot summaries: questions about a whole story or a theme shared by
    several. No reference answers (no hit rate): recall = gold documents drawn on. A gold
    document is named by a phrase only its passage contains."""
    base = load_narrativeqa(data_dir, scope="full")
    records = [json.loads(line) for line in THEMATIC_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    selected = _limit(records, limit)
    texts = {f.title: f.text or "" for f in base.files}
    rows = []
    for r in selected:
        gold = []
        for phrase in r["gold_passages_containing"]:
            found = [pid for pid, t in texts.items() if phrase in t]
            if len(found) != 1:
                raise ArboragError(f"thematic question {r['qid']}: the phrase {phrase!r} is in {len(found)} passages, not 1; "
                                   f"fix {THEMATIC_FILE}")
            gold.append(found[0])
        rows.append({"qid": r["qid"], "question": r["question"], "answers": [], "gold_ids": gold,
                     "gold_texts": [texts[g] for g in gold], "type": r.get("type") or "thematic"})
    keep = {g for row in rows for g in row["gold_ids"]}
    files = base.files if not (scope == "questions" or (scope == "auto" and limit is not None)) else [f for f in base.files if f.title in keep]
    evidence = [{"gold_id": f.title, "file": f.name, "title": f.title, "text": f.text} for f in files]
    return LoadedDataset("thematic", _queries_table(rows), _evidence_table(evidence), files, [str(THEMATIC_FILE), *base.sources],
                         MATCH_MODE["thematic"])


_LOADERS = {"hotpotqa": load_hotpotqa, "narrativeqa": load_narrativeqa, "financebench": load_financebench, "thematic": load_thematic}


def corpus_scope(value: str) -> CorpusScope:
    """``value`` as a :data:`CorpusScope`; a ConfigError naming the choices for anything else."""
    if value in get_args(CorpusScope):
        return cast(CorpusScope, value)
    raise ConfigError(f"unknown corpus scope {value!r}; choose one of {', '.join(get_args(CorpusScope))}")


def load_dataset(
    name: str, data_dir: Path | None = None, *, limit: int | None = None, scope: CorpusScope = "auto"
) -> LoadedDataset:
    """Read a dataset into memory (no files written). ``limit``: the first N questions.

    ``scope``: ``full`` keeps the whole corpus; ``questions`` keeps only the documents the
    selected questions draw on (HotpotQA: their 10 context paragraphs each); ``auto`` is
    ``questions`` when ``limit`` is set, else ``full``.
    """
    if name not in _LOADERS:
        raise ConfigError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    scope = corpus_scope(scope)
    return _LOADERS[name](Path(data_dir) if data_dir is not None else default_data_dir(), limit=limit, scope=scope)


# --------------------------------------------------------------------------------------------
# Writing and reading the prepared folder
# --------------------------------------------------------------------------------------------
def _parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def _file_bytes(f: CorpusFile) -> bytes:
    if f.text is not None:
        return f.text.encode("utf-8")
    assert f.source is not None
    return Path(f.source).read_bytes()


def _write_fast(path: Path, data: bytes) -> None:
    """Temp file + rename (never half a file), without the fsync of atomic_write_bytes:
    a thousand small corpus files would otherwise take seconds, and they are re-derivable."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def prepare_dataset(
    name: str,
    out_dir: Path,
    *,
    data_dir: Path | None = None,
    limit: int | None = None,
    scope: CorpusScope = "auto",
) -> PreparedDataset:
    """Write queries.parquet, evidence.parquet, corpus/ and dataset.json under ``out_dir``.

    Idempotent: files whose bytes are unchanged are not rewritten (their mtimes stay), and
    corpus files that no longer belong to the dataset are removed.
    """
    ds = load_dataset(name, data_dir, limit=limit, scope=scope)
    root = Path(out_dir)
    corpus_dir = root / "corpus"
    corpus_dir.mkdir(parents=True, exist_ok=True)
    file_hashes = {}
    for f in ds.files:
        data = _file_bytes(f)
        file_hashes[f.name] = hash_bytes(data)
        target = corpus_dir / f.name
        if not (target.exists() and target.stat().st_size == len(data) and target.read_bytes() == data):
            _write_fast(target, data)
    wanted = set(file_hashes)
    for stale in corpus_dir.iterdir():
        if stale.name not in wanted:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()

    queries_path = write_table("queries", ds.queries, root / "queries.parquet")
    evidence_path = root / "evidence.parquet"
    atomic_write_bytes(evidence_path, _parquet_bytes(ds.evidence))
    fingerprint = hash_json(
        {
            "name": name,
            "queries": ds.queries.to_pylist(),
            "evidence": ds.evidence.to_pylist(),
            "files": sorted(file_hashes.items()),
        }
    )
    prepared = PreparedDataset(
        name=name,
        root=root,
        queries_path=queries_path,
        evidence_path=evidence_path,
        corpus_dir=corpus_dir,
        match=ds.match,
        fingerprint=fingerprint,
        n_queries=ds.queries.num_rows,
        n_files=len(ds.files),
        sources=tuple(ds.sources),
    )
    meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(prepared).items()}
    meta["sources"] = list(prepared.sources)
    meta["limit"] = limit
    meta["scope"] = scope
    atomic_write_bytes(root / "dataset.json", json.dumps(meta, indent=2, sort_keys=True).encode())
    return prepared


def read_prepared(root: Path) -> PreparedDataset:
    """The :class:`PreparedDataset` a previous :func:`prepare_dataset` wrote under ``root``."""
    meta = json.loads((Path(root) / "dataset.json").read_text(encoding="utf-8"))
    return PreparedDataset(
        name=meta["name"],
        root=Path(meta["root"]),
        queries_path=Path(meta["queries_path"]),
        evidence_path=Path(meta["evidence_path"]),
        corpus_dir=Path(meta["corpus_dir"]),
        match=meta["match"],
        fingerprint=meta["fingerprint"],
        n_queries=int(meta["n_queries"]),
        n_files=int(meta["n_files"]),
        sources=tuple(meta.get("sources", ())),
    )
