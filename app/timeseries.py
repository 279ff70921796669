"""Helpers shared by the per-node time-series tables (``gpu_sample``, ``disk_sample`` …): an
idempotent bulk insert and the "latest row per key" read.

Every such table has a primary key of (owner, natural key…, ``sampled_at``), so a re-sent row is
a conflict that is skipped, never a second row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, TypeVar, cast

from sqlalchemy import CursorResult, Table, and_, bindparam, func, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import InstrumentedAttribute, Session

#: Keys (a disk, a mount, a NIC port …) whose newest row is older than this, measured from the
#: newest row of the same owner, are gone (unmounted, removed) and not shown as current.
LATEST_WINDOW_S = 600.0

Row = TypeVar("Row")


def insert_ignoring_conflicts(
    session: Session, table: Table, rows: Sequence[dict[str, Any]], *, key: Sequence[str]
) -> int:
    """Insert ``rows`` into ``table``, skipping any whose primary key ``key`` is already stored
    (``ON CONFLICT DO NOTHING`` on Postgres and SQLite); returns how many went in.

    A plain executemany (psycopg pipelines it; the engine turns SQLAlchemy's "insertmanyvalues"
    off) whose summed rowcount says how many rows went in. Not ``RETURNING``: that batches rows
    into one long multi-row statement per page, which psycopg re-parses uncached every time —
    several times slower for a 480-sample batch (bench/ingest_rate.py). Where a driver cannot
    tell (rowcount -1), every row counts.
    """
    if not rows:
        return 0
    dialect = session.get_bind().dialect
    if dialect.name != "postgresql":
        plain = sqlite_insert(table).on_conflict_do_nothing(index_elements=list(key))
        done = cast(CursorResult[Any], session.execute(plain, list(rows)))
        return done.rowcount if done.rowcount >= 0 else len(rows)
    columns = list(rows[0])
    stmt = pg_insert(table).on_conflict_do_nothing(index_elements=list(key))
    # Compiled once to plain SQL with typed binds: SQLAlchemy's Core executemany reports
    # rowcount -1 on psycopg, a textual one the driver's summed count.
    sql = str(stmt.compile(dialect=dialect, column_keys=columns))
    typed = text(_to_named(sql)).bindparams(
        *(bindparam(name, type_=table.c[name].type) for name in columns)
    )
    result = cast(CursorResult[Any], session.execute(typed, list(rows)))
    return result.rowcount if result.rowcount >= 0 else len(rows)


def _to_named(sql: str) -> str:
    """Psycopg's ``%(name)s::TYPE`` placeholders as ``:name`` (the driver infers the type from
    the Python value; SQLite's are ``:name`` already)."""
    return _PYFORMAT.sub(r":\1", sql)


_PYFORMAT = re.compile(
    r"%\((\w+)\)s(?:::[A-Z][A-Z0-9_]*(?: [A-Z][A-Z0-9_]*)*(?:\(\d+(?:, ?\d+)?\))?)?"
)


def latest_per_key(
    session: Session,
    model: type[Row],
    *,
    owner: InstrumentedAttribute[int],
    owner_ids: Sequence[int],
    keys: Sequence[InstrumentedAttribute[Any]],
    window_s: float = LATEST_WINDOW_S,
) -> list[Row]:
    """The newest row of each (owner, key…) among ``owner_ids``, limited to keys reported within
    ``window_s`` of that owner's newest row. ``model`` must have a ``sampled_at`` column and an
    index on (owner, ``sampled_at``).

    One owner at a time: ``max(sampled_at)`` for a single owner is a backward index probe,
    where an ``IN`` list would scan every row the owners ever stored.
    """
    sampled_at: InstrumentedAttribute[Any] = model.sampled_at  # type: ignore[attr-defined]
    rows: list[Row] = []
    for owner_id in owner_ids:
        newest = session.scalar(select(func.max(sampled_at)).where(owner == owner_id))
        if newest is None:
            continue
        newest_per_key = (
            select(*keys, func.max(sampled_at).label("newest_at"))
            .where(owner == owner_id, sampled_at >= newest - timedelta(seconds=window_s))
            .group_by(*keys)
            .subquery()
        )
        join_on = and_(
            *(column == newest_per_key.c[column.key] for column in keys),
            sampled_at == newest_per_key.c.newest_at,
        )
        stmt = select(model).join(newest_per_key, join_on).where(owner == owner_id)
        rows.extend(session.scalars(stmt))
    return rows


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that orders the numbers inside ``name`` by value: ``mlx5_2`` before
    ``mlx5_10``, ``nvme2n1`` before ``nvme10n1``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)
    )
