"""A corpus on an object store: ``s3://bucket/prefix`` (or any fsspec URL), read and published.

The design (docs/SCALE.md, "Object storage"):

- **Build stages stage on local disk.** A remote corpus has a local *mirror* folder
  (:func:`mirror_dir`: ``$ARBORAG_OBJECT_CACHE`` or ``~/.cache/arborag/objects``, one folder per
  URI) holding the working tables, the staging folders, the caches and a cache of downloaded
  snapshots. Every stage reads and writes there exactly as for a local corpus.
- **The published snapshot and the manifest live on the object store.** Publishing uploads the
  sealed snapshot folder to ``<uri>/snapshots/<id>/`` (``info.json`` last: a snapshot without it
  is incomplete and never referenced), then the working tables (so a build on another machine
  continues from them), then switches ``<uri>/manifest.json``.
- **The manifest switch is a conditional write** (:meth:`ObjectStore.put_json`): on S3 a
  ``PUT`` with ``If-Match: <etag of the manifest this build read>`` (``If-None-Match: *`` for
  the first publish), so two builders racing on one corpus cannot overwrite each other's
  publish: the loser gets :class:`ManifestConflict` and publishes nothing. Readers are consistent
  with or without it: snapshot folders are immutable and the manifest is one small object
  written last, so a reader sees the old snapshot or the new one. On fsspec filesystems
  without conditional writes the last writer wins (the same guarantee as a local corpus, whose
  writers are serialized by the corpus lock on one host).
- **Reading** (:meth:`arborag.storage.corpus.Corpus.published_dir`) downloads the published
  snapshot once into the mirror (snapshots are immutable, so the copy never goes stale): the
  sparse index needs local files (tantivy), and the vectors' Arrow file is memory-mapped. The
  snapshot's LanceDB table is also readable in place with LanceDB's own S3 support
  (:func:`lance_storage_options`).

Connection settings come from the environment, never from config files: the usual
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_REGION`` and ``AWS_ENDPOINT_URL``
(S3-compatible servers: MinIO, moto, R2), or ``ARBORAG_STORAGE_OPTIONS`` as JSON fsspec options.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arborag.errors import ArboragError
from arborag.extras import extra

__all__ = [
    "ManifestConflict",
    "ObjectStore",
    "is_remote",
    "lance_storage_options",
    "mirror_dir",
    "normalize_location",
    "storage_options",
]

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


class ManifestConflict(ArboragError):
    """Another writer switched the manifest of an object-store corpus after this build read it."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        super().__init__(
            f"{uri}: the manifest changed while this build ran (another writer published); nothing was "
            "published by this run. Run the build again: it starts from the new snapshot and reuses its caches."
        )


_COLLAPSED = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*):/(?!/)")


def normalize_location(location: str | Path) -> str:
    """``location`` as text; a URL that went through ``pathlib.Path`` (``s3:/bucket/p``: the CLI's
    path options collapse the double slash) gets its ``://`` back when its scheme is a known
    fsspec protocol."""
    text = str(location)
    m = _COLLAPSED.match(text)
    if m and not _SCHEME.match(text):
        from fsspec.registry import known_implementations

        if m.group(1).lower() in known_implementations and m.group(1).lower() not in ("file", "local"):
            return f"{m.group(1)}://{text[m.end():]}"
    return text


def is_remote(location: str | Path) -> bool:
    """True for a URL with a scheme other than ``file://`` (``s3://``, ``gs://``, ``memory://``, ...)."""
    text = normalize_location(location)
    return bool(_SCHEME.match(text)) and not text.startswith("file://")


def storage_options(uri: str) -> dict[str, Any]:
    """fsspec options for ``uri``: ``ARBORAG_STORAGE_OPTIONS`` (JSON), plus for ``s3://`` the
    endpoint of ``AWS_ENDPOINT_URL`` (S3-compatible servers)."""
    raw = os.environ.get("ARBORAG_STORAGE_OPTIONS")
    opts: dict[str, Any] = json.loads(raw) if raw else {}
    if uri.startswith(("s3://", "s3a://")) and os.environ.get("AWS_ENDPOINT_URL"):
        opts.setdefault("client_kwargs", {}).setdefault("endpoint_url", os.environ["AWS_ENDPOINT_URL"])
    return opts


def lance_storage_options(uri: str) -> dict[str, str]:
    """``storage_options`` for ``lancedb.connect(<uri>/snapshots/<id>/vectors.lance, ...)`` from the
    same environment (LanceDB reads S3 natively; an ``http://`` endpoint needs ``allow_http``)."""
    out: dict[str, str] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    if uri.startswith("s3://") and endpoint:
        out["aws_endpoint"] = endpoint
        if endpoint.startswith("http://"):
            out["allow_http"] = "true"
    for env, key in (("AWS_ACCESS_KEY_ID", "aws_access_key_id"), ("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key"),
                     ("AWS_REGION", "aws_region"), ("AWS_DEFAULT_REGION", "aws_region")):
        if os.environ.get(env):
            out.setdefault(key, os.environ[env])
    return out


