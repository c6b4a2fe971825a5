"""Read-only SQL (DuckDB) over a corpus's tables — read-only by construction, not by a word list.

    run_sql(corpus_dir, "SELECT count(*) FROM nodes")  ->  (["count_star()"], [(101,)])

How nothing can be written (``tests/storage/test_sql_hostile.py`` tries the ways in):

- **DuckDB gets no path at all.** Each table is a pyarrow ``Dataset`` over its Parquet file(s),
  registered from Python; DuckDB scans it lazily (only the columns and row groups a query needs)
  through Arrow, so it never opens a corpus file itself. The connection is in memory with
  ``enable_external_access = false``, no allowed directories or paths, and no temp directory
  (``temp_directory = ''``: the default would be ``<cwd>/.tmp/``, which DuckDB may write); then
  the configuration is locked. ``COPY … TO``, ``ATTACH``, ``INSTALL``/``LOAD``, ``read_*``,
  ``glob`` and ``SET`` all fail inside DuckDB, whatever statement carries them.
- **Only a query runs, one per call.** The text is parsed by DuckDB; it must be exactly one
  statement of type SELECT (``SELECT``, ``WITH``, ``FROM``, ``VALUES``, ``DESCRIBE``, ``SHOW``,
  ``SUMMARIZE``), or ``EXPLAIN [ANALYZE]`` of one (``EXPLAIN ANALYZE`` executes what it wraps,
  so the wrapped statement is parsed and held to the same rule). Comments hide nothing: the
  parser sees past them.

**One state per query.** The plain views read one state of the corpus (:func:`corpus_views`):
the published snapshot by default — its ``documents``, ``chunks``, ``nodes``, ``edges`` and
``links`` — or the retained snapshot ``run_sql(..., snapshot=ID)`` names, or, only when asked
(``working=True``), the working tables the next build starts from. The logs ``runs`` and
``queries`` are beside every state. A view is a list of :class:`ViewSource` (Parquet files +
constant columns), unioned by column name, so a caller can expose other files; ``history_views``
adds every retained snapshot as one view per table with a ``snapshot`` column (and
``snapshot_published_at``): ``nodes_all``, ``edges_all``, ``documents_all``, ``chunks_all``,
``links_all``. One query then compares versions::

    SELECT snapshot, level, count(*) FROM nodes_all GROUP BY ALL ORDER BY snapshot, level

Time travel and retention: :func:`run_sql` holds a reader lease
(:func:`arborag.storage.leases.acquire_lease`) on every snapshot its views read until the query
is done, so ``arborag snapshots gc`` cannot remove files under a running query; a snapshot that
gc removed between listing and leasing is left out of the ``*_all`` views.

Plain DuckDB: :func:`~arborag.storage.catalog.write_catalog` keeps ``CORPUS/published.duckdb`` — views over the
published snapshot's files — switched atomically at every publish and rollback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from arborag.errors import QueryError
from arborag.storage.catalog import CATALOG_FILE, SNAPSHOT_VIEW_TABLES, write_catalog
from arborag.storage.catalog import sql_ident as _ident
from arborag.storage.catalog import sql_literal as _literal
from arborag.storage.corpus import Corpus

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

__all__ = [
    "CATALOG_FILE",
    "LOG_TABLES",
    "QUERY_STATEMENTS",
    "SqlResult",
    "ViewSource",
    "Views",
    "check_statement",
    "connect_readonly",
    "corpus_views",
    "history_views",
    "run_sql",
    "run_sql_state",
    "SNAPSHOT_VIEW_TABLES",
    "write_catalog",
]

#: The corpus's logs (every run, every query): the same in every state, shown beside a snapshot's tables.
LOG_TABLES: Final = ("runs", "queries")

#: The DuckDB statement types that run (EXPLAIN only around one of these).
QUERY_STATEMENTS: Final = frozenset({"SELECT"})

#: Settings applied before any view exists, then locked (order matters: the lock comes last).
_SANDBOX: Final = (
    "SET temp_directory = ''",
    "SET allowed_directories = []",
    "SET allowed_paths = []",
    "SET enable_external_access = false",
    "SET autoload_known_extensions = false",
    "SET autoinstall_known_extensions = false",
)

_HINT: Final = ("`arborag sql` runs one read-only query (SELECT / WITH / FROM / DESCRIBE / SHOW / "
                "SUMMARIZE, or EXPLAIN of one) over the corpus's tables; nothing can be written from here")


@dataclass(frozen=True, slots=True)
class ViewSource:
    """Parquet ``files`` read as one table, plus ``constants`` added as columns (name -> value)."""

    files: tuple[Path, ...]
    constants: Mapping[str, str | int | float | bool | None] = field(default_factory=dict)


#: view name -> its sources (one or more, unioned by column name).
Views = Mapping[str, Sequence[ViewSource]]


def corpus_views(corpus: Corpus, *, snapshot_dir: Path | None = None, working: bool = False) -> dict[str, list[ViewSource]]:
    """The views of one state of the corpus.

    - ``snapshot_dir``: that snapshot's tables (:data:`SNAPSHOT_VIEW_TABLES`, those it holds) and
      the logs (:data:`LOG_TABLES`);
    - ``working=True``: the working tables (:data:`~arborag.storage.corpus.WORKING_TABLES`) the
      next build starts from, and no tree;
    - neither: the published snapshot, or the working tables when nothing is published yet.

    Never a mixture: ``documents`` and ``chunks`` always come from where ``nodes`` comes from.
    """
    from arborag.errors import NotBuiltError
    from arborag.storage.corpus import WORKING_TABLES

    if snapshot_dir is not None and working:
        raise ValueError("give a snapshot or the working tables, not both")
    if snapshot_dir is None and not working:
        try:
            snapshot_dir = corpus.published_dir()
        except NotBuiltError:
            working = True
    if working:
        return {name: [ViewSource((corpus.table_path(name),))] for name in WORKING_TABLES if corpus.table_path(name).exists()}
    assert snapshot_dir is not None
    views = {name: [ViewSource((snapshot_dir / f"{name}.parquet",))] for name in SNAPSHOT_VIEW_TABLES
             if (snapshot_dir / f"{name}.parquet").exists()}
    for name in LOG_TABLES:
        if corpus.table_path(name).exists():
            views[name] = [ViewSource((corpus.table_path(name),))]
    return views


def history_views(snapshots: Sequence[tuple[str, Path, str | None]]) -> dict[str, list[ViewSource]]:
    """``<table>_all`` over ``snapshots`` — (id, folder, published_at) each — with the constant
    columns ``snapshot`` and ``snapshot_published_at`` (ISO-8601 text); a table missing from a
    snapshot (older snapshots carry no documents/chunks) is left out of that snapshot's part."""
    views: dict[str, list[ViewSource]] = {}
    for name in SNAPSHOT_VIEW_TABLES:
        parts = [ViewSource((folder / f"{name}.parquet",), {"snapshot": sid, "snapshot_published_at": published})
                 for sid, folder, published in snapshots if (folder / f"{name}.parquet").exists()]
        if parts:
            views[f"{name}_all"] = parts
    return views


