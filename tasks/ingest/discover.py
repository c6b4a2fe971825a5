"""Discovery: expand sources (files, folders, globs, ``file://`` URIs) into the files to read,
confined to the root each source names (see :func:`discover_sources`)."""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from arborag.config import IngestConfig
from arborag.errors import IngestError
from arborag.tasks.ingest.records import IngestFailure, SourceFile

__all__ = ["discover_sources"]

_GLOB_CHARS = re.compile(r"[*?\[]")
log = logging.getLogger("arborag.ingest")


def _uri(path: str | Path) -> str:
    return os.path.abspath(os.fspath(path))


def _matches(name: str, rel: str, patterns: Iterable[str]) -> bool:
    name_l, rel_l = name.lower(), rel.lower()
    return any(fnmatch.fnmatchcase(name_l, p.lower()) or fnmatch.fnmatchcase(rel_l, p.lower()) for p in patterns)


def _matcher(patterns: Iterable[str]) -> Callable[[str, str], bool]:
    """:func:`_matches` against fixed ``patterns`` as one compiled regex (the alternation of the
    patterns' ``fnmatch.translate``: a match of any is a match), for a walk's every file."""
    pats = [p.lower() for p in patterns]
    if not pats:
        return lambda name, rel: False
    match = re.compile("|".join(fnmatch.translate(p) for p in pats)).match
    return lambda name, rel: match(name.lower()) is not None or match(rel.lower()) is not None


def _escape(path: str, root_real: str, link: bool | None = None) -> str | None:
    """Where ``path`` leads when it is a symlink whose target lies outside ``root_real``; else None.
    ``link``: whether ``path`` is a symlink, when known (else an ``lstat`` tells)."""
    if not (os.path.islink(path) if link is None else link):
        return None
    target = os.path.realpath(path)
    return target if os.path.commonpath([target, root_real]) != root_real else None


def _symlink_names(folder: str) -> set[str] | None:
    """Names of the symlinks in ``folder``, read from one directory listing (no ``lstat`` per
    entry where the file system reports entry types); None when the listing fails."""
    try:
        with os.scandir(folder) as entries:
            return {e.name for e in entries if e.is_symlink()}
    except OSError:
        return None


def _walk(root: Path, cfg: IngestConfig, skip: set[str], skipped: list[IngestFailure]) -> list[SourceFile]:
    """Files under ``root`` matching ``cfg.include`` and not ``cfg.exclude``; hidden entries skipped.

    Directory symlinks are followed once: a directory already visited (same device + inode)
    is not entered again, so symlink cycles end. A symlink (file or folder) whose target lies
    outside ``root`` is not followed unless ``cfg.follow_external_symlinks``; it goes to ``skipped``.
    """
    out: list[SourceFile] = []
    seen_dirs: set[tuple[int, int]] = set()
    root_real = os.path.realpath(root)
    included, excluded = _matcher(cfg.include), _matcher(cfg.exclude)

    links: set[str] | None = None  # the symlinks among the entries of the folder being walked

    def inside(dirpath: str, name: str) -> bool:
        full = os.path.join(dirpath, name)
        target = None if cfg.follow_external_symlinks else _escape(full, root_real, None if links is None else name in links)
        if target is not None:
            skipped.append(IngestFailure(_uri(full), f"skipped: symlink to {target}, outside {root_real} "
                                         "(pass --follow-external-symlinks to follow it)"))
        return target is None
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs or os.path.realpath(dirpath) in skip:
            dirnames[:] = []
            continue
        seen_dirs.add(key)
        links = None if cfg.follow_external_symlinks else _symlink_names(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and inside(dirpath, d))
        # per folder, not per file: a name from the walk is one clean component, so the file's
        # relative path and uri are the folder's joined with it (what relpath/abspath would give)
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        abs_dir = _uri(dirpath)
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if not included(name, rel) or excluded(name, rel) or not inside(dirpath, name):
                continue
            out.append(SourceFile(Path(os.path.join(dirpath, name)), os.path.join(abs_dir, name)))
    return out


def _root_of_glob(pattern: str) -> str:
    """The folder a glob is rooted at: the part of ``pattern`` before its first wildcard component."""
    parts = Path(pattern).parts
    fixed: list[str] = []
    for part in parts:
        if _GLOB_CHARS.search(part):
            break
        fixed.append(part)
    if len(fixed) == len(parts):  # no wildcard component (cannot happen for a glob source)
        fixed = fixed[:-1]
    return os.path.join(*fixed) if fixed else "."


def _lmode(path: Path) -> int | None:
    """``st_mode`` of ``path`` itself (a symlink is not followed); None where ``os.path.lexists`` is False."""
    try:
        return os.lstat(path).st_mode
    except (OSError, ValueError):
        return None


