// arborag search page: plain DOM, no framework. Every value from the server is set with
// textContent (never innerHTML), so a document's text cannot inject markup.
"use strict";
const $ = (id) => document.getElementById(id);
const LEVEL_NAMES = ["leaf", "summary", "summary", "summary", "summary"];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else if (k === "onclick") node.onclick = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function levelBadge(level) {
  return el("span", {class: `lvl l${Math.min(level, 4)}`, "data-level": level}, `L${level} ${LEVEL_NAMES[Math.min(level, 4)]}`);
}

// Source texts are often hard-wrapped: join single line breaks, keep paragraph breaks.
const unwrap = (text) => text.replace(/([^\n])\n(?!\n)/g, "$1 ");

function sourcesText(sources) {
  const names = sources.slice(0, 3).map((s) => s.title || (s.uri || "").split("/").pop() || s.doc_id.slice(0, 8));
  return names.join(", ") + (sources.length > 3 ? ` +${sources.length - 3}` : "");
}

async function api(method, path, body) {
  const headers = {"Content-Type": "application/json"};
  const token = $("token").value || sessionStorage.getItem("arborag-token");
  if (token) headers["Authorization"] = `Bearer ${token}`;
  const resp = await fetch(path, {method, headers, body: body ? JSON.stringify(body) : undefined});
  const data = await resp.json().catch(() => ({detail: resp.statusText}));
  if (!resp.ok) {
    if (resp.status === 401 || resp.status === 403) $("token-box").hidden = false;
    const where = data.position != null ? ` (at position ${data.position})` : "";
    throw new Error(`${resp.status}: ${data.detail || "request failed"}${where}`);
  }
  if (token) sessionStorage.setItem("arborag-token", token);
  return data;
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "muted";
}

function renderHits(data) {
  const box = $("results");
  box.replaceChildren();
  if (data.lucene) {
    box.append(el("div", {class: "warn"},
      `Lucene query not understood at position ${data.lucene.position}: ${data.lucene.error} — searched its words instead.`));
  }
  if (!data.hits.length) box.append(el("p", {class: "muted"}, "No hits."));
  data.hits.forEach((h, i) => {
    const text = el("div", {class: "text", title: "click to expand"}, unwrap(h.text));
    text.onclick = () => text.classList.toggle("open");
    box.append(el("article", {class: "hit", "data-node": h.node_id, "data-level": h.level},
      ...labelLine(h),
      el("div", {class: "meta"},
        el("span", {class: "rank"}, `#${i + 1}`), levelBadge(h.level),
        el("span", {class: "score", title: "higher is better"}, h.score.toFixed(3)),
        el("span", {class: "muted"}, `${h.tokens} tokens`),
        el("span", {class: "src"}, sourcesText(h.sources)),
        el("button", {class: "link right", type: "button", onclick: () => select(h.node_id)}, "parents / children ›")),
      text));
  });
}

// A summary's label (title + keywords, computed at build time); nothing for leaves and older snapshots.
function labelLine(n) {
  if (!n.title) return [];
  const kws = (n.keywords || []).slice(0, 6).map((k) => el("span", {class: "kw"}, k));
  return [el("div", {class: "label"}, el("span", {class: "title"}, n.title), ...kws)];
}

function refList(title, refs) {
  const out = [el("h3", {}, `${title} (${refs.length})`)];
  if (!refs.length) out.push(el("div", {class: "muted"}, "none"));
  const selected = document.querySelector("article.hit.selected")?.dataset.node;
  for (const r of refs) {
    out.push(el("button", {class: r.node_id === selected ? "ref current" : "ref", type: "button", "data-node": r.node_id, onclick: () => showNode(r.node_id)},
      levelBadge(r.level), el("span", {class: "p"}, `p=${r.probability.toFixed(2)} · ${r.tokens} tok`), " ",
      r.title ? el("strong", {}, r.title) : r.preview));
  }
  return out;
}

function select(id) {  // highlight the hit whose tree the panel starts from
  document.querySelectorAll("article.hit").forEach((a) => a.classList.toggle("selected", a.dataset.node === id));
  showNode(id);
}

let answeredFrom = null;  // the snapshot the shown hits came from, when a request named one

async function showNode(id) {
  const aside = $("node");
  try {
    const query = answeredFrom ? `?snapshot=${encodeURIComponent(answeredFrom)}` : "";
    const n = await api("GET", `/nodes/${encodeURIComponent(id)}${query}`);
    aside.replaceChildren(
      el("h2", {}, levelBadge(n.level), " node ", el("code", {}, n.node_id)),
      ...labelLine(n),
      el("div", {class: "muted"}, `${n.tokens} tokens · ${sourcesText(n.sources)} · ${n.summarizer || ""}`),
      el("div", {class: "text"}, unwrap(n.text)),
      ...refList("parents", n.parents), ...refList("children", n.children));
    aside.hidden = false;
    document.querySelector("main").classList.add("with-node");
  } catch (err) {
    setStatus(err.message, true);
  }
}

async function search(event) {
  event.preventDefault();
  const budget = parseInt($("budget").value, 10);
  const body = {text: $("q").value, mode: $("mode").value, budget: Number.isFinite(budget) ? budget : null, lucene: $("lucene").checked};
  if ($("snap").value) body.snapshot = $("snap").value;
  setStatus("searching…");
  try {
    const data = await api("POST", "/search", body);
    answeredFrom = body.snapshot ? data.snapshot : null;
    $("results").dataset.snapshot = data.snapshot;
    renderHits(data);
    const leaves = data.hits.filter((h) => h.level === 0).length;
    const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
    setStatus(`${plural(data.hits.length, "hit", "hits")} · ${data.tokens} tokens (budget ${data.budget ?? "none"}) · ` +
      `${plural(data.hits.length - leaves, "summary", "summaries")}, ${plural(leaves, "leaf", "leaves")} · ` +
      `${data.mode} · ${data.took_ms.toFixed(1)} ms · answered from snapshot ${data.snapshot}` +
      (answeredFrom ? " (an earlier snapshot, not the published one)" : ""));
  } catch (err) {
    $("results").replaceChildren();
    setStatus(err.message, true);
  }
}

async function init() {
  $("search").addEventListener("submit", search);
  $("snap").addEventListener("focus", listSnapshots);
  try {
    const h = await (await fetch("/health")).json();
    $("snapshot").textContent = h.snapshot ? `snapshot ${h.snapshot}` : "no index published yet";
    if (h.auth) $("token-box").hidden = false;
    await listSnapshots();
  } catch (err) {
    $("snapshot").textContent = "server unreachable";
  }
}

async function listSnapshots() {  // the retained snapshots a search may name (GET /snapshots)
  try {
    const list = await api("GET", "/snapshots");
    const keep = $("snap").value;
    $("snap").replaceChildren(el("option", {value: ""}, "published"),
      ...list.snapshots.filter((s) => !s.published).map((s) =>
        el("option", {value: s.id}, `${s.id} · ${s.published_at ? s.published_at.slice(0, 19).replace("T", " ") : "?"}${s.pinned ? " · pinned" : ""}`)));
    $("snap").value = keep;
  } catch (err) {
    // no token yet (401) or an old server: searching the published snapshot still works
  }
}
init();
