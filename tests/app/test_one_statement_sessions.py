"""``make_session_factory(one_statement=True)`` (the ingest's token lookup): on Postgres each
statement is its own transaction, and the pooled connection goes back to the sessions that
need one transaction unchanged; on SQLite a plain session."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.db import make_engine, make_session_factory, session_scope


def _two_clock_reads(factory: sessionmaker[Session]) -> tuple[datetime, datetime]:
    with session_scope(factory) as session:
        first = session.execute(text("SELECT now()")).scalar_one()
        time.sleep(0.02)
        second = session.execute(text("SELECT now()")).scalar_one()
    return first, second


def test_each_statement_is_its_own_transaction_and_the_pool_stays_transactional(
    postgres_url: str,
) -> None:
    engine = make_engine(postgres_url)
    try:
        one_statement = make_session_factory(engine, one_statement=True)
        plain = make_session_factory(engine)
        first, second = _two_clock_reads(one_statement)
        assert first != second  # now() is the transaction's start: two transactions
        for _ in range(3):  # the same pooled connection again, in a plain session
            first, second = _two_clock_reads(plain)
            assert first == second
        assert engine.pool.checkedout() == 0
    finally:
        engine.dispose()


def test_on_sqlite_it_is_a_plain_session(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'one.db'}")
    try:
        factory = make_session_factory(engine, one_statement=True)
        assert factory.kw["bind"] is engine
        with session_scope(factory) as session:
            assert session.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        engine.dispose()
