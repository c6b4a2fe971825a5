"""Shared helpers of the reliability suite (tests/reliability/): hostile files, real documents,
a chaotic fake LLM endpoint, subprocess runs of the CLI, and greps for leaked secrets.

Nothing here imports arborag at module level: the suite drives arborag through its CLI
(subprocesses) and its stable Python entry points, so the refactors under way do not break it.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fake_llm_server import FakeLLMServer, Step, error, reply, slow
from helpers.ingest import make_docx

REPO = Path(__file__).resolve().parents[2]  # tests/helpers/<this> -> the checkout
PYTHON = sys.executable
HOTPOT_CORPUS = REPO.parent / "shared" / "data" / "hotpotqa" / "hotpotqa_train_corpus.json"

__all__ = [
    "ChaosLLMServer", "Expect", "HOTPOT_CORPUS", "Proc", "cli", "cli_env", "find_markers",
    "make_hostile_corpus", "minimal_pdf", "read_documents", "read_runs", "write_hotpot_docs",
]


# ---------------------------------------------------------------------------------------------
# Running the CLI
# ---------------------------------------------------------------------------------------------
def cli_env(**extra: str) -> dict[str, str]:
    """The offline environment of scripts/env.sh plus ``extra``."""
    env = dict(os.environ)
    env.update({
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90", "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200", "NO_COLOR": "1",
    })
    env.update(extra)
    return env


@dataclass(frozen=True)
class Proc:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + "\n" + self.stderr


def cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 600, cwd: Path | None = None) -> Proc:
    """The ``arborag`` console script (beside this Python) in a subprocess; never raises on a non-zero exit."""
    script = Path(PYTHON).parent / "arborag"
    cmd = [str(script), *args] if script.exists() else [PYTHON, "-m", "arborag.cli.app", *args]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=dict(env or cli_env()), capture_output=True, text=True, timeout=timeout,
                          cwd=str(cwd or REPO), errors="replace")
    return Proc(cmd, done.returncode, done.stdout, done.stderr, time.perf_counter() - t0)


def python(code: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = 600) -> Proc:
    t0 = time.perf_counter()
    done = subprocess.run([PYTHON, "-c", code, *args], env=dict(env or cli_env()), capture_output=True,
                          text=True, timeout=timeout, cwd=str(REPO), errors="replace")
    return Proc([PYTHON, "-c", "..."], done.returncode, done.stdout, done.stderr, time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------------
# Reading tables without arborag
# ---------------------------------------------------------------------------------------------
def read_documents(corpus: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(corpus / "tables" / "documents.parquet").to_pylist()


def read_runs(corpus: Path) -> list[dict[str, Any]]:
    """The runs table, ``counts`` decoded from JSON."""
    import pyarrow.parquet as pq

    path = corpus / "tables" / "runs.parquet"
    if not path.exists():
        return []
    rows = pq.read_table(path).to_pylist()
    for row in rows:
        row["counts"] = json.loads(row["counts"]) if row.get("counts") else {}
    return rows


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------
def write_hotpot_docs(folder: Path, n: int, *, start: int = 0) -> list[Path]:
    """``n`` small .txt documents from the HotpotQA corpus paragraphs (title + sentences)."""
    data = json.loads(HOTPOT_CORPUS.read_text(encoding="utf-8"))
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, (title, sents) in enumerate(list(data.items())[start:start + n]):
        path = folder / f"doc{start + i:04d}.txt"
        path.write_text(f"{title}\n\n" + "".join(sents).strip() + "\n", encoding="utf-8")
        out.append(path)
    return out


def _pdf_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def minimal_pdf(lines: Sequence[str]) -> bytes:
    """A valid one-page PDF whose text layer holds ``lines`` (Helvetica); no lines = no text layer."""
    ops = ["BT", "/F1 12 Tf", "72 720 Td", "14 TL"]
    for line in lines:
        ops.append(f"({_pdf_escape(line)}) Tj T*")
    ops.append("ET")
    stream = "\n".join(ops).encode("latin-1") if lines else b""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % i + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def _encrypted_pdf(plain: bytes) -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(io.BytesIO(plain)).pages:
        writer.add_page(page)
    writer.encrypt(user_password="s3cret-user", owner_password="s3cret-owner")
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


@dataclass(frozen=True)
class Expect:
    """What ingesting one hostile entry must give.

    ``kind``: ``"ok"`` (a document whose text contains every ``needles``), ``"error"`` (an error
    row whose reason contains one of ``reasons``), ``"recorded"`` (either, but a row with a
    reason when it fails), ``"absent"`` (no row at all: hidden, outside the root, a folder).
    """

    kind: str
    needles: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


def make_hostile_corpus(root: Path, outside: Path, *, huge_mb: int = 50) -> dict[str, Expect]:
    """Fill ``root`` with good, bad and odd files; ``outside`` gets a file only a symlink reaches.

    Returns ``{relative path: Expect}``. Paths are relative to ``root``.
    """
    rng = random.Random(14)
    root.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    ex: dict[str, Expect] = {}

    def put(name: str, data: bytes | str, expect: Expect) -> None:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        ex[name] = expect

    good_pdf = minimal_pdf(["Reliable portable documents keep their words.", "The heron waits by the quiet river."])
    # -- good documents ------------------------------------------------------------------------
    put("good.txt", "The lighthouse keeper counted ships every night.\n", Expect("ok", ("lighthouse keeper counted ships",)))
    put("good.md", "# Orchard notes\n\nApples ripen in late September here.\n", Expect("ok", ("Apples ripen in late September",)))
    put("good.html", "<html><head><title>Bridge report</title></head><body><p>The old bridge was repaired in spring.</p></body></html>",
        Expect("ok", ("old bridge was repaired",)))
    put("good.pdf", good_pdf, Expect("ok", ("heron waits by the quiet river",)))
    put("good.docx", make_docx(None, ["Glaciers carve valleys slowly."]), Expect("ok", ("Glaciers carve valleys slowly",)))
    put("good.csv", "city,river\nParis,Seine\nCairo,Nile\n", Expect("ok", ("city: Cairo; river: Nile",)))
    put("good.jsonl", '{"text": "Owls hunt at dusk across the meadow."}\n', Expect("absent"))  # its record is the document
    ex["good.jsonl#L1"] = Expect("ok", ("Owls hunt at dusk",))
    put("x.txt/inner.md", "A folder named like a file still holds real notes.\n", Expect("ok", ("folder named like a file",)))
    # -- odd but readable ---------------------------------------------------------------------
    put("latin1.txt", "Le café était très animé à Noël.\n".encode("latin-1"), Expect("ok", ("café était très animé à Noël",)))
    put("utf16.txt", "Über den Wolken fliegt der Adler.\n".encode("utf-16"), Expect("ok", ("Über den Wolken fliegt der Adler",)))
    put("cp1252.txt", "He said \u201cwait\u201d \u2013 it\u2019s late.\n".encode("cp1252"), Expect("ok", ("\u201cwait\u201d", "it\u2019s late")))
    put("cjk.txt", "东京是日本的首都。北京是中国的首都。\n", Expect("ok", ("北京是中国的首都",)))
    put("rtl.txt", "مرحبا بالعالم. שלום עולם.\n", Expect("ok", ("مرحبا بالعالم", "שלום עולם")))
    put("name with\nnewline.txt", "A file name may hold a line break.\n", Expect("ok", ("file name may hold a line break",)))
    put("ones.txt", "a\n" * 100_000, Expect("ok", ("a\na\na",)))
    put("table_only.docx", make_docx(None, table=[["planet", "moons"], ["Mars", "two"]]), Expect("ok", ("Mars", "two")))
    put("ragged.csv", "a,b\n1\n2,3,4\n", Expect("ok", ("a: 1",)))
    put("mixed.jsonl", '{"text": "Whales sing in the deep ocean."}\nnot json at all\n', Expect("absent"))
    ex["mixed.jsonl#L1"] = Expect("ok", ("Whales sing in the deep ocean",))
    ex["mixed.jsonl#L2"] = Expect("error", reasons=("invalid JSON",))  # a record's row, not a file
    put("deep.html", "<html><body>" + "<div>" * 10_000 + "Deep nesting still has words." + "</div>" * 10_000 + "</body></html>",
        Expect("recorded", ("Deep nesting still has words",)))
    put("some_bad_utf8.txt", b"Caf\xc3\xa9 au lait \xff\xfe is served \xe2\x80\x94 warm.\n", Expect("ok", ("Café au lait",)))
    # -- bad: recorded with a reason ----------------------------------------------------------------
    put("empty.txt", b"", Expect("error", reasons=("empty",)))
    put("random.pdf", bytes(rng.getrandbits(8) for _ in range(4096)), Expect("error", reasons=("PDF",)))
    put("truncated.pdf", good_pdf[: len(good_pdf) // 2], Expect("recorded", ("heron",), reasons=("PDF", "no extractable text")))
    put("encrypted.pdf", _encrypted_pdf(good_pdf), Expect("error", reasons=("password", "encrypted")))
    put("zero.pdf", b"", Expect("error", reasons=("empty",)))
    put("scanned.pdf", minimal_pdf([]), Expect("error", reasons=("no extractable text",)))
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as zf:
        zf.writestr("hello.txt", "not a word document")
    put("zip.docx", zbuf.getvalue(), Expect("error", reasons=("DOCX",)))
    put("nul.txt", b"abc\x00def\x00" * 100, Expect("error", reasons=("binary",)))
    put("png.txt", b"\x89PNG\r\n\x1a\n" + bytes(rng.getrandbits(8) for _ in range(2048)), Expect("error", reasons=("binary",)))
    put("bom_only.txt", b"\xef\xbb\xbf", Expect("error", reasons=("empty",)))
    put("script_only.html", "<html><head><style>p{color:red}</style></head><body><script>var x = 1;</script></body></html>",
        Expect("error", reasons=("empty",)))
    put("header_only.csv", "a,b,c\n", Expect("error", reasons=("no data rows",)))
    put("broken.jsonl", "{not json\n[1, 2]\n", Expect("absent"))  # one error row per record
    ex["broken.jsonl#L1"] = Expect("error", reasons=("invalid JSON",))
    ex["broken.jsonl#L2"] = Expect("error", reasons=("not a JSON object",))
    put("whitespace.md", " \n\t\n   \n", Expect("error", reasons=("empty",)))
    huge = root / "huge_line.txt"
    with open(huge, "wb") as fh:  # one line, huge_mb MB: must be refused by a size limit, not read
        block = b"x" * (1 << 20)
        for _ in range(huge_mb):
            fh.write(block)
    ex["huge_line.txt"] = Expect("error", reasons=("too large", "too long", "max_chars", "max_tokens", "max_file_mb"))
    # -- links and special files --------------------------------------------------------------------
    os.symlink("loop_b.txt", root / "loop_a.txt")
    os.symlink("loop_a.txt", root / "loop_b.txt")
    ex["loop_a.txt"] = Expect("error", reasons=("symlink loop",))
    ex["loop_b.txt"] = Expect("error", reasons=("symlink loop",))
    os.symlink(root / "no_such_target.txt", root / "dangling.txt")
    ex["dangling.txt"] = Expect("error", reasons=("broken symlink",))
    os.mkfifo(root / "fifo.txt")
    ex["fifo.txt"] = Expect("error", reasons=("not a regular file",))
    secret = outside / "outside_secret.txt"
    secret.write_text("OUTSIDE-THE-ROOT private words must not be ingested.\n", encoding="utf-8")
    os.symlink(secret, root / "escape.txt")
    ex["escape.txt"] = Expect("absent")
    os.symlink("good.txt", root / "inside_link.txt")  # a link that stays inside: same content as good.txt
    ex["inside_link.txt"] = Expect("recorded")
    put(".hidden.txt", "Hidden files are skipped.\n", Expect("absent"))
    return ex


# ---------------------------------------------------------------------------------------------
# A chaotic OpenAI-compatible endpoint
# ---------------------------------------------------------------------------------------------
class ChaosLLMServer(FakeLLMServer):
    """:class:`FakeLLMServer` that fails a fixed share of requests, by arrival order.

    Of every 20 requests: 2 get HTTP 500, 2 get 429 with ``Retry-After: 0``, 2 time out
    (a reply slower than the client's timeout) — 30% — and 1 gets a 200 whose body is garbage
    (no ``choices``) — 5%. The rest are normal replies. ``counts`` says what was served.
    """

    PATTERN = {0: "500", 3: "429", 6: "timeout", 10: "500", 13: "429", 16: "timeout", 9: "garbage"}

    def __init__(self, *, timeout_delay_s: float = 2.5, **kw: Any) -> None:
        super().__init__(**kw)
        self.timeout_delay_s = timeout_delay_s
        self.n = 0
        self.counts: dict[str, int] = {"ok": 0, "500": 0, "429": 0, "timeout": 0, "garbage": 0}

    def _next_step(self, last_message: str) -> Step:
        with self._lock:
            kind = self.PATTERN.get(self.n % 20, "ok")
            self.n += 1
            self.counts[kind] += 1
        if kind == "500":
            return error(500, message="chaos: internal error")
        if kind == "429":
            return error(429, retry_after="0", message="chaos: slow down")
        if kind == "timeout":
            return slow(self.timeout_delay_s)
        if kind == "garbage":
            return Step(text="\x00GARBAGE\x00")
        return reply()

    def _completion(self, body: dict[str, Any], last: str, step: Step) -> dict[str, Any]:
        if step.text == "\x00GARBAGE\x00":
            return {"id": "garbage", "object": "nonsense", "garbage": [1, 2, 3]}
        return super()._completion(body, last, step)


# ---------------------------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------------------------
def iter_files(*roots: Path) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
            continue
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                p = Path(dirpath) / name
                if p.is_file() and not p.is_symlink():
                    yield p


def find_markers(markers: Sequence[str], *roots: Path, texts: Sequence[str] = ()) -> list[str]:
    """Every place (file path or ``text[i]``) where one of ``markers`` occurs (bytes, utf-8 and utf-16)."""
    needles = [m.encode() for m in markers] + [m.encode("utf-16-le") for m in markers]
    found = []
    for path in iter_files(*roots):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if any(n in data for n in needles):
            found.append(str(path))
    for i, text in enumerate(texts):
        if any(m in text for m in markers):
            found.append(f"text[{i}]")
    return found


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a process we started (and its group, started with ``start_new_session``)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def wait_for(predicate, *, timeout: float, interval: float = 0.02, proc: subprocess.Popen | None = None) -> bool:
    """Poll ``predicate`` until true (True), ``timeout`` (False) or ``proc`` exits (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            return bool(predicate())
        time.sleep(interval)
    return False


class Ticker(threading.Thread):
    """Run ``fn`` in a loop in a thread until stopped (used for in-process background work)."""

    def __init__(self, fn) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.fn()
