"""Shared by the sample-store tests: a session factory on Postgres with the rollup marks
cleared, the tables wiped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import delete
from sqlalchemy.orm import Session, sessionmaker

from app.db import make_engine, make_session_factory, session_scope
from app.series.rollups.models import rollup_watermark
from tests.dbs import wipe


@contextmanager
def store_factory(url: str) -> Iterator[sessionmaker[Session]]:
    """A session factory on ``url`` with no rollup marks; every table wiped on exit."""
    engine = make_engine(url)
    try:
        made = make_session_factory(engine)
        with session_scope(made) as s:
            s.execute(delete(rollup_watermark))
        yield made
    finally:
        engine.dispose()
        wipe(url)
