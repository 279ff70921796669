"""A local ingest endpoint for the agent tests: ``http.server`` in a thread, scripted replies.

A real HTTP server rather than a mock of ``urllib``, so the tests cover the agent's actual
requests: headers, gzip, timeouts, connection errors.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ACK_BODY = json.dumps({"replayed": False, "samples_stored": 0}).encode()


@dataclass
class Reply:
    """What the receiver answers to one request."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = ACK_BODY
    delay_s: float = 0.0


@dataclass
class Received:
    """One request as the receiver saw it: arrival (``time.monotonic``), path, headers, the raw
    body and the payload decoded from it (``None`` if it was not gzip JSON)."""

    at: float
    path: str
    headers: dict[str, str]
    raw: bytes
    payload: dict[str, Any] | None


class Receiver:
    """A local ingest endpoint: answers scripted replies in order, then ``default``."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.default = Reply()
        self._script: list[Reply] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    payload = json.loads(gzip.decompress(raw))
                except (OSError, ValueError):
                    payload = None
                reply = receiver._record(
                    Received(time.monotonic(), self.path, dict(self.headers), raw, payload)
                )
                time.sleep(reply.delay_s)
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except OSError:
                    pass  # the client gave up (timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with ``replies``, in order."""
        with self._lock:
            self._script.extend(replies)

    def payloads(self) -> list[dict[str, Any]]:
        """The decoded payloads received so far."""
        with self._lock:
            return [r.payload for r in self.requests if r.payload is not None]

    def _record(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            return self._script.pop(0) if self._script else self.default

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