def _leased_views(corpus: Corpus, snapshot: str | None, working: bool = False) -> tuple[dict[str, list[ViewSource]], list[Any], str | None]:
    """The views of one state (:func:`corpus_views`: ``snapshot``, the published one, or the
    working tables) plus the ``*_all`` history, each snapshot read under a reader lease.
    Returns (views, leases, the snapshot id the plain views read or None for the working
    tables); the caller releases the leases when the query is done."""
    from arborag.storage.leases import acquire_lease
    from arborag.storage.snapshots import list_snapshots, resolve_snapshot, snapshot_dir
    from arborag.errors import SnapshotNotFound

    leases: list[Any] = []
    try:
        chosen_dir, sid = None, None
        if not working:
            try:
                sid = resolve_snapshot(corpus, snapshot)
            except SnapshotNotFound:
                if snapshot is not None:
                    raise
                working = True  # nothing published yet: the working tables are all there is
        if sid is not None:
            leases.append(acquire_lease(corpus, sid, holder="sql"))
            chosen_dir = snapshot_dir(corpus, sid)
        views = corpus_views(corpus, snapshot_dir=chosen_dir, working=working)
        history = []
        held = {lease.snapshot_id for lease in leases}
        for info in list_snapshots(corpus, sizes=False):
            try:
                if info.id not in held:
                    leases.append(acquire_lease(corpus, info.id, holder="sql"))
                folder = snapshot_dir(corpus, info.id)
            except SnapshotNotFound:  # removed by gc since the listing: not part of the history any more
                continue
            history.append((info.id, folder, info.published_at.isoformat() if info.published_at else None))
        views.update(history_views(history))
    except BaseException:
        for lease in leases:
            lease.release()
        raise
    return views, leases, sid


