"""The Elasticsearch connection: a client built from SparseConfig/env, typed errors, no secrets.

URL and credentials come from ``sparse.es_*`` or ``ARBORAG_ES_*``; every transport/auth failure
becomes :class:`~arborag.errors.BackendUnavailable` naming the (redacted) URL and what to check.
A 9.x client talking to an 8.x server switches itself to ``compatible-with=8`` once.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any, Callable, Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

from arborag.config import SparseConfig
from arborag.errors import BackendUnavailable, ConfigError
from arborag.extras import extra
from arborag.storage.sparse.es_bodies import es_safe

if TYPE_CHECKING:  # pragma: no cover
    from elasticsearch import Elasticsearch

__all__ = ["ES_MAX_RETRIES", "ES_RETRY_STATUS", "EsConnection", "es_meta", "es_reason"]

ES_RETRY_STATUS: Final = (429, 502, 503, 504)
ES_MAX_RETRIES: Final = 3


def _redact(url: str) -> str:
    """``url`` without user:password (safe for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def _setting(value: Any, env: str) -> Any:
    if value is not None:
        return value.get_secret_value() if hasattr(value, "get_secret_value") else value
    return os.environ.get(env) or None


def _compat8_node_class() -> type:
    """A urllib3 node that asks for REST compatibility with 8.x (``compatible-with=8``).

    elasticsearch-py 9.x sends ``compatible-with=9``, which 8.x servers reject (HTTP 400
    ``media_type_header_exception``); 9.x servers accept 8 as well. Used only after such a
    rejection, so a 9.x client works against an 8.x server without pinning
    ``elasticsearch>=8,<9`` (which also works and needs no switch).
    """
    with extra("es", "the Elasticsearch sparse backend (sparse.backend: elasticsearch)"):
        from elastic_transport import Urllib3HttpNode

    class Compat8Node(Urllib3HttpNode):  # type: ignore[misc]
        def perform_request(self, method, target, body=None, headers=None, **kw):  # type: ignore[no-untyped-def]
            if headers is not None:
                headers = headers.copy()
                for name in ("accept", "content-type"):
                    value = headers.get(name)
                    if value and "compatible-with=" in value:
                        headers[name] = re.sub(r"compatible-with=\d+", "compatible-with=8", value)
            return super().perform_request(method, target, body=body, headers=headers, **kw)

    return Compat8Node


def _is_compat_rejection(exc: Exception) -> bool:
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "meta", None), "status", None)
    text = f"{exc} {getattr(exc, 'body', '')}"
    return status == 400 and ("media_type_header_exception" in text or "compatible-with" in text)


_R = TypeVar("_R")


