"""Discovery: expand sources (files, folders, globs, ``file://`` URIs) into the files to read."""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
import re
from collections.abc import Iterable, Sequence
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


def _escape(path: str, root_real: str) -> str | None:
    """Where ``path`` leads when it is a symlink whose target lies outside ``root_real``; else None."""
    if not os.path.islink(path):
        return None
    target = os.path.realpath(path)
    return target if os.path.commonpath([target, root_real]) != root_real else None


def _walk(root: Path, cfg: IngestConfig, skip: set[str], skipped: list[IngestFailure]) -> list[SourceFile]:
    """Files under ``root`` matching ``cfg.include`` and not ``cfg.exclude``; hidden entries skipped.

    Directory symlinks are followed once: a directory already visited (same device + inode)
    is not entered again, so symlink cycles end. A symlink (file or folder) whose target lies
    outside ``root`` is not followed unless ``cfg.follow_external_symlinks``; it goes to ``skipped``.
    """
    out: list[SourceFile] = []
    seen_dirs: set[tuple[int, int]] = set()
    root_real = os.path.realpath(root)

    def inside(dirpath: str, name: str) -> bool:
        full = os.path.join(dirpath, name)
        target = None if cfg.follow_external_symlinks else _escape(full, root_real)
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
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and inside(dirpath, d))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if not _matches(name, rel, cfg.include) or _matches(name, rel, cfg.exclude) or not inside(dirpath, name):
                continue
            out.append(SourceFile(Path(full), _uri(full)))
    return out


def discover_sources(
    sources: Sequence[str | Path], cfg: IngestConfig, *, skip: Sequence[str | Path] = (),
    skipped: list[IngestFailure] | None = None,
) -> list[SourceFile]:
    """Expand sources into files, in a stable order (sorted within each source).

    A source is a file (read whatever its name), a folder (walked recursively; file names must
    match ``cfg.include`` and not ``cfg.exclude``; hidden files and folders are skipped), a glob
    pattern (``docs/**/*.pdf``), or a ``file://`` URI. Folders in ``skip`` (e.g. the corpus
    itself) are not entered. Symlinks out of a walked folder are not followed (unless
    ``cfg.follow_external_symlinks``): each is logged as a warning and appended to ``skipped``.

    Raises:
        IngestError: a source does not exist, a glob matches nothing, or a URI scheme is not
            supported. Nothing has been read at that point, so the caller can stop cleanly.
    """
    skip_set = {os.path.realpath(s) for s in skip}
    out: list[SourceFile] = []
    passed_over: list[IngestFailure] = []
    for source in sources:
        text = os.fspath(source)
        if text.startswith("file://"):
            text = text[len("file://"):]
        elif re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]+://", text):
            raise IngestError(text, "only local paths and file:// URIs can be ingested; download remote files first")
        path = Path(text).expanduser()
        if os.path.lexists(path):
            if path.is_dir():
                out.extend(_walk(path, cfg, skip_set, passed_over))
            else:  # a file, or a broken/looping symlink: reading records why it fails
                out.append(SourceFile(path, _uri(path)))
            continue
        if _GLOB_CHARS.search(text):
            matches = sorted(glob.glob(os.path.expanduser(text), recursive=True))
            files = [m for m in matches if not os.path.isdir(m)]
            if not files:
                raise IngestError(text, "the pattern matched no files; check the pattern (quote it so the shell does not expand it)")
            out.extend(SourceFile(Path(m), _uri(m)) for m in files)
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
