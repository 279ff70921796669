"""Database plumbing: engine, sessions, the declarative base and portable column types.

Postgres is the production store; SQLite is the embedded default for a one-machine try-out. Both
are reached through SQLAlchemy 2; the schema itself comes only from Alembic (``migrations/``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Any

import orjson
from fastapi import Depends, Request
from sqlalchemy import DateTime, MetaData, Numeric, String, create_engine, event, func
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import Float, TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base of every table, with a constraint naming convention for Alembic."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware timestamp on every backend.

    Postgres stores ``timestamptz``. SQLite has no time zone type, so values are converted to UTC
    and stored naive, and given ``UTC`` back when read. Naive datetimes are refused on the way in
    (``ValueError``): a time without a zone is a bug somewhere upstream.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class UInt64(TypeDecorator[int]):
    """An unsigned 64-bit counter (0 … 2⁶⁴−1), exact on every backend.

    Postgres stores ``NUMERIC(20,0)``. SQLite would turn a ``NUMERIC`` value above 2⁶³−1 into a
    lossy REAL, so there the column is ``VARCHAR(20)`` holding the decimal digits (migrations
    declare ``Numeric(20, 0).with_variant(String(20), "sqlite")``). Values come back as ``int``.
    """

    impl = Numeric(20, 0)
    cache_ok = True

    def load_dialect_impl(self, dialect: Any) -> Any:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(20))
        return dialect.type_descriptor(Numeric(20, 0))

    def process_bind_param(self, value: int | None, dialect: Any) -> Any:
        if value is None:
            return None
        return str(int(value)) if dialect.name == "sqlite" else Decimal(int(value))

    def process_result_value(self, value: Any, dialect: Any) -> int | None:
        return None if value is None else int(value)


class epoch_s(FunctionElement[float]):
    """``epoch_s(ts)``: seconds since 1970-01-01 UTC of a UTCDateTime column, on both backends."""

    type = Float()
    inherit_cache = True
    name = "epoch_s"


@compiles(epoch_s, "postgresql")
def _epoch_s_pg(element: epoch_s, compiler: Any, **kw: Any) -> str:
    # date_part returns double precision; EXTRACT returns numeric since PostgreSQL 14, about
    # twice as slow to compute and compare over millions of rows. A double holds today's
    # epoch to the microsecond (< 2^53 µs), so no stored time changes.
    return f"date_part('epoch', {compiler.process(element.clauses, **kw)})"


@compiles(epoch_s, "sqlite")
def _epoch_s_sqlite(element: epoch_s, compiler: Any, **kw: Any) -> str:
    # Whole seconds from '%s' plus milliseconds from '%f' ('SS.SSS'): exact, where julianday's
    # floating point puts a sample at :30.000 into the bucket before.
    col = compiler.process(element.clauses, **kw)
    return (
        f"(CAST(strftime('%s', {col}) AS REAL) - CAST(strftime('%S', {col}) AS REAL)"
        f" + CAST(strftime('%f', {col}) AS REAL))"
    )


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def json_loads(document: str | bytes) -> Any:
    """A JSON column's value: parsed by orjson (3 × faster than ``json``: the alert evaluator
    reads the labels of every active instance each tick), by ``json`` when a number has 19
    digits or more (orjson turns an integer outside −2⁶³ … 2⁶⁴ − 1 into a float; ``json`` keeps
    it exact) or orjson refuses the document."""
    long_digits = _LONG_BYTES if isinstance(document, bytes) else _LONG_TEXT
    if long_digits.search(document) is None:  # type: ignore[arg-type]
        try:
            return orjson.loads(document)
        except orjson.JSONDecodeError:
            pass
    return json.loads(document)


_LONG_TEXT = re.compile(r"[0-9]{19}")
_LONG_BYTES = re.compile(rb"[0-9]{19}")


def make_engine(url: str) -> Engine:
    """Create an engine for ``url`` (``sqlite:///…`` or ``postgresql://…``).

    Postgres URLs without a driver use psycopg 3. SQLite gets WAL journaling, a busy timeout and
    foreign keys, and write transactions start with ``BEGIN IMMEDIATE``, so several agents
    writing at once wait their turn instead of failing.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(parsed, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            # Take over transaction control from pysqlite, whose implicit BEGIN makes SAVEPOINT
            # release commit early; see SQLAlchemy's "Serializable isolation / Savepoints" notes.
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Any) -> None:
            # IMMEDIATE (the default): writers queue on the busy timeout instead of failing
            # with SQLITE_BUSY when a read transaction tries to upgrade to a write. Sessions
            # from make_session_factory(read_only=True) begin DEFERRED, so page and API reads
            # proceed alongside a writer (WAL).
            mode = conn.get_execution_options().get("sqlite_begin", "IMMEDIATE")
            conn.exec_driver_sql(f"BEGIN {mode}")

        return engine
    # use_insertmanyvalues=False: bulk inserts go to psycopg's pipelined executemany, which
    # reports the rows actually inserted (ON CONFLICT DO NOTHING) and is several times faster
    # here than one huge multi-row statement per page (bench/ingest_rate.py).
    # Up to 20 connections, all kept once opened (opened as needed): with 10 kept and 10 more
    # closed on return, 16 nodes pushing at once opened ~3 connections a second, each a new
    # backend that created the ingest's staging tables again (~20 ms more per batch stored).
    engine = create_engine(
        parsed,
        pool_pre_ping=True,
        pool_size=20,
        max_overflow=0,
        use_insertmanyvalues=False,
        json_deserializer=json_loads,
    )

    @event.listens_for(engine, "connect")
    def _postgres_session(dbapi_conn: Any, _record: Any) -> None:
        # jit=off: the fleet-wide reads are estimated costly enough to be JIT-compiled, and the
        # compiling alone took 0.15-0.5 s per statement (the health throttle read: 485 ms of
        # JIT for 441 ms of execution). A SET, not a startup option: PgBouncer refuses unknown
        # startup parameters.
        with dbapi_conn.cursor() as cursor:
            cursor.execute("SET jit = off")
        dbapi_conn.commit()

    return engine


def make_session_factory(
    engine: Engine, *, read_only: bool = False, one_statement: bool = False
) -> sessionmaker[Session]:
    """Sessions that do not expire objects on commit (responses are built after commit).

    ``read_only`` sessions begin ``DEFERRED`` on SQLite (no write lock); they must not write.
    ``one_statement`` sessions (Postgres) run each statement in its own transaction
    (``AUTOCOMMIT``): for a session that reads one row and nothing else, such as the token
    lookup of every ingest request, this spares the ``BEGIN`` and ``COMMIT`` round trips
    around it. On SQLite they are plain sessions.
    """
    bind = engine.execution_options(sqlite_begin="DEFERRED") if read_only else engine
    if one_statement and engine.dialect.name == "postgresql":
        bind = bind.execution_options(isolation_level="AUTOCOMMIT")
    return sessionmaker(bind=bind, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any exception (re-raised)."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def get_session(request: Request) -> Iterator[Session]:
    """FastAPI dependency for read endpoints: a read-only session (see make_session_factory)."""
    with session_scope(request.app.state.read_session_factory) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def get_write_session(request: Request) -> Iterator[Session]:
    """FastAPI dependency for endpoints that write: one read-write transaction, committed when
    the endpoint returns, rolled back if it raises (see :func:`session_scope`)."""
    with session_scope(request.app.state.session_factory) as session:
        yield session


#: The write session of every endpoint that changes data. ``scope="function"`` runs the
#: teardown (the commit) when the endpoint function returns, BEFORE the response is sent:
#: with the default scope FastAPI (0.12x+) commits after the client already has its answer,
#: so a client reading right after its POST might not see its change, and a failed commit
#: would have been reported as success.
WriteSessionDep = Annotated[Session, Depends(get_write_session, scope="function")]

__all__ = [
    "Base",
    "SessionDep",
    "UInt64",
    "UTCDateTime",
    "WriteSessionDep",
    "epoch_s",
    "func",
    "make_engine",
    "utcnow",
]
