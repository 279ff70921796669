"""Test databases: a fresh migrated Postgres database and a migrated SQLite file per session.

Postgres comes from ``FLEETWATCH_TEST_DATABASE_URL`` (a server URL; the tests create and drop their
own database on it), else ``postgresql://postgres@127.0.0.1:5432/postgres``. Where no Postgres
answers, Postgres tests are skipped, except under ``CI=true`` where that is a failure.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.db import make_engine, make_session_factory
from app.migrate import alembic_config, upgrade

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def admin_url() -> str:
    """The Postgres server URL tests create their databases on."""
    return os.environ.get("FLEETWATCH_TEST_DATABASE_URL", DEFAULT_ADMIN_URL)


def _psycopg(url: str) -> str:
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


@contextmanager
def postgres_database(*, migrate: bool = True) -> Iterator[str]:
    """Create ``fleetwatch_test_<random>``, migrate it (unless ``migrate`` is false: a bench
    that migrates it with another checkout's code), yield its URL, then drop it."""
    admin = _psycopg(admin_url())
    name = f"fleetwatch_test_{uuid.uuid4().hex[:10]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        engine.dispose()
        message = f"PostgreSQL not reachable at {make_url(admin).render_as_string()}: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    url = make_url(admin).set(database=name).render_as_string(hide_password=False)
    try:
        if migrate:
            upgrade(url)
        yield url
    finally:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


@contextmanager
def database_at(backend: str, revision: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of ``backend`` (``postgres`` or ``sqlite``, a file under
    ``tmp_path``) migrated to head and back down to ``revision``; yields its URL."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
        upgrade(url)
        command.downgrade(alembic_config(url), revision)
        yield url
        return
    with postgres_database() as url:
        command.downgrade(alembic_config(url), revision)
        yield url


TABLES = (
    "dcgm_endpoint",  # its node_id is SET NULL, not cascaded, on SQLite
    "node_event",
    "gpu_sample",
    "ingest_batch",
    "node_token",
    "gpu",
    "node",
    "topology_drift_state",  # no foreign key to node: not emptied by the cascade
    "disk_sample_fleet_1m",  # fleet-wide sums: no node, no cascade
    "nfs_sample_fleet_1m",
    "nic_port_sample_fleet_1m",
    "sample_arrival",  # the ingest's feed to the alert evaluator: no foreign key either
    "circuit_breaker",  # one row, no foreign key
    # the raw sample tables have no foreign key to node or gpu (revision 0019)
    "nvlink_sample",
    "disk_sample",
    "mount_sample",
    "nfs_sample",
    "nic_port_sample",
    # Failed logins count per client address (all tests are 127.0.0.1) and the audit trail:
    # not carried from one test to the next. Users and tokens stay (the test-admin token of a
    # running server must outlive a wipe inside a test; tests name their users uniquely).
    "login_failure",
    "audit_event",
    # Enrollment tokens are not the test admin's: a test that lists them sees only its own.
    "enrollment_token",
    # A window selects nodes by matchers, not by key: one left in force (schemathesis posts
    # them) would mute the next test's nodes of the same names.
    "maintenance_window",
)


@contextmanager
def session_factory(url: str) -> Iterator[Any]:
    """A session factory on ``url``, its engine disposed at the end."""
    engine = make_engine(url)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()


def wipe(url: str) -> None:
    """Delete every row of every table (between tests sharing one database)."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
            else:
                for table in TABLES:
                    conn.execute(text(f"DELETE FROM {table}"))
    finally:
        engine.dispose()
