"""What the ingest stored since a reader last asked: a feed of ``(series, owner, first, last)``
rows, one per owner (a GPU) and batch, naming the ``sampled_at`` range of the rows that went in.

The alert evaluator keeps each GPU's recent samples in memory
(:mod:`app.series.recent_gpu`) and reads only what arrived since its last tick instead of
scanning every GPU's window again (464,000 rows at 1,000 nodes every 10 s). Timestamps cannot
tell it what arrived: a batch that commits late, or a spool replayed after an outage, brings
rows older than ones already read. The feed is a queue instead: the ingest appends a row in
the transaction that stores the samples (on Postgres inside the staged move,
:func:`record_cte`, or after a straight COPY, :func:`record_unnest_sql`), and the one reader
takes what is committed with ``DELETE … RETURNING`` (:func:`taken_cte`); a row committed
later is still there at the next take, and a take rolled back leaves its rows for the next.

* One reader: the process that leads the alert evaluation (its lane lock and leadership make
  it the only one); a reader that was not reading continuously reloads whole
  (:data:`KEEP_S`).
* Postgres only. SQLite is one process serving a small fleet: its reader reloads every time.
* Bounded without a reader: retention deletes rows older than :data:`KEEP_S`
  (:func:`prune`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CTE, Column, CursorResult, Integer, String, Table, delete, text
from sqlalchemy.orm import Session

from app.db import Base, UTCDateTime

#: Rows older than this (server clock) are pruned; a reader whose last take is older than half
#: of it reloads instead of trusting the feed.
KEEP_S = 3600.0

sample_arrival = Table(
    "sample_arrival",
    Base.metadata,
    Column("series", String(32), nullable=False),
    Column("owner_id", Integer, nullable=False),
    Column("first_at", UTCDateTime(), nullable=False),
    Column("last_at", UTCDateTime(), nullable=False),
    Column("arrived_at", UTCDateTime(), nullable=False, server_default=text("CURRENT_TIMESTAMP")),
)
"""No primary key and no index: rows are appended and taken whole, never looked up one by one
(retention's scan finds at most an hour of them)."""


def record_cte(name: str, series: str, moved: str) -> str:
    """A ``WITH`` part named ``name`` appending one feed row per owner of ``moved`` (a CTE
    returning ``owner, sampled_at`` of the rows that went in), for the staged move of
    :func:`app.series.writes.insert_staged`. ``series`` is a table name (no quoting needed)."""
    return (
        f"{name} AS (INSERT INTO sample_arrival (series, owner_id, first_at, last_at) "
        f"SELECT '{series}', owner, min(sampled_at), max(sampled_at) FROM {moved} "
        "GROUP BY owner)"
    )


def record_unnest_sql(series: str) -> str:
    """A statement appending feed rows of ``series`` (a table name, no quoting needed) from
    three psycopg parameters, arrays of equal length: owners (``integer[]``), first and last
    ``sampled_at`` (``timestamptz[]``); for :func:`app.series.writes.insert_staged` when its
    rows went straight into the table (every one stored)."""
    return (
        "INSERT INTO sample_arrival (series, owner_id, first_at, last_at) "
        f"SELECT '{series}', o, f, l FROM unnest(%s::integer[], %s::timestamptz[], "
        "%s::timestamptz[]) AS t(o, f, l)"
    )


def taken_cte(series: str) -> CTE:
    """A ``WITH`` part named ``taken`` removing and returning ``(owner_id, first_at, last_at)``
    of every committed feed row of ``series`` (Postgres: a data-modifying CTE)."""
    t = sample_arrival
    return (
        delete(t)
        .where(t.c.series == series)
        .returning(t.c.owner_id, t.c.first_at, t.c.last_at)
        .cte("taken")
    )


def clear(session: Session, *, series: str) -> int:
    """Remove every committed feed row of ``series`` (a reader about to reload whole); returns
    how many."""
    result = cast(
        CursorResult[Any],
        session.execute(delete(sample_arrival).where(sample_arrival.c.series == series)),
    )
    return int(result.rowcount or 0)


def prune(session: Session, *, now: datetime) -> int:
    """Delete feed rows that arrived more than :data:`KEEP_S` before ``now``; returns how
    many (a fleet with no reader keeps an hour of them)."""
    cutoff = now - timedelta(seconds=KEEP_S)
    result = cast(
        CursorResult[Any],
        session.execute(delete(sample_arrival).where(sample_arrival.c.arrived_at < cutoff)),
    )
    return int(result.rowcount or 0)
