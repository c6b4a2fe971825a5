"""A label for every summary node: keywords by class-based TF-IDF and a short title (docs/METHODS.md §10).

:func:`label_nodes` is pure: it takes the ``nodes`` and ``edges`` tables and returns ``nodes`` with
its ``keywords``, ``title`` and ``title_source`` columns filled for every summary node (leaves keep
nulls). It is a table transform in polars over Arrow:

- **The class document of a cluster** is the set of leaf chunks under it (followed down the edges;
  soft membership means a leaf may be under several clusters). Words are runs of letters/digits
  starting with a letter, lowercased; English stop words and words shorter than 3 characters are
  dropped. A term counts once per leaf (binary term frequency), so a word repeated inside one
  chunk does not outweigh a word that runs through the cluster.
- **c-TF-IDF** (BERTopic's ``ClassTfidfTransformer``): every summary node of a level is one class
  (per-document trees: of a level of one document's tree);
  ``tf`` is the class's term counts L1-normalised, ``idf = log(1 + A / f_t)`` with ``A`` the mean
  number of term occurrences per class and ``f_t`` the term's count over all classes of the level.
  So a keyword is frequent in this cluster and rare in its siblings at the same level.
- **keywords**: the :data:`KEYWORDS` best terms (score, then term, descending/ascending: ties are
  deterministic). **title**: the first :data:`TITLE_WORDS` keywords in the spelling most used in
  the cluster's leaves, first letter upper-cased, joined with " · " (``title_source = "ctfidf"``);
  a keyword whose first five letters repeat an earlier one's is skipped ("Jamaican", not
  "Jamaican · Jamaica").
  A cluster with no usable word (numbers only, say) gets the start of its summary text as title
  (``title_source = "text"``), so every summary node has a title.
- **titler** (optional, e.g. :func:`llm_titler`): called once with every cluster whose label is
  new; a non-empty one-line answer replaces the keyword title (``title_source = "llm"``); an
  empty or failed answer keeps the keyword title.
- **previous** (``arborag update``): a summary node whose ``node_id`` was already labelled in the
  previous snapshot keeps that label (same id = same children = same leaves); only new summaries
  are labelled, and only they go to the titler. Labels follow their summaries.

Cost: one tokenisation of the leaves (polars' regex ``extract_all``), then one join + group-by per
level; on 2,000 leaves it is a fraction of a second.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl
import pyarrow as pa

from arborag.storage.schemas import NODES
from arborag.storage.tree_tables import leaves_under
from arborag.storage.frames import frame, to_table

__all__ = ["KEYWORDS", "LABEL_COLUMNS", "TITLE_WORDS", "LabelRequest", "Titler", "ctfidf", "fold_plurals", "leaf_terms", "label_nodes",
           "llm_titler", "STOP_WORDS"]

#: keywords stored per summary node
KEYWORDS = 8
#: keywords a title is built from
TITLE_WORDS = 3
#: the nodes columns this module fills (nullable; older snapshots read them as null)
LABEL_COLUMNS = ("keywords", "title", "title_source")
#: a word: a letter, then letters/digits, with inner apostrophes or hyphens ("o'brien", "post-war")
WORD = r"\p{L}[\p{L}\p{N}]*(?:['’-]\p{L}[\p{L}\p{N}]*)*"
_MIN_LEN = 3

#: scikit-learn's English stop-word list (BSD), plus words that say nothing about a topic
STOP_WORDS: frozenset[str] = frozenset("""
a about above across after afterwards again against all almost alone along already also although always am among amongst
amoungst amount an and another any anyhow anyone anything anyway anywhere are around as at back be became because become
becomes becoming been before beforehand behind being below beside besides between beyond bill both bottom but by call can
cannot cant co con could couldnt cry de describe detail do done down due during each eg eight either eleven else elsewhere
empty enough etc even ever every everyone everything everywhere except few fifteen fifty fill find fire first five for former
formerly forty found four from front full further get give go had has hasnt have he hence her here hereafter hereby herein
hereupon hers herself him himself his how however hundred i ie if in inc indeed interest into is it its itself keep last latter
latterly least less ltd made many may me meanwhile might mill mine more moreover most mostly move much must my myself name
namely neither never nevertheless next nine no nobody none noone nor not nothing now nowhere of off often on once one only onto
or other others otherwise our ours ourselves out over own part per perhaps please put rather re same see seem seemed seeming
seems serious several she should show side since sincere six sixty so some somehow someone something sometime sometimes
somewhere still such system take ten than that the their them themselves then thence there thereafter thereby therefore
therein thereupon these they thick thin third this those though three through throughout thru thus to together too top toward
towards twelve twenty two un under until up upon us very via was we well were what whatever when whence whenever where
whereafter whereas whereby wherein whereupon wherever whether which while whither who whoever whole whom whose why will with
within without would yet you your yours yourself yourselves
said says say like just got did does doing didn don doesn isn wasn weren won wouldn shouldn couldn aren haven hadn
it's i'm he's she's that's there's they're we're you're i've we've they've i'd he'd she'd they'd let's can't don't won't
went came come comes coming took taken make makes making gave given told tell asked looked look saw seen knew know thought
began begin used using use want wanted way thing things time times day days year years new old good great little lot lots
including include includes included compared primarily approximately respectively following based according related
increase increased decrease decreased total http https www com html org pdf page pages
mr mrs ms dr st von van der
""".split())


@dataclass(frozen=True, slots=True)
class LabelRequest:
    """What a titler sees of one cluster: its level, keywords (best first) and summary text."""

    node_id: str
    level: int
    keywords: tuple[str, ...]
    text: str


#: ``titler(requests) -> one title (or None: keep the keyword title) per request``
Titler = Callable[[Sequence[LabelRequest]], Sequence[str | None]]


def leaf_terms(leaves: pl.DataFrame) -> pl.DataFrame:
    """``(leaf_id, term, surface)``: each word of each leaf once (``leaves``: ``node_id, text``);
    ``term`` is the lowercased word, ``surface`` its most frequent spelling in that leaf."""
    words = (
        leaves.select(pl.col("node_id").alias("leaf_id"), pl.col("text").str.extract_all(WORD).alias("surface"))
        .explode("surface")
        .drop_nulls("surface")
        .with_columns(pl.col("surface").str.replace_all("’", "'").str.replace(r"'[sS]$", ""))  # possessive: "ship's" is "ship"
        .with_columns(pl.col("surface").str.to_lowercase().alias("term"))
        .filter((pl.col("term").str.len_chars() >= _MIN_LEN) & ~pl.col("term").is_in(list(STOP_WORDS)))
    )
    return (
        words.group_by("leaf_id", "term", "surface").len()
        .sort(["leaf_id", "term", "len", "surface"], descending=[False, False, True, False])
        .group_by("leaf_id", "term", maintain_order=True).agg(pl.col("surface").first())
    )


def fold_plurals(terms: pl.DataFrame, extra: Sequence[str] = (), *, by: str | None = None) -> pl.DataFrame:
    """``terms`` with a plural folded onto its singular when the singular occurs too, in ``terms``
    or in ``extra`` ("apples" -> "apple"; not "-ss"/"-us"/"-is" words), then each (leaf, term)
    once again — no stemmer, one rule. ``by``: a column of ``terms`` (e.g. the document of a
    per-document tree) inside which the singular must occur."""
    keys = [by] if by else []
    vocab = terms.select(*keys, "term")
    if extra:
        extra_df = pl.DataFrame({"term": list(extra)}, schema={"term": pl.String})
        vocab = pl.concat([vocab, terms.select(*keys).unique().join(extra_df, how="cross") if keys else extra_df])
    vocab = vocab.unique().rename({"term": "_stem"}).with_columns(pl.lit(True).alias("_has"))
    plural = pl.col("term").str.ends_with("s") & ~pl.col("term").str.contains("(?:ss|us|is)$") & (pl.col("term").str.len_chars() > _MIN_LEN)
    folded = (terms.with_columns(pl.col("term").str.strip_suffix("s").alias("_stem"))
              .join(vocab, on=[*keys, "_stem"], how="left", maintain_order="left")
              .with_columns(pl.when(plural & pl.col("_has").fill_null(False)).then(pl.col("_stem")).otherwise(pl.col("term")).alias("term"))
              .drop("_stem", "_has"))
    return folded.unique(["leaf_id", "term"], keep="first", maintain_order=True)


def ctfidf(class_terms: pl.DataFrame) -> pl.DataFrame:
    """BERTopic's c-TF-IDF over ``(level, node_id, term, n)`` (each node one class, the classes of a
    level compared with each other; with a ``scope`` column, only the classes of the same scope —
    one document's tree): adds ``score = n / sum_class(n) * log(1 + A / f_t)``."""
    group = ["level", "scope"] if "scope" in class_terms.columns else ["level"]
    per_class = pl.col("n").sum().over(*group, "node_id")
    f_t = pl.col("n").sum().over(*group, "term")
    a = pl.col("n").sum().over(*group) / pl.col("node_id").n_unique().over(*group)
    return class_terms.with_columns((pl.col("n") / per_class * (1.0 + a / f_t).log()).alias("score"))


