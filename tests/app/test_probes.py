"""``/healthz`` and ``/readyz`` on a real server, Postgres and SQLite: ready at the newest
schema; 503 naming the revisions when the schema moves away from it (and ready again once
migrated); 503 naming the database when it stops answering, while ``/healthz`` stays 200."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app import __version__, probes
from app.db import make_engine
from app.migrate import alembic_config, upgrade
from tests.conftest import make_settings
from tests.dbs import admin_url, postgres_database
from tests.live_server import LiveServer


def heads() -> list[str]:
    return sorted(ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads())


def previous_revision() -> str:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    (head,) = script.get_heads()
    down = script.get_revision(head).down_revision
    assert isinstance(down, str)
    return down


@pytest.fixture(params=["postgres", "sqlite"])
def own_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of this test's own (the test downgrades or drops it)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'probes.db'}"
        upgrade(url)
        yield url
        return
    with postgres_database() as url:
        yield url


@pytest.fixture
def own_server(own_db: str, tmp_path: Path) -> Iterator[LiveServer]:
    live = LiveServer(make_settings(own_db, tmp_path))
    live.start()
    yield live
    live.stop()


def test_ready_at_the_newest_schema_then_not_when_it_moves(own_db: str, own_server: LiveServer):
    base = own_server.url
    ready = httpx.get(f"{base}/readyz", timeout=10)
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "version": __version__, "schema": heads()}

    previous = previous_revision()
    command.downgrade(alembic_config(own_db), previous)
    behind = httpx.get(f"{base}/readyz", timeout=10)
    assert behind.status_code == 503
    assert behind.json() == {
        "status": "not ready",
        "version": __version__,
        "check": "schema",
        "reason": f"the database schema is at {previous}, this server needs {heads()[0]}: "
        "run 'fleetwatch migrate'",
        "schema": [previous],
    }
    # Liveness never asks the database: a schema problem must not get the process restarted.
    assert httpx.get(f"{base}/healthz", timeout=10).json() == {
        "status": "ok",
        "version": __version__,
    }

    upgrade(own_db)
    assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200


def test_a_schema_newer_than_the_server_is_named(own_db: str, own_server: LiveServer) -> None:
    engine = make_engine(own_db)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
        reply = httpx.get(f"{own_server.url}/readyz", timeout=10)
    finally:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": heads()[0]})
        engine.dispose()
    assert reply.status_code == 503
    body = reply.json()
    assert body["check"] == "schema"
    assert body["schema"] == ["9999_from_the_future"]
    assert body["reason"].startswith(
        f"the database schema is at 9999_from_the_future, which this server's migrations "
        f"(newest {heads()[0]}) do not know"
    )


def test_an_emptied_schema_is_not_ready(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'emptied.db'}"
    upgrade(url)
    live = LiveServer(make_settings(url, tmp_path))
    live.start()
    try:
        command.downgrade(alembic_config(url), "base")
        reply = httpx.get(f"{live.url}/readyz", timeout=10)
    finally:
        live.stop()
    assert reply.status_code == 503
    assert reply.json()["check"] == "schema"
    assert reply.json()["reason"] == "the database has no schema: run 'fleetwatch migrate'"
    assert "schema" not in reply.json()


def test_a_database_that_stops_answering_is_named(tmp_path: Path) -> None:
    with postgres_database() as url:
        live = LiveServer(make_settings(url, tmp_path))
        live.start()
        try:
            assert httpx.get(f"{live.url}/readyz", timeout=10).status_code == 200
            name = make_url(url).database
            admin = create_engine(
                make_url(admin_url()).set(drivername="postgresql+psycopg"),
                isolation_level="AUTOCOMMIT",
            )
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
            admin.dispose()
            reply = httpx.get(f"{live.url}/readyz", timeout=10)
            alive = httpx.get(f"{live.url}/healthz", timeout=10)
        finally:
            live.stop()
    assert reply.status_code == 503
    body = reply.json()
    assert body["check"] == "database"
    shown = (
        make_url(url)
        .render_as_string(hide_password=True)
        .replace("postgresql://", "postgresql+psycopg://")
    )
    assert body["reason"].startswith(f"database {shown} does not answer: OperationalError: ")
    assert f'database "{name}" does not exist' in body["reason"]
    assert alive.status_code == 200


def test_a_check_that_hangs_answers_503_in_time_and_runs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'slow.db'}"
    upgrade(url)
    release = threading.Event()
    calls = []

    def hanging(engine: object) -> probes.Readiness:
        calls.append(engine)
        release.wait(10)
        return probes.Readiness(None)

    monkeypatch.setattr(probes, "check_readiness", hanging)
    monkeypatch.setattr(probes, "READY_TIMEOUT_S", 0.3)
    live = LiveServer(make_settings(url, tmp_path))
    live.start()
    try:
        replies = [httpx.get(f"{live.url}/readyz", timeout=10) for _ in range(3)]
    finally:
        release.set()
        live.stop()
    assert [r.status_code for r in replies] == [503, 503, 503]
    assert replies[0].json()["check"] == "database"
    assert replies[0].json()["reason"].endswith("did not answer within 0.3 s")
    # The later probes waited on the first check instead of starting threads of their own.
    assert len(calls) == 1
