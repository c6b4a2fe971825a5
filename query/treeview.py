"""A self-contained HTML view of a published tree (no CDN, no JavaScript framework).

Roots (nodes with no parent) are listed first; each node is a ``<details>`` element a person
can expand to read its children, level by level down to the leaf chunks. A node shared by
several clusters (soft membership) appears under each parent, marked with its probability.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pyarrow.parquet as pq

from arborag.storage.corpus import Corpus
from arborag.storage.tables import atomic_write_bytes

__all__ = ["render_tree_html"]

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:70rem;color:#1d232a;padding:0 1rem}
h1{font-size:1.4rem;margin-bottom:.2rem} .meta{color:#5b6670;margin-bottom:1rem}
details{margin:.25rem 0 .25rem 1.1rem;border-left:2px solid #d8dee4;padding-left:.6rem}
summary{cursor:pointer;list-style:none} summary::-webkit-details-marker{display:none}
summary:before{content:'▸';display:inline-block;width:1rem;color:#8a96a3} details[open]>summary:before{content:'▾'}
.lvl{display:inline-block;min-width:3.2rem;font-weight:600;border-radius:4px;padding:0 .35rem;margin-right:.4rem;font-size:12px;text-align:center}
.l0{background:#eef2f6;color:#44505c}.l1{background:#dff3e4;color:#1f6f3a}.l2{background:#dcebff;color:#1b4f9c}.l3{background:#f3e5ff;color:#6b2aa6}.l4,.l5,.l6{background:#ffe8d6;color:#9a4b0d}
.txt{white-space:pre-wrap;margin:.3rem 0 .4rem 1rem;color:#2b333b} .p{color:#8a96a3;font-size:12px;margin-left:.4rem}
.leaf{margin:.2rem 0 .2rem 1.1rem;padding-left:.6rem;border-left:2px dotted #d8dee4}
.controls button{margin-right:.4rem}
.fail{color:#a3261b;font-size:12px;margin-left:.4rem}
"""

_JS = """
function setAll(open){document.querySelectorAll('details').forEach(d=>d.open=open)}
function openLevel(l){document.querySelectorAll('details').forEach(d=>d.open=(+d.dataset.level>=l))}
"""


def _preview(text: str, n: int = 140) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[:n] + " …"


def render_tree_html(corpus_dir: str | Path, out: str | Path, *, max_children: int | None = None) -> Path:
    corpus = Corpus(corpus_dir)
    snap = corpus.published_dir()
    info = json.loads((snap / "info.json").read_text(encoding="utf-8"))
    nodes = pq.read_table(snap / "nodes.parquet").to_pylist()
    edges = pq.read_table(snap / "edges.parquet").to_pylist()
    by_id = {n["node_id"]: n for n in nodes}
    children: dict[str, list[tuple[str, float]]] = {}
    has_parent: set[str] = set()
    for e in edges:
        children.setdefault(e["parent_id"], []).append((e["child_id"], float(e["probability"])))
        has_parent.add(e["child_id"])
    for lst in children.values():
        lst.sort(key=lambda cp: (by_id[cp[0]]["level"], cp[0]))
    roots = sorted((n for n in nodes if n["node_id"] not in has_parent and n["level"] > 0), key=lambda n: (-n["level"], n["node_id"]))
    orphan_leaves = [n for n in nodes if n["node_id"] not in has_parent and n["level"] == 0]

    titles: dict[str, str] = {}
    docs_path = corpus.table_path("documents")
    if docs_path.exists():
        d = pq.read_table(docs_path, columns=["doc_id", "title", "uri"])
        titles = {i: (t or Path(u).name) for i, t, u in zip(d.column("doc_id").to_pylist(), d.column("title").to_pylist(), d.column("uri").to_pylist())}

    parts: list[str] = []

    def badge(level: int) -> str:
        return f'<span class="lvl l{min(level, 6)}">{"leaf" if level == 0 else f"L{level}"}</span>'

    def emit(node_id: str, prob: float | None) -> None:
        n = by_id[node_id]
        p = f'<span class="p">p={prob:.2f}</span>' if prob is not None and prob < 0.999 else ""
        status = n.get("summary_status") or ""
        fail = f'<span class="fail">{html.escape(status)}</span>' if status.startswith("fallback") else ""
        src = ", ".join(titles.get(x, x[:8]) for x in n["doc_ids"][:3])
        if n["level"] == 0:
            parts.append(f'<div class="leaf">{badge(0)}{html.escape(_preview(n["text"], 90))}{p}'
                         f'<span class="p">{n["n_tokens"]} tok · {html.escape(src)}</span>'
                         f'<div class="txt">{html.escape(n["text"])}</div></div>')
            return
        kids = children.get(node_id, [])
        parts.append(f'<details data-level="{n["level"]}"><summary>{badge(n["level"])}{html.escape(_preview(n["text"]))}'
                     f'{p}<span class="p">{len(kids)} children · {n["n_tokens"]} tok</span>{fail}</summary>'
                     f'<div class="txt">{html.escape(n["text"])}</div>')
        shown = kids if max_children is None else kids[:max_children]
        for child_id, cp in shown:
            emit(child_id, cp)
        if len(shown) < len(kids):
            parts.append(f'<div class="p">… {len(kids) - len(shown)} more</div>')
        parts.append("</details>")

    for r in roots:
        emit(r["node_id"], None)
    for leaf in orphan_leaves:
        emit(leaf["node_id"], None)

    levels: dict[int, int] = {}
    for n in nodes:
        levels[n["level"]] = levels.get(n["level"], 0) + 1
    level_txt = ", ".join(f"level {k}: {v}" for k, v in sorted(levels.items()))
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>arborag tree — {html.escape(corpus.root.name)}</title><style>{_CSS}</style><script>{_JS}</script></head><body>
<h1>arborag tree — {html.escape(corpus.root.name)}</h1>
<div class="meta">snapshot {html.escape(str(info.get('snapshot')))} · strategy {html.escape(str(info.get('strategy')))} · {len(nodes)} nodes ({level_txt}) · {len(roots)} roots</div>
<div class="controls"><button onclick="setAll(true)">expand all</button><button onclick="setAll(false)">collapse all</button>
<button onclick="openLevel(2)">open top levels</button></div>
{''.join(parts)}
</body></html>"""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, page.encode("utf-8"))
    return out
