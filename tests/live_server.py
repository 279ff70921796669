"""A real uvicorn server on a free localhost port, in a thread, for HTTP-level tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import uvicorn
from fastapi import FastAPI

from app.config import Settings
from app.main import create_app
from tests.admin_harness import AsTestAdmin


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _BindFailed(Exception):
    """The server's thread ended because its port was taken."""


def _port_free(port: int) -> bool:
    """Whether 127.0.0.1:``port`` can be bound now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class LiveServer:
    """A running server: ``url`` is its base URL; ``stop()`` and ``start()`` restart it on the
    same port (for the "server down for a while" tests). ``run_jobs``: start the background
    jobs (evaluator, notification worker …) too; ``app`` is the running application."""

    def __init__(
        self,
        settings: Settings,
        port: int | None = None,
        *,
        run_jobs: bool = False,
        as_admin: bool = True,
        root_path: str = "",
    ) -> None:
        self.settings = settings
        # uvicorn's --root-path: the app served under a path prefix.
        self.root_path = root_path
        self.run_jobs = run_jobs
        # Requests without credentials act as a real admin API token (tests/admin_harness.py);
        # False: the production behaviour (the access tests).
        self.as_admin = as_admin
        self.app: FastAPI | None = None
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        # A port this class picked may be taken by another process before the server binds it
        # (free_port() only saw it free): the first start then moves to another one.
        self._may_move = port is None

    def start(self) -> None:
        """Start serving and wait until the socket accepts connections (≤ 15 s). A first start
        on a port picked here that another process took meanwhile moves to a free one (up to
        three times); ``url`` follows."""
        for _ in range(3 if self._may_move else 1):
            try:
                self._start_once()
                break
            except _BindFailed:
                self.port = free_port()
                self.url = f"http://127.0.0.1:{self.port}"
        else:
            raise RuntimeError("test server did not start")
        self._may_move = False

    def _start_once(self) -> None:
        self.app = create_app(self.settings, run_jobs=self.run_jobs)
        config = uvicorn.Config(
            AsTestAdmin(self.app) if self.as_admin else self.app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
            root_path=self.root_path,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, args=(self._server,), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if not self._thread.is_alive():
                if self._may_move and not _port_free(self.port):
                    raise _BindFailed
                raise RuntimeError("test server did not start")
            if time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.02)

    @staticmethod
    def _serve(server: uvicorn.Server) -> None:
        """Run ``server``; a start-up failure (uvicorn exits with 3, a port taken) ends the
        thread quietly: :meth:`start` sees the thread gone and says so."""
        with suppress(SystemExit):
            server.run()

    def stop(self) -> None:
        """Stop accepting and close the server; returns when the thread has ended."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=15)
        self._server = None
        self._thread = None


@contextmanager
def live_server(settings: Settings, *, as_admin: bool = True) -> Iterator[LiveServer]:
    """A started :class:`LiveServer`, stopped on exit."""
    server = LiveServer(settings, as_admin=as_admin)
    server.start()
    try:
        yield server
    finally:
        server.stop()
