"""The web searcher's providers (docs/METHODS.md §7.4: pluggable, off unless configured).

A provider is anything with ``name`` and ``search(query, *, k) -> list[WebResult]``; it raises
:class:`~arborag.errors.BackendUnavailable` when it cannot be reached (the searcher reports that
in the trace and goes on without web results). One real provider ships:
:class:`SearxngProvider`, a SearXNG instance's JSON API (``GET {url}/search?q=...&format=json``;
the instance must allow the ``json`` format in its ``settings.yml``: ``search.formats: [html, json]``).

Configure it with ``level.web_provider: searxng`` and ``level.web_url`` (or
``ARBORAG_LEVEL__WEB_PROVIDER=searxng ARBORAG_LEVEL__WEB_URL=http://127.0.0.1:8888``);
tests pass their own provider object as ``web=``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from arborag.errors import BackendUnavailable, ConfigError

if TYPE_CHECKING:
    from arborag.config import LevelConfig

__all__ = ["SearxngProvider", "WebProvider", "WebResult", "web_from_config"]


@dataclass(frozen=True, slots=True)
class WebResult:
    url: str
    title: str
    snippet: str


@runtime_checkable
class WebProvider(Protocol):
    name: str

    def search(self, query: str, *, k: int) -> list[WebResult]: ...


class SearxngProvider:
    """A SearXNG instance (self-hosted metasearch) through its JSON API."""

    name = "searxng"

    def __init__(self, url: str, *, timeout_s: float = 10.0, language: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.language = language

    def search(self, query: str, *, k: int) -> list[WebResult]:
        import httpx

        params = {"q": query, "format": "json"}
        if self.language:
            params["language"] = self.language
        try:
            resp = httpx.get(f"{self.url}/search", params=params, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise BackendUnavailable("SearXNG", self.url, f"{exc}; check level.web_url or turn the web searcher off") from exc
        if resp.status_code != 200:
            hint = " (enable the json format: search.formats: [html, json] in settings.yml)" if resp.status_code == 403 else ""
            raise BackendUnavailable("SearXNG", self.url, f"HTTP {resp.status_code}{hint}")
        try:
            results = resp.json().get("results", [])
        except ValueError as exc:
            raise BackendUnavailable("SearXNG", self.url, f"the reply is not JSON: {exc}") from exc
        out: list[WebResult] = []
        for r in results:
            if not isinstance(r, dict) or not r.get("url"):
                continue
            out.append(WebResult(str(r["url"]), str(r.get("title") or ""), str(r.get("content") or "")))
            if len(out) >= k:
                break
        return out


def web_from_config(cfg: LevelConfig) -> WebProvider | None:
    """The configured provider, or None (the default: the web searcher is off)."""
    if cfg.web_provider == "none":
        return None
    if not cfg.web_url:
        raise ConfigError("level.web_provider is 'searxng' but level.web_url is not set; set ARBORAG_LEVEL__WEB_URL")
    return SearxngProvider(cfg.web_url, timeout_s=cfg.web_timeout_s)