def _capital(s: pl.Expr) -> pl.Expr:
    return s.str.slice(0, 1).str.to_uppercase() + s.str.slice(1)


def _text_title(text: pl.Expr, n_words: int = 8) -> pl.Expr:
    words = text.str.extract_all(r"\S+").list.head(n_words).list.join(" ")
    return pl.when(words.str.len_chars() > 0).then(words).otherwise(pl.lit("(empty)"))


def label_nodes(nodes: pa.Table, edges: pa.Table, *, previous: pa.Table | None = None, titler: Titler | None = None,
                per_document: bool = False, keywords: int = KEYWORDS, title_words: int = TITLE_WORDS) -> pa.Table:
    """``nodes`` (NODES schema) with ``keywords``/``title``/``title_source`` set for every summary
    node and null for leaves; rows and every other column unchanged. See the module docstring.
    ``per_document`` (``tree.scope = document``): each document's tree is labelled on its own (its
    clusters against the other clusters of its level in the same document), so a document's labels
    do not depend on the other documents — an update that keeps a document's tree equals a build."""
    df = frame(nodes)
    for name, dtype in (("keywords", pl.List(pl.String)), ("title", pl.String), ("title_source", pl.String)):
        if name not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=dtype).alias(name))
    summaries = df.filter(pl.col("level") > 0).select("node_id", "level", "text")
    kept = _previous_labels(previous, summaries)
    todo = summaries.join(kept, on="node_id", how="anti")
    fresh = _fresh_labels(df, frame(edges), todo, keywords, title_words, per_document)
    if titler is not None and fresh.height:
        fresh = _apply_titler(fresh, todo, titler)
    labels = pl.concat([kept, fresh], how="vertical_relaxed")
    out = (df.drop(LABEL_COLUMNS).with_row_index("_row")
           .join(labels, on="node_id", how="left").sort("_row").drop("_row"))
    return to_table(out, "nodes")