class EsConnection:
    """An Elasticsearch client built from SparseConfig/env, with typed errors and no secrets in messages."""

    def __init__(self, cfg: SparseConfig, *, request_timeout: float = 30.0) -> None:
        url = _setting(cfg.es_url, "ARBORAG_ES_URL")
        if not url:
            raise ConfigError(
                "sparse.backend is 'elasticsearch' but no URL is set: export ARBORAG_ES_URL=https://host:9200 "
                "or set sparse.es_url in arborag.yaml (see docs/SPARSE.md)"
            )
        self.url: str = url
        self.safe_url = _redact(url)
        self.cfg = cfg
        self._kwargs: dict[str, Any] = {
            "request_timeout": request_timeout,
            "max_retries": ES_MAX_RETRIES,
            "retry_on_timeout": True,
            "retry_on_status": ES_RETRY_STATUS,
        }
        api_key = _setting(cfg.es_api_key, "ARBORAG_ES_API_KEY")
        username = _setting(cfg.es_username, "ARBORAG_ES_USERNAME")
        password = _setting(cfg.es_password, "ARBORAG_ES_PASSWORD")
        ca_certs = _setting(cfg.es_ca_certs, "ARBORAG_ES_CA_CERTS")
        if api_key:
            self._kwargs["api_key"] = api_key
        elif username:
            self._kwargs["basic_auth"] = (username, password or "")
        if ca_certs:
            self._kwargs["ca_certs"] = ca_certs
        self._compat8 = False
        self._client: Elasticsearch | None = None

    def __repr__(self) -> str:
        return f"EsConnection({self.safe_url!r})"

    @property
    def client(self) -> "Elasticsearch":
        if self._client is None:
            with extra("es", "the Elasticsearch sparse backend (sparse.backend: elasticsearch)"):
                from elasticsearch import Elasticsearch

            kwargs = dict(self._kwargs)
            if self._compat8:
                kwargs["node_class"] = _compat8_node_class()
            try:
                self._client = Elasticsearch(self.url, **kwargs)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"invalid Elasticsearch settings for {self.safe_url}: {exc}") from None
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def unavailable(self, hint: str) -> BackendUnavailable:
        return BackendUnavailable("elasticsearch", self.safe_url, hint)

    def call(self, fn: Callable[["Elasticsearch"], _R]) -> _R:
        """Run ``fn(client)``, mapping transport/auth failures to BackendUnavailable."""
        with extra("es", "the Elasticsearch sparse backend (sparse.backend: elasticsearch)"):
            import elastic_transport
            import elasticsearch

        try:
            return fn(self.client)
        except elasticsearch.BadRequestError as exc:
            if _is_compat_rejection(exc) and not self._compat8:
                # An 8.x server and a 9.x client: switch to compatible-with=8 and retry once.
                self.close()
                self._compat8 = True
                return self.call(fn)
            raise
        except elasticsearch.AuthenticationException:
            raise self.unavailable(
                "authentication failed (HTTP 401): check sparse.es_api_key, or es_username/es_password "
                "(ARBORAG_ES_API_KEY, or ARBORAG_ES_USERNAME/ARBORAG_ES_PASSWORD)"
            ) from None
        except elasticsearch.AuthorizationException:
            raise self.unavailable(
                "permission denied (HTTP 403): the user or API key needs 'read' on the corpus alias to search and "
                f"'create_index', 'write', 'manage' on '{es_safe(self.cfg.es_index_prefix)}-*' to build and publish"
            ) from None
        except elasticsearch.UnsupportedProductError:
            raise self.unavailable("the server at this URL does not identify as Elasticsearch; check ARBORAG_ES_URL") from None
        except elastic_transport.TlsError as exc:
            raise self.unavailable(
                f"TLS failed ({type(exc).__name__}): for a self-signed cluster set sparse.es_ca_certs / ARBORAG_ES_CA_CERTS "
                "to its CA (deploy: certs/ca/ca.crt), and use https://"
            ) from exc
        except (elastic_transport.ConnectionError, elastic_transport.ConnectionTimeout) as exc:
            raise self.unavailable(
                f"{type(exc).__name__}: is the server running and reachable from here (docker compose -f "
                "deploy/docker-compose.yml up -d)? Check ARBORAG_ES_URL / sparse.es_url (http vs https, host, port 9200)"
            ) from exc
        except elastic_transport.TransportError as exc:
            raise self.unavailable(f"{type(exc).__name__}: {exc}") from exc


def es_reason(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            causes = err.get("root_cause") or []
            first = causes[0] if causes and isinstance(causes[0], dict) else err
            reason = first.get("reason") or err.get("reason") or err.get("type")
            caused = err.get("caused_by")
            if isinstance(caused, dict) and caused.get("reason"):
                reason = f"{reason} ({caused['reason']})"
            return str(reason)
    return str(exc)


def es_meta(conn: EsConnection, name: str) -> dict[str, Any] | None:
    """The arborag ``_meta`` of index ``name``; None when the index does not exist."""
    with extra("es", "the Elasticsearch sparse backend (sparse.backend: elasticsearch)"):
        import elasticsearch

    try:
        resp = conn.call(lambda c: c.indices.get_mapping(index=name))
    except elasticsearch.NotFoundError:
        return None
    body = dict(resp)
    for _, value in body.items():
        return ((value.get("mappings") or {}).get("_meta") or {}).get("arborag") or {}
    return None