def mirror_dir(uri: str) -> Path:
    """The local working folder of the remote corpus ``uri`` (one per URI, reused across runs)."""
    base = Path(os.environ.get("ARBORAG_OBJECT_CACHE") or Path.home() / ".cache" / "arborag" / "objects")
    tail = re.sub(r"[^a-z0-9]+", "-", uri.split("://", 1)[-1].lower()).strip("-")[-40:] or "corpus"
    return (base / f"{tail}-{hashlib.blake2b(uri.encode(), digest_size=4).hexdigest()}").expanduser().resolve()


class ObjectStore:
    """Files under one URI prefix on an fsspec filesystem, with a conditional JSON write."""

    def __init__(self, uri: str) -> None:
        import fsspec

        if uri.startswith(("s3://", "s3a://")):
            with extra("scale", "an s3:// corpus"):
                import s3fs  # noqa: F401  (fsspec's s3 filesystem)

        self.uri = uri.rstrip("/")
        self.fs, self.base = fsspec.core.url_to_fs(self.uri, **storage_options(self.uri))
        self.base = self.base.rstrip("/")

    def path(self, rel: str) -> str:
        return f"{self.base}/{rel.lstrip('/')}" if rel else self.base

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self.path(rel)))

    # -- small objects (the manifest) ------------------------------------------------------------
    def get_json(self, rel: str) -> tuple[dict[str, Any] | None, str | None]:
        """``(object, version)`` of a JSON object, ``(None, None)`` when absent. The version is the
        S3 ETag (what :meth:`put_json` compares with) or None where the filesystem has none."""
        path = self.path(rel)
        if self._s3:
            try:
                resp = self._call("get_object", **self._bucket_key(path))
            except FileNotFoundError:
                return None, None
            body = self._sync(resp["Body"].read())
            resp["Body"].close()
            return json.loads(body), resp.get("ETag")
        try:
            data = self.fs.cat_file(path)
        except FileNotFoundError:
            return None, None
        return json.loads(data), None

    def put_json(self, rel: str, obj: Any, *, expect: str | None, create: bool) -> None:
        """Write ``obj`` as JSON at ``rel`` only if it is still the version this writer read:
        ``create=True`` — only if absent (S3 ``If-None-Match: *``); else only if its ETag is
        ``expect`` (``If-Match``). Raises :class:`ManifestConflict` when the condition fails."""
        data = json.dumps(obj, indent=2, sort_keys=True).encode()
        path = self.path(rel)
        if not self._s3:  # no conditional write here: the last writer wins (see module docs)
            self.fs.pipe_file(path, data)
            return
        cond: dict[str, str] = {"IfNoneMatch": "*"} if create or expect is None else {"IfMatch": expect}
        try:
            self._call("put_object", Body=data, ContentType="application/json", **self._bucket_key(path), **cond)
        except (FileExistsError, OSError) as exc:
            if "pre-condition" in str(exc).lower() or "precondition" in str(exc).lower() or isinstance(exc, FileExistsError):
                raise ManifestConflict(self.uri) from exc
            raise

    # -- folders -----------------------------------------------------------------------------------
    def upload_dir(self, local: Path, rel: str, *, last: str | None = None) -> int:
        """Copy every file under ``local`` to ``rel/`` (``last``: a file name uploaded after all
        others, the folder's seal). Returns the bytes uploaded."""
        files = sorted(p for p in Path(local).rglob("*") if p.is_file())
        if last is not None:
            files = [p for p in files if p.relative_to(local).as_posix() != last] + [p for p in files if p.relative_to(local).as_posix() == last]
        total = 0
        for f in files:
            self.fs.put_file(str(f), self.path(f"{rel}/{f.relative_to(local).as_posix()}"))
            total += f.stat().st_size
        return total

    def download_dir(self, rel: str, local: Path) -> Path:
        """Copy ``rel/`` into the folder ``local`` atomically (a temporary sibling renamed into
        place); a folder already there is kept (downloads of immutable snapshots)."""
        local = Path(local)
        if local.is_dir():
            return local
        tmp = local.parent / f".{local.name}.download-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        root = self.path(rel)
        for remote in self._files(root):
            dst = tmp / remote[len(root) + 1 :]
            dst.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(remote, str(dst))
        tmp.mkdir(parents=True, exist_ok=True)
        try:
            tmp.rename(local)
        except OSError:  # another process downloaded it first
            shutil.rmtree(tmp, ignore_errors=True)
        return local

    def _files(self, root: str) -> Iterator[str]:
        for p in sorted(self.fs.find(root)):
            yield p.rstrip("/")

    # -- S3 specifics --------------------------------------------------------------------------------
    @property
    def _s3(self) -> bool:
        return type(self.fs).__name__ == "S3FileSystem"

    def _bucket_key(self, path: str) -> dict[str, str]:
        bucket, _, key = path.partition("/")
        return {"Bucket": bucket, "Key": key}

    def _sync(self, coro: Any) -> Any:
        from fsspec.asyn import sync

        return sync(self.fs.loop, lambda: coro)

    def _call(self, method: str, **kwargs: Any) -> Any:
        from fsspec.asyn import sync

        return sync(self.fs.loop, self.fs._call_s3, method, **kwargs)
