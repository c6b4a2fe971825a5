"""Views of a published tree: a self-contained HTML page, a terminal outline, a topics table.

- :func:`render_tree_html` (``arborag inspect tree --html``): no CDN, no JavaScript framework.
  Roots (nodes with no parent) are listed first; each node is a ``<details>`` element a person
  can expand to read its children, level by level down to the leaf chunks. A summary shows its
  label (title and keywords, ``tasks/summarize/labels.py``) and its size in leaves. A node shared by several
  clusters (soft membership) appears under each parent, marked with its probability.
- :func:`tree_outline` (``arborag inspect tree``): the same tree as indented lines, depth-limited.
- :func:`topics` (``arborag inspect topics``): the top levels as rows of label, size and documents —
  the offline answer to "what is this corpus about?".

A snapshot written before labels existed reads with null labels; the views then show the start of
the summary text instead.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow.parquet as pq

from arborag.storage.corpus import Corpus
from arborag.storage.tables import atomic_write_bytes, read_table
from arborag.storage.tree_tables import leaves_under, tree_sizes

__all__ = ["TreeData", "load_tree", "render_tree_html", "topics", "tree_outline"]

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
.title{font-weight:600;color:#111820} .kw{color:#5b6670;font-size:12px;margin-left:.5rem}
.kw b{font-weight:500;background:#f1f4f7;border-radius:3px;padding:0 .25rem;margin-right:.2rem;color:#3b4650}
"""

_JS = """
function setAll(open){document.querySelectorAll('details').forEach(d=>d.open=open)}
function openLevel(l){document.querySelectorAll('details').forEach(d=>d.open=(+d.dataset.level>=l))}
"""


def _preview(text: str, n: int = 140) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[:n] + " …"


@dataclass
class TreeData:
    """A published tree, read once: nodes (with labels and sizes), children per node, roots."""

    corpus: Corpus
    info: dict[str, Any]
    by_id: dict[str, dict[str, Any]]  # node row + n_leaves, n_children
    children: dict[str, list[tuple[str, float]]]  # parent -> (child, probability), leaves last
    roots: list[str]  # summary nodes with no parent, highest level first
    orphan_leaves: list[str]  # leaves in no cluster (a tree too small to cluster)
    doc_titles: dict[str, str]
    nodes: pl.DataFrame
    edges: pl.DataFrame

    def label(self, node_id: str, n: int = 90) -> str:
        """The node's title, or (no label: a leaf, an older snapshot) the start of its text."""
        row = self.by_id[node_id]
        return row.get("title") or _preview(row["text"], n)


def load_tree(corpus_dir: str | Path) -> TreeData:
    """Read the published snapshot's nodes, edges and document titles for the views (never the
    working tables: after a rollback or a dry run they describe another state)."""
    corpus = Corpus(corpus_dir)
    snap = corpus.published_dir()
    info = json.loads((snap / "info.json").read_text(encoding="utf-8"))
    nodes = pl.from_arrow(read_table("nodes", snap / "nodes.parquet", missing_ok=False))  # older snapshots: null labels
    edges = pl.from_arrow(read_table("edges", snap / "edges.parquet", missing_ok=False))
    assert isinstance(nodes, pl.DataFrame) and isinstance(edges, pl.DataFrame)
    sized = nodes.join(tree_sizes(nodes, edges), on="node_id", how="left", maintain_order="left")
    by_id = {r["node_id"]: r for r in sized.iter_rows(named=True)}
    children: dict[str, list[tuple[str, float]]] = {}
    for parent, child, prob in edges.select("parent_id", "child_id", "probability").iter_rows():
        children.setdefault(parent, []).append((child, float(prob)))
    for lst in children.values():
        lst.sort(key=lambda cp: (by_id[cp[0]]["level"] == 0, -by_id[cp[0]]["n_leaves"], cp[0]))  # biggest branches first
    has_parent = set(edges["child_id"].to_list())
    roots = sorted((i for i, r in by_id.items() if i not in has_parent and r["level"] > 0),
                   key=lambda i: (-by_id[i]["level"], -by_id[i]["n_leaves"], i))
    orphans = [i for i, r in by_id.items() if i not in has_parent and r["level"] == 0]
    titles: dict[str, str] = {}
    docs_path = snap / "documents.parquet"  # the snapshot's own documents (none in a snapshot written before they were kept)
    if docs_path.exists():
        d = pq.read_table(docs_path, columns=["doc_id", "title", "uri"])
        titles = {i: (t or Path(u).name) for i, t, u in zip(d.column("doc_id").to_pylist(), d.column("title").to_pylist(), d.column("uri").to_pylist())}
    return TreeData(corpus, info, by_id, children, roots, orphans, titles, nodes, edges)


