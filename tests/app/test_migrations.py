"""The schema comes from Alembic only, the migrations match the models, and upgrading a
database that already holds data keeps it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from app.db import Base, make_engine
from app.migrate import is_up_to_date, upgrade
from app.models import __all__ as _tables  # noqa: F401
from tests.dbs import database_at


def test_migrations_build_every_table_the_models_declare(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        names = set(inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= names
        assert is_up_to_date(engine, db_url)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == []
    finally:
        engine.dispose()


def test_timestamps_are_timezone_aware_in_postgres(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    try:
        columns = {c["name"]: c for c in inspect(engine).get_columns("gpu_sample")}
        assert columns["sampled_at"]["type"].timezone is True
    finally:
        engine.dispose()


@pytest.fixture(params=["postgres", "sqlite"])
def old_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of either backend, migrated to head and back down to 0001."""
    with database_at(request.param, "0001", tmp_path) as url:
        yield url


def test_upgrading_a_database_with_data_from_0001_keeps_it(old_database: str) -> None:
    url = old_database
    engine = make_engine(url)
    try:
        assert "nfs_sample" not in inspect(engine).get_table_names()
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO node (id, hostname, labels, created_at) "
                    "VALUES (1, 'old-node', '{}', :at)"
                ),
                {"at": "2026-11-01 00:00:00+00:00"},
            )
            conn.execute(
                text(
                    'INSERT INTO gpu (id, node_id, uuid, "index", state, first_seen_at, '
                    "last_seen_at) VALUES (1, 1, 'GPU-old', 0, 'ok', :at, :at)"
                ),
                {"at": "2026-11-01 00:00:00+00:00"},
            )
            conn.execute(
                text(
                    "INSERT INTO gpu_sample (gpu_id, sampled_at, received_at, util_gpu_pct) "
                    "VALUES (1, :at, :at, 42)"
                ),
                {"at": "2026-11-01 00:00:00+00:00"},
            )
        upgrade(url)
        assert is_up_to_date(engine, url)
        with engine.connect() as conn:
            row = conn.execute(
                text("SELECT util_gpu_pct, pcie_link_gen, remapped_rows_failure FROM gpu_sample")
            ).one()
            gpu = conn.execute(text("SELECT uuid, unavailable, processes FROM gpu")).one()
            node = conn.execute(text("SELECT hostname, collector FROM node")).one()
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert tuple(row) == (42, None, None)
        assert tuple(gpu) == ("GPU-old", None, None)
        assert tuple(node) == ("old-node", None)
        assert diff == []
    finally:
        engine.dispose()
