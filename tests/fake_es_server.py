"""A tiny recording stand-in for the Elasticsearch REST API (client-side sparse tests).

Just enough of the API for the paths arborag owns: index create/delete, mapping _meta, bulk with
per-document rejections and one-time 429s, aliases, count, search, and an 8.x-only mode that
rejects ``compatible-with=9``. Every request is recorded in ``requests``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeES:
    """Just enough of the Elasticsearch REST API for the client-side paths we own."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.indices: dict[str, dict[str, Any]] = {}  # name -> {"meta", "docs", "aliases"}
        self.reject_ids: dict[str, tuple[int, str]] = {}  # _id -> (status, error type), every time
        self.throttle_once: set[str] = set()  # _id -> 429 the first time
        self.only_compat8 = False  # behave like an 8.x server
        self.search_hits: list[dict[str, Any]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("X-Elastic-Product", "Elasticsearch")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length).decode() if length else ""
                fake.requests.append({"method": self.command, "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": raw})
                accept = self.headers.get("Accept", "")
                if fake.only_compat8 and "compatible-with=9" in accept:
                    return self._reply(400, {"error": {
                        "root_cause": [{"type": "media_type_header_exception", "reason": "Invalid media-type value on headers [Accept, Content-Type]"}],
                        "type": "media_type_header_exception", "reason": "Invalid media-type value on headers [Accept, Content-Type]",
                        "caused_by": {"type": "status_exception", "reason": "Accept version must be either version 8 or 7, but found 9."}},
                        "status": 400})
                status, body = fake.route(self.command, self.path.split("?")[0], raw)
                self._reply(status, body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        return Handler

    def route(self, method: str, path: str, raw: str) -> tuple[int, Any]:
        parts = [p for p in path.split("/") if p]
        missing = {"error": {"type": "index_not_found_exception", "reason": "no such index"}, "status": 404}
        if parts == ["_bulk"] and method in ("POST", "PUT"):
            lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
            items = []
            for action, source in zip(lines[::2], lines[1::2]):
                meta = action["index"]
                _id = meta["_id"]
                if _id in self.reject_ids:
                    status, etype = self.reject_ids[_id]
                    items.append({"index": {"_index": meta["_index"], "_id": _id, "status": status,
                                            "error": {"type": etype, "reason": f"{etype} for {_id}"}}})
                elif _id in self.throttle_once:
                    self.throttle_once.discard(_id)
                    items.append({"index": {"_index": meta["_index"], "_id": _id, "status": 429,
                                            "error": {"type": "es_rejected_execution_exception", "reason": "queue full"}}})
                else:
                    self.indices[meta["_index"]]["docs"][_id] = source
                    items.append({"index": {"_index": meta["_index"], "_id": _id, "status": 201, "result": "created"}})
            return 200, {"took": 1, "errors": any(i["index"]["status"] >= 300 for i in items), "items": items}
        if parts == ["_aliases"] and method == "POST":
            for act in json.loads(raw)["actions"]:
                (kind, spec), = act.items()
                aliases = self.indices[spec["index"]]["aliases"]
                aliases.add(spec["alias"]) if kind == "add" else aliases.discard(spec["alias"])
            return 200, {"acknowledged": True}
        if len(parts) == 2 and parts[0] == "_alias" and method == "GET":
            found = {n: {"aliases": {parts[1]: {}}} for n, i in self.indices.items() if parts[1] in i["aliases"]}
            return (200, found) if found else (404, {"error": "alias not found", "status": 404})
        name = parts[0] if parts else ""
        if name not in self.indices and method != "PUT":  # resolve an alias to its index
            name = next((n for n, i in self.indices.items() if name in i["aliases"]), name)
        if len(parts) == 1 and method == "PUT":
            body = json.loads(raw)
            self.indices[name] = {"meta": body["mappings"]["_meta"], "docs": {}, "aliases": set(), "body": body}
            return 200, {"acknowledged": True, "index": name}
        if name not in self.indices:
            return 404, missing
        index = self.indices[name]
        if len(parts) == 1 and method == "DELETE":
            del self.indices[name]
            return 200, {"acknowledged": True}
        sub = parts[1] if len(parts) > 1 else ""
        if sub == "_mapping" and method == "GET":
            return 200, {name: {"mappings": {"_meta": index["meta"]}}}
        if sub == "_mapping" and method in ("PUT", "POST"):
            index["meta"] = json.loads(raw)["_meta"]
            return 200, {"acknowledged": True}
        if sub == "_alias" and method == "GET":
            return 200, {name: {"aliases": {a: {} for a in index["aliases"]}}}
        if sub == "_settings":
            return 200, {"acknowledged": True}
        if sub == "_refresh":
            return 200, {"_shards": {"total": 1, "successful": 1, "failed": 0}}
        if sub == "_count":
            return 200, {"count": len(index["docs"])}
        if sub == "_search":
            return 200, {"took": 1, "timed_out": False, "hits": {"hits": self.search_hits}}
        return 400, {"error": {"type": "illegal_argument_exception", "reason": f"fake: {method} {path}"}, "status": 400}

    def __enter__(self) -> "FakeES":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