def _previous_labels(previous: pa.Table | None, summaries: pl.DataFrame) -> pl.DataFrame:
    empty = pl.DataFrame(schema={"node_id": pl.String, "keywords": pl.List(pl.String), "title": pl.String, "title_source": pl.String})
    if previous is None or not set(LABEL_COLUMNS) <= set(previous.column_names):
        return empty
    prev = frame(previous.select(["node_id", *LABEL_COLUMNS])).filter(pl.col("title").is_not_null())
    return prev.join(summaries.select("node_id"), on="node_id", how="semi").unique("node_id", keep="first").select(empty.columns)


def _fresh_labels(df: pl.DataFrame, edges: pl.DataFrame, todo: pl.DataFrame, k: int, title_words: int, per_document: bool) -> pl.DataFrame:
    """Labels of the summary nodes in ``todo``, c-TF-IDF against every summary of their level
    (of their document's tree when ``per_document``)."""
    if not todo.height:
        return pl.DataFrame(schema={"node_id": pl.String, "keywords": pl.List(pl.String), "title": pl.String, "title_source": pl.String})
    under = leaves_under(df, edges).filter(pl.col("level").is_in(todo["level"].unique().implode()))
    leaves = df.filter(pl.col("level") == 0).select("node_id", "text").join(under.select(pl.col("leaf_id").alias("node_id")).unique(), on="node_id", how="semi")
    scope = pl.col("doc_ids").list.first() if per_document else pl.lit("")
    leaf_scope = df.filter(pl.col("level") == 0).select(pl.col("node_id").alias("leaf_id"), scope.alias("scope"))
    terms = fold_plurals(leaf_terms(leaves).join(leaf_scope, on="leaf_id", how="left"), by="scope").drop("scope")
    node_scope = df.select("node_id", scope.alias("scope"))
    # one level at a time: c-TF-IDF compares the clusters of one level, and (summary, leaf, term)
    # rows of every level at once held 3.1 GiB at 95k leaves (one level at a time: 1.0 GiB)
    per_level = [_level_labels(under.filter(pl.col("level") == lv), terms, node_scope, todo, k, title_words)
                 for lv in sorted(todo["level"].unique().to_list())]
    per_node = pl.concat(per_level, how="vertical_relaxed")
    out = todo.join(per_node, on="node_id", how="left", maintain_order="left")
    has_kw = pl.col("keywords").list.len().fill_null(0) > 0
    return out.select(
        "node_id",
        pl.col("keywords").fill_null(pl.lit([], dtype=pl.List(pl.String))),
        pl.when(has_kw).then(pl.col("kw_title")).otherwise(_text_title(pl.col("text"))).alias("title"),
        pl.when(has_kw).then(pl.lit("ctfidf")).otherwise(pl.lit("text")).alias("title_source"),
    )


