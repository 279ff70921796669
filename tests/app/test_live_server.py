"""The test server helper: a port another process takes between picking it and binding it
moves the first start to a free one (a flaky 'address already in use' otherwise)."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_settings
from tests.live_server import LiveServer


def test_a_port_taken_before_the_first_start_moves_to_a_free_one(
    sqlite_url: str, tmp_path: Path
) -> None:
    server = LiveServer(make_settings(sqlite_url, tmp_path))
    taken = server.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        server.start()
        try:
            assert server.port != taken and server.url.endswith(f":{server.port}")
            assert httpx.get(f"{server.url}/api/v1/nodes", timeout=10).status_code == 200
        finally:
            server.stop()


def test_a_port_given_by_the_caller_never_moves(sqlite_url: str, tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        server = LiveServer(make_settings(sqlite_url, tmp_path), port=taken)
        with pytest.raises(RuntimeError, match="did not start"):
            server.start()
        server.stop()