def tree_outline(corpus_dir: str | Path, *, depth: int = 2, max_children: int | None = 8, keywords: int = 5) -> list[str]:
    """The tree as indented lines for a terminal: each summary's level, title, size (leaves,
    children, documents) and keywords; ``depth`` levels from the roots (1 = roots only), at most
    ``max_children`` children per node (None: all), the rest counted."""
    t = load_tree(corpus_dir)
    lines: list[str] = []

    def line(node_id: str, prefix: str, prob: float | None) -> str:
        r = t.by_id[node_id]
        p = f" p={prob:.2f}" if prob is not None and prob < 0.999 else ""
        if r["level"] == 0:
            return f"{prefix}leaf  {_preview(r['text'], 70)}  ({r['n_tokens']} tok){p}"
        kw = ", ".join((r.get("keywords") or [])[:keywords])
        size = f"{r['n_leaves']} leaves, {r['n_children']} children, {r['n_docs']} docs"
        return f"{prefix}L{r['level']}  {t.label(node_id, 70)}  ({size}){p}" + (f"  [{kw}]" if kw else "")

    def walk(node_id: str, indent: str, level: int, prob: float | None, last: bool, top: bool) -> None:
        branch = "" if top else ("└─ " if last else "├─ ")
        lines.append(line(node_id, indent + branch, prob))
        kids = t.children.get(node_id, [])
        if not kids:
            return
        child_indent = indent + ("" if top else ("   " if last else "│  "))
        if level >= depth:
            return
        shown = kids if max_children is None else kids[:max_children]
        for j, (child, cp) in enumerate(shown):
            walk(child, child_indent, level + 1, cp, j == len(shown) - 1 and len(shown) == len(kids), False)
        if len(shown) < len(kids):
            lines.append(f"{child_indent}└─ … {len(kids) - len(shown)} more")

    for root in t.roots:
        walk(root, "", 1, None, True, True)
    if t.orphan_leaves:
        lines.append(f"{len(t.orphan_leaves)} leaves in no cluster")
    return lines


def topics(corpus_dir: str | Path, *, levels: int = 2, docs: int = 3, keywords: int = 6) -> list[dict[str, Any]]:
    """The top ``levels`` summary levels as rows, biggest first within a level: ``level``,
    ``node_id``, ``title``, ``keywords``, ``leaves``, ``share`` (of all leaves), ``n_docs`` and
    ``documents`` (the ``docs`` documents with most leaves under it: title, leaves)."""
    t = load_tree(corpus_dir)
    top = int(t.nodes.select(pl.col("level").max()).item() or 0) if t.nodes.height else 0
    wanted = t.nodes.filter((pl.col("level") > max(0, top - levels)) & (pl.col("level") > 0)).select("node_id", "level")
    n_leaves = max(1, t.nodes.filter(pl.col("level") == 0).height)
    under = leaves_under(t.nodes, t.edges).join(wanted.select("node_id"), on="node_id", how="semi")
    leaf_doc = t.nodes.filter(pl.col("level") == 0).select(pl.col("node_id").alias("leaf_id"), pl.col("doc_ids").list.first().alias("doc_id"))
    per_doc = (under.join(leaf_doc, on="leaf_id").group_by("node_id", "doc_id").len()
               .sort(["node_id", "len", "doc_id"], descending=[False, True, False]))
    best = per_doc.group_by("node_id", maintain_order=True).agg(pl.col("doc_id").head(docs), pl.col("len").head(docs))
    best_of = {r["node_id"]: list(zip(r["doc_id"], r["len"])) for r in best.iter_rows(named=True)}
    rows = []
    for node_id, level in wanted.iter_rows():
        r = t.by_id[node_id]
        rows.append({
            "level": level, "node_id": node_id, "title": t.label(node_id, 60), "keywords": list(r.get("keywords") or [])[:keywords],
            "leaves": r["n_leaves"], "share": round(r["n_leaves"] / n_leaves, 4), "n_docs": r["n_docs"],
            "documents": [{"doc_id": d, "title": t.doc_titles.get(d, d[:12]), "leaves": int(n)} for d, n in best_of.get(node_id, [])],
        })
    rows.sort(key=lambda x: (-x["level"], -x["leaves"], x["node_id"]))
    return rows


def render_tree_html(corpus_dir: str | Path, out: str | Path, *, max_children: int | None = None) -> Path:
    t = load_tree(corpus_dir)
    corpus, info, by_id, children, titles = t.corpus, t.info, t.by_id, t.children, t.doc_titles
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
        head = (f'<span class="title">{html.escape(n["title"])}</span>' if n.get("title")
                else html.escape(_preview(n["text"])))
        kw = "".join(f"<b>{html.escape(k)}</b>" for k in (n.get("keywords") or [])[:6])
        parts.append(f'<details data-level="{n["level"]}"><summary>{badge(n["level"])}{head}'
                     f'{p}<span class="p">{n["n_leaves"]} leaves · {len(kids)} children · {n["n_tokens"]} tok</span>{fail}'
                     f'{f"<span class=kw>{kw}</span>" if kw else ""}</summary>'
                     f'<div class="txt">{html.escape(n["text"])}</div>')
        shown = kids if max_children is None else kids[:max_children]
        for child_id, cp in shown:
            emit(child_id, cp)
        if len(shown) < len(kids):
            parts.append(f'<div class="p">… {len(kids) - len(shown)} more</div>')
        parts.append("</details>")

    for r in t.roots:
        emit(r, None)
    for leaf in t.orphan_leaves:
        emit(leaf, None)

    levels: dict[int, int] = {}
    for n in by_id.values():
        levels[n["level"]] = levels.get(n["level"], 0) + 1
    level_txt = ", ".join(f"level {k}: {v}" for k, v in sorted(levels.items()))
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>arborag tree — {html.escape(corpus.root.name)}</title><style>{_CSS}</style><script>{_JS}</script></head><body>
<h1>arborag tree — {html.escape(corpus.root.name)}</h1>
<div class="meta">snapshot {html.escape(str(info.get('snapshot')))} · strategy {html.escape(str(info.get('strategy')))} · {len(by_id)} nodes ({level_txt}) · {len(t.roots)} roots</div>
<div class="controls"><button onclick="setAll(true)">expand all</button><button onclick="setAll(false)">collapse all</button>
<button onclick="openLevel(2)">open top levels</button></div>
{''.join(parts)}
</body></html>"""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, page.encode("utf-8"))
    return out
