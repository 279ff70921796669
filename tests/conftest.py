"""Shared fixtures: migrated databases (Postgres and SQLite), live servers, clean tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Settings, load_settings
from app.migrate import upgrade
from tests.dbs import postgres_database, wipe
from tests.live_server import LiveServer


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A migrated, empty Postgres database for this test session (dropped at the end)."""
    with postgres_database() as url:
        yield url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A migrated, empty SQLite database file for this test session."""
    url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'fleetwatch.db'}"
    upgrade(url)
    return url


@pytest.fixture(params=["postgres", "sqlite"])
def db_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each backend in turn, wiped after the test."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    yield url
    wipe(url)


def make_settings(url: str, tmp: Path, **overrides: object) -> Settings:
    """Settings for a test server on ``url``."""
    return load_settings(database_url=url, data_dir=tmp, **overrides)


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """A live HTTP server on ``db_url`` (both backends)."""
    live = LiveServer(make_settings(db_url, tmp_path))
    live.start()
    yield live
    live.stop()
