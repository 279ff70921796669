"""The schema comes from Alembic only, and the migrations match the models."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from app.db import Base, make_engine
from app.migrate import is_up_to_date
from app.models import __all__ as _tables  # noqa: F401


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
