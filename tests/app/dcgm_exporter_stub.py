"""A stand-in dcgm-exporter for the pull tests: ``http.server`` in a thread serving, per path,
the text it is given (a capture read in place) or an HTTP status."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ExporterStub:
    """``pages`` maps a path to the text served there, or to an ``int``: that HTTP status."""

    def __init__(self) -> None:
        self.pages: dict[str, str | int] = {}
        self.hits: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub.hits.append(self.path)
                page = stub.pages.get(self.path, 404)
                if isinstance(page, int):
                    self.send_error(page)
                    return
                body = page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> ExporterStub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def exporter(pages: dict[str, str | int]) -> Iterator[ExporterStub]:
    """A running stub serving ``pages``."""
    with ExporterStub() as stub:
        stub.pages.update(pages)
        yield stub
