"""Fixtures for the agent tests: a real HTTP receiver, a refused port, and a bounded wait
helper (no timing assertions)."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import factories
from tests.agents.agent_receiver import Receiver
from tests.conftest import make_settings
from tests.live_server import LiveServer


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """The real server on each backend in turn (``db_url``)."""
    server = LiveServer(make_settings(db_url, tmp_path / "server"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def refused_url() -> str:
    """A URL on which nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def wait_until() -> Callable[..., bool]:
    """``wait_until(predicate, timeout_s=10)``: poll until it holds; return its last value."""
    return factories.wait_until