def _dataset(files: Sequence[Path]) -> Any:
    """A lazy pyarrow dataset over ``files`` (schemas unified from the footers only)."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    paths = [str(p) for p in files]
    schema = None
    if len(paths) > 1:
        import pyarrow as pa

        schema = pa.unify_schemas([pq.read_schema(p) for p in paths], promote_options="permissive")
    return ds.dataset(paths, format="parquet", schema=schema)


def connect_readonly(views: Views) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that can reach nothing on disk, with one view per entry of ``views``.

    A view with one source and no constants is the registered dataset itself; otherwise each
    source is registered under a hidden name (``__src_<view>_<i>``) and the view is their
    ``UNION ALL BY NAME`` with the constants as columns.
    """
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        for statement in _SANDBOX:
            con.execute(statement)
        for name, sources in sorted(views.items()):
            if not sources:
                continue
            if len(sources) == 1 and not sources[0].constants:
                con.register(name, _dataset(sources[0].files))
                continue
            parts = []
            for i, src in enumerate(sources):
                hidden = f"__src_{name}_{i}"
                con.register(hidden, _dataset(src.files))
                extra = "".join(f", {_literal(v)} AS {_ident(k)}" for k, v in src.constants.items())
                parts.append(f"SELECT *{extra} FROM {_ident(hidden)}")
            con.execute(f"CREATE VIEW {_ident(name)} AS " + " UNION ALL BY NAME ".join(parts))
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def _tokens(text: str) -> list[tuple[int, str, str]]:
    """(byte offset, kind, text) of the statement's tokens, comments dropped (DuckDB's own tokenizer)."""
    import duckdb

    raw = text.encode("utf-8")
    toks = duckdb.tokenize(text)
    out = []
    for i, (pos, kind) in enumerate(toks):
        end = toks[i + 1][0] if i + 1 < len(toks) else len(raw)
        if kind.name != "comment":
            out.append((pos, kind.name, raw[pos:end].decode("utf-8", "replace").strip()))
    return out


def _explained(con: duckdb.DuckDBPyConnection, statement: str) -> str:
    """The type of the statement an EXPLAIN wraps (``"SELECT"`` when it is a query)."""
    import duckdb

    raw = statement.encode("utf-8")
    toks = _tokens(statement)
    i = 1  # past EXPLAIN
    if i < len(toks) and toks[i][2].upper() in ("ANALYZE", "ANALYSE"):
        i += 1
    starts = [i]
    if i < len(toks) and toks[i][2].startswith("("):  # EXPLAIN (FORMAT json, ...) <stmt>  or  EXPLAIN (SELECT ...)
        depth = 0
        for j in range(i, len(toks)):
            if toks[j][1] == "operator":
                depth += toks[j][2].count("(") - toks[j][2].count(")")
            if depth == 0:
                starts.append(j + 1)
                break
    kinds = []
    for start in starts:
        if start >= len(toks):
            continue
        try:
            parsed = con.extract_statements(raw[toks[start][0]:].decode("utf-8"))
        except duckdb.Error:
            continue
        if len(parsed) == 1:
            kinds.append(parsed[0].type.name)
            if kinds[-1] in QUERY_STATEMENTS:
                return kinds[-1]
    return kinds[-1] if kinds else "UNKNOWN"


