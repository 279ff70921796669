"""Running Alembic from the application (``fleetwatch migrate``, the demo and the tests)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from app.config import PROJECT_ROOT

MIGRATIONS_DIR = PROJECT_ROOT / "migrations"


def alembic_config(database_url: str) -> Config:
    """An Alembic ``Config`` pointing at ``migrations/`` and ``database_url``."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    cfg.set_main_option("file_template", "%%(year)d_%%(month).2d_%%(day).2d_%%(rev)s_%%(slug)s")
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate the database at ``database_url`` to ``revision`` (default: the newest)."""
    command.upgrade(alembic_config(database_url), revision)


def is_up_to_date(engine: Engine, database_url: str) -> bool:
    """True when the database is at the newest revision of ``migrations/``."""
    script = ScriptDirectory.from_config(alembic_config(database_url))
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_heads()
    return set(current) == set(script.get_heads())
