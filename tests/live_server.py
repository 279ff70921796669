"""A real uvicorn server on a free localhost port, in a thread, for HTTP-level tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """A running server: ``url`` is its base URL; ``stop()`` and ``start()`` restart it on the
    same port (for the "server down for a while" tests). ``run_jobs``: start the background
    jobs (evaluator, notification worker …) too; ``app`` is the running application."""

    def __init__(
        self, settings: Settings, port: int | None = None, *, run_jobs: bool = False
    ) -> None:
        self.settings = settings
        self.run_jobs = run_jobs
        self.app: FastAPI | None = None
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start serving and wait until the socket accepts connections (≤ 15 s)."""
        self.app = create_app(self.settings, run_jobs=self.run_jobs)
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop accepting and close the server; returns when the thread has ended."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=15)
        self._server = None
        self._thread = None


@contextmanager
def live_server(settings: Settings) -> Iterator[LiveServer]:
    """A started :class:`LiveServer`, stopped on exit."""
    server = LiveServer(settings)
    server.start()
    try:
        yield server
    finally:
        server.stop()