def check_statement(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Raise :class:`QueryError` unless ``query`` is exactly one query statement (see the module doc)."""
    import duckdb

    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryError(query, str(exc).strip()) from None
    if len(statements) != 1:
        what = "no statement (only comments or blanks)" if not statements else f"{len(statements)} statements"
        raise QueryError(query, f"refused: give exactly one statement, got {what}; {_HINT}")
    kind = statements[0].type.name
    if kind == "EXPLAIN":
        inner = _explained(con, statements[0].query)
        if inner not in QUERY_STATEMENTS:
            raise QueryError(query, f"refused: EXPLAIN of a {inner} statement (EXPLAIN ANALYZE executes what it "
                             f"wraps); {_HINT}")
        return
    if kind not in QUERY_STATEMENTS:
        raise QueryError(query, f"refused: {kind} is not a query; {_HINT}. The tables are Parquet files: "
                         "to change or export them, open a copy with DuckDB directly")


@dataclass(frozen=True, slots=True)
class SqlResult:
    """A query's ``columns`` and ``rows``, and the state they describe: ``snapshot`` (the id the
    plain views read), or None for the working tables."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    snapshot: str | None


def run_sql(corpus_dir: str | Path, query: str, *, views: Views | None = None,
            snapshot: str | None = None, working: bool = False) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only query over one state of the corpus (or over ``views``); return (columns, rows).
    :func:`run_sql_state` says which state."""
    got = run_sql_state(corpus_dir, query, views=views, snapshot=snapshot, working=working)
    return got.columns, got.rows


def run_sql_state(corpus_dir: str | Path, query: str, *, views: Views | None = None,
                  snapshot: str | None = None, working: bool = False) -> SqlResult:
    """Run one read-only query over one state of the corpus (or over ``views``).

    The plain views read one state (:func:`corpus_views`): the published snapshot by default
    (``documents``, ``chunks``, ``nodes``, ``edges``, ``links``, whichever it holds, and the logs
    ``runs`` and ``queries``); the retained snapshot ``snapshot`` names; or, with ``working``, the
    working tables (``documents``, ``sections``, ``doc_context``, ``chunks``, ``runs``,
    ``queries``: what the next build starts from). Before anything is published they are the
    working tables. The history views ``nodes_all``, ``edges_all``, ``documents_all``,
    ``chunks_all``, ``links_all`` cover every retained snapshot. Every snapshot read is leased
    until the query is done.

    Raises:
        QueryError: the corpus has no tables, ``snapshot`` and ``working`` are both given, the
            text is not exactly one query statement, or DuckDB rejects it (the message carries
            DuckDB's reason and the views there are).
        SnapshotNotFound: ``snapshot`` names no retained snapshot (the message lists them).
    """
    corpus = Corpus(corpus_dir)
    leases: list[Any] = []
    sid: str | None = None
    if views is None:
        if snapshot is not None and working:
            raise QueryError(query, "give --snapshot ID or --working, not both: the working tables belong to no snapshot")
        if not corpus.root.is_dir():
            raise QueryError(query, f"corpus {corpus.root} does not exist; run `arborag ingest SOURCE... --corpus {corpus_dir}` first")
        views, leases, sid = _leased_views(corpus, snapshot, working)
        if not views:
            for lease in leases:
                lease.release()
            raise QueryError(query, f"corpus {corpus.root} has no tables yet; run `arborag ingest SOURCE... --corpus {corpus_dir}` first")
    try:
        columns, rows = _run(query, views)
    finally:
        for lease in leases:
            lease.release()
    return SqlResult(columns, rows, sid)


def _run(query: str, views: Views) -> tuple[list[str], list[tuple[Any, ...]]]:
    import duckdb

    con = connect_readonly(views)
    try:
        check_statement(con, query)
        try:
            cur = con.execute(query)
            columns = [d[0] for d in cur.description or []]
            rows = cur.fetchall()
        except duckdb.PermissionException as exc:
            first = str(exc).strip().splitlines()[0]
            raise QueryError(query, f"refused by the sandbox ({first}): only these views can be read: "
                             f"{', '.join(sorted(views))}; {_HINT}") from None
        except duckdb.Error as exc:
            raise QueryError(query, f"{str(exc).strip()} (views: {', '.join(sorted(views))})") from None
    finally:
        con.close()
    return columns, rows
