"""A server process collects garbage with thresholds sized for fleet pages
(:mod:`app.gc_tuning`): with CPython's defaults a 5,000-node overview paid a 240-ms full
collection every other request."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.gc_tuning import THRESHOLDS
from tests.conftest import make_settings
from tests.live_server import LiveServer


@pytest.fixture
def default_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_a_started_server_uses_the_fleet_thresholds(
    sqlite_url: str, tmp_path: Path, default_gc: None
) -> None:
    gc.set_threshold(700, 10, 10)
    server = LiveServer(make_settings(sqlite_url, tmp_path))  # in this process, a thread
    server.start()
    try:
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        assert gc.get_threshold() == THRESHOLDS == (10_000, 50, 50)
    finally:
        server.stop()