def _level_labels(under: pl.DataFrame, terms: pl.DataFrame, node_scope: pl.DataFrame, todo: pl.DataFrame, k: int, title_words: int) -> pl.DataFrame:
    """``(node_id, keywords, kw_title)`` of the clusters of ``todo`` in one level (``under``: that
    level's ``(node_id, leaf_id)`` rows), c-TF-IDF against every cluster of the level."""
    joined = under.join(terms, on="leaf_id").join(node_scope, on="node_id", how="left")
    counts = joined.group_by("level", "scope", "node_id", "term").agg(pl.len().alias("n"))
    scored = (ctfidf(counts).join(todo.select("node_id"), on="node_id", how="semi")
              .sort(["node_id", "score", "term"], descending=[False, True, False]))
    top = scored.group_by("node_id", maintain_order=True).head(k)
    # spellings only of the clusters labelled here (the counts above need every cluster of the level)
    spelling = (joined.join(todo.select("node_id"), on="node_id", how="semi").group_by("node_id", "term", "surface").len()
                .sort(["node_id", "term", "len", "surface"], descending=[False, False, True, False])
                .group_by("node_id", "term", maintain_order=True).agg(pl.col("surface").first()))
    top = top.join(spelling, on=["node_id", "term"], how="left", maintain_order="left")
    # the title skips a keyword that starts like an earlier one ("jamaica" after "jamaican")
    title = (top.with_columns(pl.col("term").str.slice(0, 5).alias("stem5"))
             .unique(["node_id", "stem5"], keep="first", maintain_order=True)
             .group_by("node_id", maintain_order=True).agg(_capital(pl.col("surface")).head(title_words).str.join(" · ").alias("kw_title")))
    return top.group_by("node_id", maintain_order=True).agg(pl.col("term").alias("keywords")).join(title, on="node_id", how="left")


def _apply_titler(fresh: pl.DataFrame, todo: pl.DataFrame, titler: Titler) -> pl.DataFrame:
    info = fresh.join(todo.select("node_id", "level", "text"), on="node_id", how="left", maintain_order="left")
    requests = [LabelRequest(r["node_id"], int(r["level"]), tuple(r["keywords"] or ()), r["text"] or "")
                for r in info.select("node_id", "level", "keywords", "text").iter_rows(named=True)]
    answers = list(titler(requests))
    if len(answers) != len(requests):
        raise ValueError(f"titler returned {len(answers)} titles for {len(requests)} clusters")
    clean = pl.Series("llm", [_one_line(a) for a in answers], dtype=pl.String)
    return fresh.with_columns(clean).select(
        "node_id", "keywords",
        pl.coalesce("llm", "title").alias("title"),
        pl.when(pl.col("llm").is_not_null()).then(pl.lit("llm")).otherwise(pl.col("title_source")).alias("title_source"),
    )


def _one_line(answer: str | None, max_chars: int = 80) -> str | None:
    """The first non-empty line of an LLM answer, unquoted and cut at ``max_chars`` (None if nothing)."""
    if not isinstance(answer, str):
        return None
    for line in answer.splitlines():
        line = line.strip().strip("\"'*#").strip()
        if line.lower().startswith("title:"):
            line = line[6:].strip().strip("\"'").strip()
        if line:
            return line if len(line) <= max_chars else line[: max_chars - 1].rstrip() + "…"
    return None


def llm_titler(complete: Callable[[list[str]], Sequence[str | None]]) -> Titler:
    """A :data:`Titler` over ``complete(prompts) -> answers`` (one LLM call per cluster; see
    :func:`arborag.tasks.summarize.llm` for the configured client). The prompt shows the keywords
    and the start of the summary and asks for one line of at most eight words."""

    def titles(requests: Sequence[LabelRequest]) -> Sequence[str | None]:
        prompts = [
            "Write a title of at most eight words for a group of passages.\n"
            f"Keywords: {', '.join(r.keywords)}\n"
            f"Summary: {' '.join(r.text.split()[:120])}\n"
            "Answer with the title only, on one line."
            for r in requests
        ]
        return complete(prompts)

    return titles


assert set(LABEL_COLUMNS) <= set(NODES.names), "storage/schemas.py NODES must carry the label columns"