def _realpath(path: str, folders: dict[str, str], link: bool | None = None) -> str:
    """``os.path.realpath(path)``, resolving each folder once: for an absolute, normalized path whose
    last component is not a symlink, the real path is its folder's real path (cached in
    ``folders``) joined with its name — one ``lstat`` instead of one per component (none when
    ``link`` already says whether it is a symlink). Any other path is resolved in full."""
    head, name = os.path.split(path)
    if not os.path.isabs(path) or name in ("", ".", "..") or os.path.normpath(path) != path:
        return os.path.realpath(path)
    if os.path.islink(path) if link is None else link:
        return os.path.realpath(path)
    real_head = folders.get(head)
    if real_head is None:
        real_head = folders[head] = os.path.realpath(head)
    return os.path.join(real_head, name)


def _confined(
    paths: Sequence[str], root: str, cfg: IngestConfig, skipped: list[IngestFailure], skip: set[str],
    folders: dict[str, str] | None = None, links: Sequence[bool] | None = None,
) -> list[str]:
    """``paths`` (found under ``root``) whose real location lies inside ``root``; the others go to
    ``skipped`` with their target (unless ``cfg.follow_external_symlinks``). Paths inside a
    ``skip`` folder (the corpus) are dropped silently, as the folder walk does. ``folders``: real
    paths of folders already resolved (shared across calls: an update names thousands of files
    in a few folders); ``links``: whether each path is a symlink, when the caller knows."""
    folders = {} if folders is None else folders
    root_real = folders.get(root) or folders.setdefault(root, os.path.realpath(root))
    out = []
    for i, p in enumerate(paths):
        real = _realpath(p, folders, None if links is None else links[i])
        if any(os.path.commonpath([real, s]) == s for s in skip):
            continue
        outside = os.path.commonpath([real, root_real]) != root_real
        target = None if cfg.follow_external_symlinks or not outside else real
        if target is not None:
            skipped.append(IngestFailure(_uri(p), f"skipped: symlink to {target}, outside {root_real} "
                                         "(pass --follow-external-symlinks to follow it)"))
            continue
        out.append(p)
    return out


def discover_sources(
    sources: Sequence[str | Path], cfg: IngestConfig, *, skip: Sequence[str | Path] = (),
    skipped: list[IngestFailure] | None = None,
) -> list[SourceFile]:
    """Expand sources into files, in a stable order (sorted within each source).

    A source is a file (read whatever its name), a folder (walked recursively; file names must
    match ``cfg.include`` and not ``cfg.exclude``; hidden files and folders are skipped), a glob
    pattern (``docs/**/*.pdf``), or a ``file://`` URI. Folders in ``skip`` (e.g. the corpus
    itself) are not entered.

    **One confinement rule for every form**: each source has a root — a folder: itself; a glob:
    the folder before its first wildcard (``docs`` for ``docs/**/*.txt``); a named file: its
    folder — and a file is read only when its real location (every symlink on the way resolved,
    relative or absolute, file or folder) lies inside the root's real location. A file or folder
    symlink leading out is not followed (unless ``cfg.follow_external_symlinks``): each is logged
    as a warning and appended to ``skipped`` with its target. Object-store prefixes
    (``s3://...``) are not sources: they are refused before anything is read.

    Raises:
        IngestError: a source does not exist, a glob matches nothing, or a URI scheme is not
            supported. Nothing has been read at that point, so the caller can stop cleanly.
    """
    skip_set = {os.path.realpath(s) for s in skip}
    folders: dict[str, str] = {}  # real paths of the folders of named files, resolved once
    out: list[SourceFile] = []
    passed_over: list[IngestFailure] = []
    for source in sources:
        text = os.fspath(source)
        if text.startswith("file://"):
            text = text[len("file://"):]
        elif re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]+://", text):
            raise IngestError(text, "only local paths and file:// URIs can be ingested (object-store prefixes "
                              "are not sources); download the files first, e.g. `aws s3 sync s3://bucket/prefix docs/`")
        path = Path(text).expanduser()
        mode = _lmode(path)  # one lstat: exists? a folder? a symlink? (an update names every file)
        if mode is not None:
            link = stat.S_ISLNK(mode)
            if path.is_dir() if link else stat.S_ISDIR(mode):
                out.extend(_walk(path, cfg, skip_set, passed_over))
            else:  # a file, or a broken/looping symlink: reading records why it fails
                kept = _confined([str(path)], os.path.dirname(str(path)) or ".", cfg, passed_over, set(), folders, links=[link])
                out.extend(SourceFile(Path(p), _uri(p)) for p in kept)
            continue
        if _GLOB_CHARS.search(text):
            pattern = os.path.expanduser(text)
            matches = sorted(glob.glob(pattern, recursive=True))
            files = [m for m in matches if not os.path.isdir(m)]
            if not files:
                raise IngestError(text, "the pattern matched no files; check the pattern (quote it so the shell does not expand it)")
            kept = _confined(files, _root_of_glob(pattern), cfg, passed_over, skip_set)
            out.extend(SourceFile(Path(m), _uri(m)) for m in kept)
            continue
        raise IngestError(text, "no such file or folder; check the path")
    for item in passed_over:
        log.warning("%s: %s", item.uri, item.reason)
    if skipped is not None:
        skipped.extend(passed_over)
    unique: dict[str, SourceFile] = {}
    for src in out:
        unique.setdefault(src.uri, src)
    return list(unique.values())
