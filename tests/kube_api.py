"""A local HTTP server that serves the subset of the Kubernetes API Fleetwatch calls and records
every request, for tests of the official client (a Kubernetes API server cannot run here): node
PATCHes, the pod list (``pods``, whatever the field selector: the tests assert the request),
evictions (``protected-0``'s refused with 429 until ``budget_allows``), and a 403 to everything
while ``forbid``. :func:`write_kubeconfig` points a kubeconfig at it with a bearer token."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOKEN = "fleetwatch-sa-token"


def write_kubeconfig(path: Path, server: str, token: str = TOKEN) -> Path:
    """A kubeconfig at ``path`` whose one context reaches ``server`` with ``token``."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gpu", "cluster": {"server": server}}],
                "users": [{"name": "fleetwatch", "user": {"token": token}}],
                "contexts": [{"name": "gpu", "context": {"cluster": "gpu", "user": "fleetwatch"}}],
                "current-context": "gpu",
            }
        )
    )
    return path


class FakeApi:
    """The API subset on ``url``; ``requests`` holds each request as a dict (method, path,
    query parsed, content type, authorization, JSON body); ``close()`` stops it."""

    def __init__(self, pods: list[Any]) -> None:
        self.pods = pods
        self.requests: list[dict[str, Any]] = []
        self.budget_allows = False
        self.forbid = False
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self) -> dict[str, Any]:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                entry = {
                    "method": self.command,
                    "path": urlsplit(self.path).path,
                    "query": parse_qs(urlsplit(self.path).query),
                    "content_type": self.headers.get("Content-Type"),
                    "authorization": self.headers.get("Authorization"),
                    "body": json.loads(raw) if raw else None,
                }
                api.requests.append(entry)
                return entry

            def _status(self, code: int, reason: str, message: str) -> None:
                self._answer(
                    code,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "message": message,
                        "reason": reason,
                        "code": code,
                    },
                )

            def _forbidden(self, entry: dict[str, Any]) -> None:
                if entry["method"] == "GET":
                    message = (
                        'pods is forbidden: User "system:serviceaccount:fleetwatch:fleetwatch" '
                        'cannot list resource "pods" in API group "" at the cluster scope'
                    )
                else:
                    message = f'nodes "{entry["path"].rsplit("/", 1)[1]}" is forbidden'
                self._status(403, "Forbidden", message)

            def do_PATCH(self) -> None:
                entry = self._record()
                if api.forbid:
                    return self._forbidden(entry)
                name = entry["path"].rsplit("/", 1)[1]
                self._answer(200, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})

            def do_GET(self) -> None:
                entry = self._record()
                if api.forbid:
                    return self._forbidden(entry)
                self._answer(
                    200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": api.pods}
                )

            def do_POST(self) -> None:
                entry = self._record()
                if api.forbid:
                    return self._forbidden(entry)
                name = entry["path"].split("/")[-2]
                if name == "protected-0" and not api.budget_allows:
                    return self._status(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                    )
                self._answer(
                    201,
                    {
                        "apiVersion": "policy/v1",
                        "kind": "Eviction",
                        "metadata": entry["body"]["metadata"],
                    },
                )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
