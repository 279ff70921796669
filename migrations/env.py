"""Alembic environment: the URL comes from the Config's ``sqlalchemy.url`` (set by
:func:`app.migrate.alembic_config`) or, failing that, from the Fleetwatch settings."""

from __future__ import annotations

from alembic import context

from app.config import load_settings
from app.db import Base, make_engine
from app.models import __all__ as _all_tables  # noqa: F401 - registers every table

config = context.config
url = config.get_main_option("sqlalchemy.url") or load_settings().effective_database_url


def run_migrations_offline() -> None:
    """Emit SQL to stdout instead of running it (``alembic upgrade --sql``)."""
    context.configure(url=url, target_metadata=Base.metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on a live connection, one transaction for all of them."""
    connectable = config.attributes.get("connection")
    if connectable is not None:
        _run(connectable)
        return
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite ALTER TABLE support for later migrations
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
