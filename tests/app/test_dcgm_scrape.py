"""Fetching a dcgm-exporter page over real HTTP: an answer that never ends, or drips in under
the read timeout, is cut at the scrape's deadline instead of holding up the round."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from app.dcgm.scrape import fetch


@contextmanager
def dripping_exporter(every_s: float) -> Iterator[str]:
    """A server whose ``/metrics`` answer does not end (for 5 s, so that a fetch without a
    deadline fails this test instead of hanging it): a comment line every ``every_s``."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            until = time.monotonic() + 5
            try:
                while not stop.is_set() and time.monotonic() < until:
                    self.wfile.write(b"# still here\n")
                    self.wfile.flush()
                    time.sleep(every_s)
            except OSError:  # the client hung up
                pass

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def test_a_body_that_never_ends_is_cut_at_the_scrape_timeout() -> None:
    with dripping_exporter(every_s=0.05) as url, httpx.Client(timeout=0.5) as client:
        got = fetch(client, url)
    assert got.text is None
    assert got.error == "timed out after 0.5 s (the body was still coming)"
    # The deadline is the timeout, plus at most one read's wait: never the body's pace.
    assert 0.5 <= got.duration_s < 1.5
